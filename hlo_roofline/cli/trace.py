"""``trace TRACE|DIR``: a jax.profiler trace joined with the roofline of the HLO inside it."""

from __future__ import annotations

from pathlib import Path

import click

from hlo_roofline import measured
from hlo_roofline.cli._common import (
    CONTEXT,
    InputError,
    check_run,
    chip_option,
    emit,
    format_option,
    one_line,
    output_options,
    top_option,
)


@click.command(
    "trace", context_settings=CONTEXT, short_help="Join a jax.profiler trace with its roofline."
)
@click.argument("path", type=click.Path(exists=True, path_type=Path), metavar="TRACE|DIR")
@chip_option
@output_options
@format_option("table", "csv", "json")
@top_option
def trace_command(path, chip, csv_path, json_path, logdir, run, plot_path, fmt, top):
    """Read a jax.profiler trace (an .xplane.pb or a directory holding one) and join the measured
    per-op times with the roofline of the optimized HLO embedded in it (nothing is recompiled).

    \b
    Example:
      $ hlo-roofline trace logs/ --chip host
    """
    check_run(logdir, run)
    try:
        result = measured.read_trace(path, chip=chip)
    except measured.TraceError as exc:
        raise InputError(one_line(exc)) from None
    reports = result if isinstance(result, dict) else {path.stem: result}
    emit(reports, fmt, top, csv_path, json_path, logdir, run or path.stem, plot_path)
