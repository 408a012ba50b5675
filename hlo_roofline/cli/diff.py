"""``diff A B``: two reports matched op by op."""

from __future__ import annotations

from pathlib import Path

import click

from hlo_roofline._json import dumps
from hlo_roofline.check import Rules, check, coverage_violations, violation_table
from hlo_roofline.cli._common import (
    CONTEXT,
    PathOrUrl,
    chip_option,
    format_option,
    input_errors,
    load_report,
    percent_option,
    top_option,
    trust_option,
)
from hlo_roofline.cli.render import diff_text
from hlo_roofline.diff import compare, judged_alike


@click.command("diff", context_settings=CONTEXT, short_help="Compare two reports op by op.")
@click.argument("a", type=PathOrUrl(exists=True, path_type=Path), metavar="A")
@click.argument("b", type=PathOrUrl(exists=True, path_type=Path), metavar="B")
@chip_option
@percent_option("--fail-on-regression", "Exit 1 if B's predicted step is more than PCT% slower "
                "than A's.", rule="max_regression")  # fmt: skip
@percent_option("--min-coverage", "Exit 1 if fewer than PCT% of the ops of A or of B are "
                "priced (an unknown coverage fails too).")  # fmt: skip
@format_option("table", "csv", "json")
@top_option
@trust_option
def diff_command(a, b, chip, fail_on_regression, min_coverage, fmt, top, trust_unsigned):
    """Compare two reports op by op: bound flips, time deltas, added and removed ops.

    Ops are matched by (op_name, source, opcode, shape), then without the shape, since fusion
    names change between compiles; duplicates pair up in program order. B is judged against A's
    chip (or both against --chip). Ops whose FLOPs are unknown are named per side, with each
    side's coverage.

    \b
    Example:
      $ hlo-roofline diff small.json large.json
      $ hlo-roofline diff small.json large.json --format csv
      $ hlo-roofline diff small.json large.json --fail-on-regression 5  # exit 1
      $ hlo-roofline diff small.json large.json --min-coverage 99
    """
    report_a = load_report(a, chip, trust_unsigned)
    report_b = load_report(b, chip, trust_unsigned)
    with input_errors():
        diff = compare(report_a, report_b)
    if fmt == "json":
        click.echo(dumps(diff.to_dict()))
    elif fmt == "csv":
        click.echo(diff.ops.to_csv(index=False), nl=False)
    else:
        click.echo(diff_text(diff, top))
    failed = []
    if min_coverage is not None:
        violations = coverage_violations(report_a, min_coverage, "A")
        violations += coverage_violations(report_b, min_coverage, "B")
        if violations:
            if fmt == "table":
                click.echo("\n" + violation_table(violations))
            failed.append(f"coverage below {min_coverage:g}%")
    if fail_on_regression is not None:
        _, report_b, _ = judged_alike(report_a, report_b)
        rules = Rules(max_regression=fail_on_regression, baseline=str(a))
        result = check(report_b, rules, report_a)
        if not result.passed:
            if fmt == "table":
                click.echo("\n" + result.table())
            failed.append(f"predicted step regressed more than {fail_on_regression:g}%")
    if failed:
        click.echo(f"failed: {'; '.join(failed)}", err=fmt != "table")
        raise SystemExit(1)
