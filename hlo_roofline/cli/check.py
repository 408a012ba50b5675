"""``check REPORT | --from FILE.py:NAME``: the CI gate."""

from __future__ import annotations

from pathlib import Path

import click
import jax

from hlo_roofline._json import dumps
from hlo_roofline.check import (
    COMPLETE_RULE,
    GAP_RULE,
    KINDS,
    REQUIRABLE,
    CheckResult,
    ExploreGateResult,
    RuleError,
    Rules,
    check,
    explore_gate,
    pyproject_rules,
    read_rules,
    refused,
    violation_table,
)
from hlo_roofline.cli._common import (
    CONTEXT,
    InputError,
    PathOrUrl,
    chip_option,
    compile_entry,
    cost_model_option,
    format_option,
    input_errors,
    load_report,
    no_cache_option,
    note,
    one_line,
    percent_option,
    regex_callback,
    target_option,
    trust_option,
)


def _kinds(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]):
    """``--kind a --kind b`` or ``--kind a,b``: None when not given (a file's rule stands)."""
    kinds = tuple(k for item in value for k in item.split(",") if k)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise click.BadParameter(f"unknown kind {unknown[0]!r} (one of {', '.join(KINDS)})")
    return kinds or None


_KIND_HELP = ", ".join(KINDS)


@click.command(
    "check", context_settings=CONTEXT, short_help="CI gate: bounds, memory share, regression."
)
@click.argument("report_path", metavar="[REPORT]", required=False, type=PathOrUrl(path_type=Path))
@click.option("--from", "entry", metavar="FILE.py:NAME", help="Compile this step instead.")
@chip_option
@target_option
@cost_model_option
@click.option("--rules", "rules_path", metavar="FILE",
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="TOML rules (top-level keys or [tool.hlo-roofline.check]).")  # fmt: skip
@click.option("--select", callback=regex_callback, metavar="REGEX",
              help="Ops whose name, opcode, op_name, source or user line matches.")  # fmt: skip
@click.option("--exclude", callback=regex_callback, metavar="REGEX",
              help="Leave out ops whose name, opcode, op_name, source or user line matches.")  # fmt: skip
@click.option("--kind", multiple=True, callback=_kinds, metavar="KIND",
              help=f"Only ops of this kind: {_KIND_HELP} (repeat, or a,b, for several; "
                   "hlo_roofline.check.KINDS says what each is).")  # fmt: skip
@click.option("--exclude-kind", multiple=True, callback=_kinds, metavar="KIND",
              help="Leave out ops of this kind (e.g. collective: reduce-scatter fusions too).")  # fmt: skip
@percent_option("--min-share", "Ops taking at least PCT% of the predicted step.")
@click.option("--require", type=click.Choice(REQUIRABLE),
              help="Every selected op must have this bound.")  # fmt: skip
@percent_option("--max-memory-share", "Memory-bound selected ops take at most PCT% of the step.")
@percent_option("--min-coverage", "At least PCT% of the ops have a known cost.")
@percent_option("--max-exposed-comm", "Communication not hidden behind compute is at most PCT% "
                "of the scheduled step.")  # fmt: skip
@click.option("--baseline", type=PathOrUrl(path_type=Path), metavar="REPORT",
              help="Report to compare the predicted step time with.")  # fmt: skip
@percent_option("--max-hbm", "The step needs at most PCT% of one device's HBM, over 100 allowed "
                "(compile with --from to know its temporaries).")  # fmt: skip
@percent_option("--max-regression", "The step may be at most PCT% slower than --baseline.")
@click.option("--explore", "explore_path", type=click.Path(path_type=Path), metavar="RESULT",
              help="Gate an exploration instead (explore --json/--csv, or its --logdir): "
                   "with --layout and --max-gap-to-best.")  # fmt: skip
@click.option("--layout", metavar="LAYOUT",
              help="The configured layout in --explore: its label, or NAME=VALUE pairs "
                   "(data=16,tensor=4).")  # fmt: skip
