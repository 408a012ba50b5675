"""``check REPORT | --from FILE.py:NAME``: the CI gate."""

from __future__ import annotations

import json
from pathlib import Path

import click

from hlo_roofline.check import (
    REQUIRABLE,
    CheckResult,
    RuleError,
    Rules,
    check,
    pyproject_rules,
    read_rules,
)
from hlo_roofline.cli._common import (
    CONTEXT,
    _format_option,
    _input_errors,
    _load_report,
    _note,
    _one_line,
    _regex,
    chip_option,
    cost_model_option,
    no_cache_option,
    target_option,
)
from hlo_roofline.cli.analyze import _compile


@click.command(
    "check", context_settings=CONTEXT, short_help="CI gate: bounds, memory share, regression."
)
@click.argument("report_path", metavar="[REPORT]", required=False, type=click.Path(path_type=Path))
@click.option("--from", "entry", metavar="FILE.py:NAME", help="Compile this step instead.")
@chip_option
@target_option
@cost_model_option
@click.option("--rules", "rules_path", metavar="FILE",
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="TOML rules (top-level keys or [tool.hlo-roofline.check]).")  # fmt: skip
@click.option("--select", callback=_regex, metavar="REGEX",
              help="Ops whose name, opcode, op_name, source or user line matches.")  # fmt: skip
@click.option("--min-share", type=click.FloatRange(0, 100), metavar="PCT",
              help="Ops taking at least PCT% of the predicted step.")  # fmt: skip
@click.option("--require", type=click.Choice(REQUIRABLE),
              help="Every selected op must have this bound.")  # fmt: skip
@click.option("--max-memory-share", type=click.FloatRange(0, 100), metavar="PCT",
              help="Memory-bound selected ops take at most PCT% of the step.")  # fmt: skip
@click.option("--min-coverage", type=click.FloatRange(0, 100), metavar="PCT",
              help="At least PCT% of the ops have a known cost.")  # fmt: skip
@click.option("--max-exposed-comm", type=click.FloatRange(0, 100), metavar="PCT",
              help="Communication not hidden behind compute is at most PCT% of the scheduled "
                   "step.")  # fmt: skip
@click.option("--baseline", type=click.Path(path_type=Path), metavar="REPORT",
              help="Report to compare the predicted step time with.")  # fmt: skip
@click.option("--max-hbm", type=float, metavar="PCT",
              help="The step needs at most PCT% of one device's HBM (compile with --from to know "
              "its temporaries).")  # fmt: skip
@click.option("--max-regression", type=float, metavar="PCT",
              help="The step may be at most PCT% slower than --baseline.")  # fmt: skip
@no_cache_option
@_format_option("table", "json")
def check_command(report_path, entry, chip, target, cost_model, rules_path, no_cache, fmt, **flags):
    """Gate CI on roofline rules: exit 0 pass, 1 with a table of violations, 2 bad input.

    Rules come from the flags, over --rules FILE, else over [tool.hlo-roofline.check] in the
    nearest pyproject.toml. REPORT is a CSV or JSON written by `analyze`/`hlo` (or a TensorBoard
    run directory); --chip re-judges it against another chip.

    \b
    Example:
      $ hlo-roofline check large.json --select dot_general --require compute
      $ hlo-roofline check --from steps.py:elementwise_step --chip v5e --require compute  # exit 1
      $ hlo-roofline check large.json --max-memory-share 50 --min-coverage 95
      $ hlo-roofline check large.json --baseline small.json --max-regression 10  # exit 1
    """
    if (report_path is None) == (entry is None):
        raise click.UsageError("give a REPORT or --from FILE.py:NAME (exactly one)")
    if target is not None and entry is None:
        raise click.UsageError("--target compiles a step: use it with --from FILE.py:NAME")
    with _input_errors():
        rules = _rules(rules_path, flags)
    if rules.empty:
        raise click.UsageError(
            "no rules: pass --require, --max-memory-share, --min-coverage, --max-hbm, "
            "--max-exposed-comm, --max-regression or --rules FILE, or add "
            "[tool.hlo-roofline.check] to pyproject.toml"
        )
    if entry is not None:
        report = _compile(entry, chip, target, cost_model, no_cache=no_cache)
    else:
        report = _load_report(report_path, chip)
    baseline = None
    if rules.baseline is not None:
        baseline = _load_report(Path(rules.baseline), None)
    with _input_errors():
        result = check(report, rules, baseline)
    _print_result(result, fmt, f"{len(result.selected)} ops selected")


def _rules(rules_path: Path | None, flags: dict) -> Rules:
    if rules_path is not None:
        base = read_rules(rules_path)
    else:
        found = pyproject_rules(Path.cwd())
        base = found[0] if found else Rules()
        if found:
            _note(f"rules from {found[1]}")
    try:
        return base.merged(**flags)
    except RuleError as exc:
        raise click.UsageError(_one_line(exc)) from None


def _print_result(result: CheckResult, fmt: str, passed_note: str) -> None:
    if fmt == "json":
        click.echo(
            json.dumps(
                {
                    "passed": result.passed,
                    "rules": result.rules.describe(),
                    "violations": [v.__dict__ for v in result.violations],
                }
            )
        )
    elif result.passed:
        click.echo(f"passed: {result.rules.describe()} ({passed_note})")
    else:
        click.echo(result.table())
        click.echo(f"\nfailed: {len(result.violations)} violation(s) of {result.rules.describe()}")
    if not result.passed:
        raise SystemExit(1)
