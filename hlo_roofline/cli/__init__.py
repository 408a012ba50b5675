"""The ``hlo-roofline`` command: a thin face over :mod:`~hlo_roofline.api`, reports, checks and diffs.

One module per command (click's ``add_command``), the text they print in :mod:`.render`, what they
share (one-line errors, options, saving reports) in :mod:`._common`.

Exit codes: 0 success, 1 a check (or ``diff --fail-on-regression``) failed, 2 bad usage or
unreadable input. Errors are one line on stderr, never a traceback. Data goes to stdout; notes on
files written go to stderr, so ``--format csv|json`` output can be piped.
"""

from __future__ import annotations

import warnings

import click

from hlo_roofline.cli import analyze as _analyze
from hlo_roofline.cli import cache as _cache
from hlo_roofline.cli import check as _check
from hlo_roofline.cli import chips as _chips
from hlo_roofline.cli import demo as _demo
from hlo_roofline.cli import diff as _diff
from hlo_roofline.cli import explore as _explore
from hlo_roofline.cli import plot as _plot
from hlo_roofline.cli import trace as _trace
from hlo_roofline.cli._common import CONTEXT, load_entry, opened_entry, quiet_remote_logs
from hlo_roofline.cli.render import cut_middle, ops_table, shorten_path, summary_text

__all__ = [
    "cut_middle",
    "load_entry",
    "main",
    "opened_entry",
    "ops_table",
    "shorten_path",
    "summary_text",
]


@click.group(context_settings=CONTEXT)
@click.version_option(package_name="hlo_roofline", prog_name="hlo-roofline")
def main() -> None:
    """Per-op roofline analysis of the optimized HLO XLA compiles for your step.

    Exit codes: 0 pass, 1 check failed, 2 bad usage or unreadable input.

    \b
    Example:
      $ hlo-roofline chips
      $ hlo-roofline analyze steps.py:matmul_step --chip v5e
      $ hlo-roofline check large.json --select dot_general --require compute
    """
    warnings.showwarning = _show_warning
    quiet_remote_logs()


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Python warnings (a chip judged against another's program, HLO before optimization) as
    one-line messages on stderr, like the command's other notes."""
    click.echo(f"warning: {message}", err=True)


for _command in (
    _analyze.analyze,
    _analyze.hlo_command,
    _chips.chips_command,
    _check.check_command,
    _diff.diff_command,
    _plot.plot_command,
    _trace.trace_command,
    _demo.demo_command,
    _cache.cache_command,
    _explore.explore_command,
):
    main.add_command(_command)