@click.option("--max-gap-to-best", type=float, metavar="PCT",
              help="The configured layout may be at most PCT% slower than the best explored.")  # fmt: skip
@click.option("--allow-missing", "allow_missing", multiple=True, metavar="LAYOUT",
              help="In --explore, candidates that may lack an answer (crashed, timed out, "
                   "raised): a label, NAME=VALUE pairs, or 'any' (repeatable). Without it an "
                   "incomplete exploration fails.")  # fmt: skip
@no_cache_option
@format_option("table", "json")
@trust_option
def check_command(
    report_path, entry, chip, target, cost_model, rules_path, no_cache, fmt, trust_unsigned,
    **flags,
):
    """Gate CI on roofline rules: exit 0 pass, 1 with a table of violations, 2 bad input or a rule
    the report cannot decide (--max-hbm on a need known only as a lower bound: "unknown").

    A step the compiler refuses (out of memory, or any compiler error with --from) fails every
    rule with the compiler's reason: exit 1.

    Rules come from the flags, over --rules FILE, else over [tool.hlo-roofline.check] in the
    nearest pyproject.toml. REPORT is a CSV or JSON written by `analyze`/`hlo` (or a TensorBoard
    run directory); --chip re-judges it against another chip.

    \b
    Example:
      $ hlo-roofline check large.json --select dot_general --require compute
      $ hlo-roofline check large.json --select dot_general --exclude-kind collective --require compute
      $ hlo-roofline check --from steps.py:elementwise_step --chip v5e --require compute  # exit 1
      $ hlo-roofline check large.json --max-memory-share 50 --min-coverage 95
      $ hlo-roofline check large.json --baseline small.json --max-regression 10  # exit 1
      $ hlo-roofline check --explore fixtures/explore/h100_gate --layout data=2,tensor=4 --max-gap-to-best 5
      $ hlo-roofline check --explore fixtures/explore/h100_gate --layout data=8 --max-gap-to-best 10  # exit 1
    """
    gate = {k: flags.pop(k) for k in ("explore_path", "layout", "max_gap_to_best")}
    allow_missing = flags.pop("allow_missing")
    if any(v is not None for v in gate.values()) or allow_missing:
        _explore_gate(report_path, entry, rules_path, flags, fmt, allow_missing=allow_missing, **gate)
        return
    if (report_path is None) == (entry is None):
        raise click.UsageError("give a REPORT or --from FILE.py:NAME (exactly one)")
    if target is not None and entry is None:
        raise click.UsageError("--target compiles a step: use it with --from FILE.py:NAME")
    with input_errors():
        rules = _rules(rules_path, flags)
    if rules.empty:
        raise click.UsageError(
            "no rules: pass --require, --max-memory-share, --min-coverage, --max-hbm, "
            "--max-exposed-comm, --max-regression or --rules FILE, or add "
            "[tool.hlo-roofline.check] to pyproject.toml"
        )
    if entry is not None:
        try:
            report = compile_entry(entry, chip, target, cost_model, no_cache=no_cache)
        except InputError as exc:
            reason = _compiler_error(exc)
            if reason is None:
                raise
            _print_result(refused(rules, reason), fmt, "")
            return
    else:
        report = load_report(report_path, chip, trust_unsigned)
    baseline = None
    if rules.baseline is not None:
        baseline = load_report(Path(rules.baseline), None, trust_unsigned)
    with input_errors():
        result = check(report, rules, baseline)
    _print_result(result, fmt, f"{len(result.selected)} ops selected")


def _explore_gate(
    report_path, entry, rules_path, flags, fmt, explore_path, layout, max_gap_to_best, allow_missing
):
    """``check --explore RESULT --layout L --max-gap-to-best X``: the configured layout against
    the best the explorer found (exit 1 when more than X% slower, not compiled or fitting, or
    when the exploration is incomplete past what ``--allow-missing`` names)."""
    from hlo_roofline import explorer  # a face too: reads the explorer's own files

    if explore_path is None or layout is None or max_gap_to_best is None:
        raise click.UsageError("--explore RESULT, --layout and --max-gap-to-best go together")
    others = [f"--{k.replace('_', '-')}" for k, v in flags.items() if v is not None]
    if report_path is not None or entry is not None or rules_path is not None or others:
        given = [*(["REPORT"] if report_path else []), *(["--from"] if entry else []),
                 *(["--rules"] if rules_path else []), *others]  # fmt: skip
        raise click.UsageError(f"--explore gates an exploration alone: drop {', '.join(given)}")
    try:
        table = explorer.read_table(explore_path)
        result = explore_gate(table, layout, max_gap_to_best, allow_missing)
    except explorer.ExplorationError as exc:
        raise InputError(one_line(exc)) from None
    except RuleError as exc:
        raise click.UsageError(one_line(exc)) from None
    _print_gate(result, fmt)


def _print_gate(result: ExploreGateResult, fmt: str) -> None:
    if fmt == "json":
        click.echo(
            dumps(
                {
                    "passed": result.passed,
                    "rules": result.describe(),
                    "layout": result.layout,
                    "best": result.best,
                    "gap_to_best": result.gap,
                    "violations": [v.__dict__ for v in result.violations],
                }
            )
        )
    elif result.passed:
        where = "the best" if not result.gap else f"{result.gap:.1%} slower than {result.best}"
        click.echo(f"passed: {result.describe()} ({result.layout} is {where})")
    else:
        click.echo(result.table())
        broken = sorted({v.rule for v in result.violations})
        words = {GAP_RULE: f"{GAP_RULE} {result.max_gap_to_best:g}%",
                 COMPLETE_RULE: f"{COMPLETE_RULE} (the exploration lacks answers)"}  # fmt: skip
        click.echo(f"\nfailed: {result.layout} breaks {', '.join(words[r] for r in broken)}")
    if not result.passed:
        raise SystemExit(1)


def _compiler_error(exc: InputError) -> str | None:
    """The compiler's message when compiling the step failed in XLA (not in the user's code, not
    a bad target): the program fails the gate, it is not bad input."""
    runtime_errors = tuple(
        t for t in (getattr(jax.errors, "JaxRuntimeError", None), _xla_runtime_error())
        if isinstance(t, type)
    )  # fmt: skip
    cause = exc.__context__
    while cause is not None:
        if runtime_errors and isinstance(cause, runtime_errors):
            return one_line(cause)
        cause = cause.__context__
    return None


def _xla_runtime_error():
    try:  # jax 0.10: jaxlib's name for it
        from jaxlib.xla_extension import XlaRuntimeError
    except ImportError:
        return None
    return XlaRuntimeError


def _rules(rules_path: Path | None, flags: dict) -> Rules:
    if rules_path is not None:
        base = read_rules(rules_path)
    else:
        found = pyproject_rules(Path.cwd())
        base = found[0] if found else Rules()
        if found:
            note(f"rules from {found[1]}")
    try:
        return base.merged(**flags)
    except RuleError as exc:
        raise click.UsageError(one_line(exc)) from None


def _print_result(result: CheckResult, fmt: str, passed_note: str) -> None:
    if fmt == "json":
        click.echo(
            dumps(
                {
                    "passed": result.passed,
                    "unknown": result.undecided,
                    "rules": result.rules.describe(),
                    "violations": [v.__dict__ for v in result.violations],
                    "undecided": [v.__dict__ for v in result.unknown],
                }
            )
        )
    elif result.passed:
        click.echo(f"passed: {result.rules.describe()} ({passed_note})")
    elif result.undecided:
        click.echo(violation_table(result.unknown))
        click.echo(f"\nunknown: the report cannot decide {result.rules.describe()}")
    else:
        click.echo(result.table())
        click.echo(f"\nfailed: {len(result.violations)} violation(s) of {result.rules.describe()}")
    if result.undecided:
        raise SystemExit(2)
    if not result.passed:
        raise SystemExit(1)
