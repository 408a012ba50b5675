"""Gate rules over a :class:`Report`: plain functions shared by the CLI, pytest and TensorBoard.

A rule set selects ops and states what must hold. Verdicts (``require``) are the bound's (hardware
facts only). All percentages are of the expected step time
(``step_time_serial_s``, Σ per-op ``t_expected_s``) unless said otherwise:

``select``            regex searched in each op's name, opcode, op_name, source and user_source
``exclude``           regex searched in the same fields: matching ops are left out of the selection
``kind``              select only ops of these kinds (:data:`KINDS`: ``matmul``, ``collective``, ...)
``exclude_kind``      leave out ops of these kinds (``collective``: the FSDP reduce-scatter fusions
                      whose op_name ends in ``dot_general``)
``min_share``         select only ops taking at least this percent of the step
``require``           every selected op must be ``compute`` (or ``memory``, ``communication``) bound
``max_memory_share``  memory-bound ops among the selection take at most this percent of the step
``min_coverage``      at least this percent of the ops have a known cost
``max_exposed_comm``  communication not hidden behind compute takes at most this percent of the
                      step as scheduled (``exposed_comm_s / step_expected_s``)
``max_regression``    the step is predicted at most this percent slower than ``baseline``
``max_hbm``           the step needs at most this percent of one device's HBM (the memory fit);
                      a need known only as a lower bound (temporaries unknown) that is under the
                      limit, or no fit at all, is neither a pass nor a fail: ``unknown``

Ops that take no time (parameters, constants, tuples) are never selected. A selection (``select``,
``exclude``, ``kind``, ``exclude_kind``) that leaves no op is itself a violation, so a rename cannot
silently turn a gate off. A step the compiler refused (out of memory for its target) fails every
rule with the compiler's reason: it has no program to pass them with (:func:`refused`).

The explorer's gate is separate, over an exploration's ranked table rather than a report:
:func:`explore_gate` fails a configured layout more than ``max_gap_to_best`` percent slower than
the best explored one (the row's ``gap_to_best``), or one that did not compile or fit, and an
exploration that is incomplete (a candidate crashed, timed out or raised: it may have been the best)
unless the candidates that may be missing are named.
"""

from __future__ import annotations

import difflib
import math
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import pandas as pd

from hlo_roofline import evidence, schema
from hlo_roofline.cost.elementwise import ARITHMETIC, TRANSCENDENTAL
from hlo_roofline.diff import compare, judged_alike, require_verdicts
from hlo_roofline.diff import coverage as diff_coverage
from hlo_roofline.hlo.files import read_text
from hlo_roofline.judge import verdict
from hlo_roofline.report import Report
from hlo_roofline.text import format_seconds, format_table

REQUIRABLE = schema.BOUNDS[:3]  # the bounds a roofline time sets
SEARCHED = ("name", "opcode", "op_name", "source", "user_source")
PYPROJECT_TABLE = ("tool", "hlo-roofline", "check")

_ELEMENTWISE = frozenset((*ARITHMETIC, *TRANSCENDENTAL))


def _column(ops: pd.DataFrame, name: str, default) -> pd.Series:
    """A report column, or ``default`` for reports written before it existed."""
    return ops[name] if name in ops else pd.Series(default, index=ops.index)


# An op's kind, from the report's own columns (the one definition the CLI, TOML rules and
# ``assert_roofline`` share). Kinds overlap: a matmul fusion is both ``matmul`` and ``fusion``.
KINDS: dict[str, tuple[str, Callable[[pd.DataFrame], pd.Series]]] = {
    "matmul": ("a matmul (`mm_k > 0`: dot, convolution, a fusion or library call around one)",
               schema.matmul_rows),
    "collective": ("performs a collective (`collective` set: all-reduce, all-gather, "
                   "reduce-scatter fusions, ...)", lambda ops: _column(ops, "collective", "") != ""),
    "fusion": ("a fusion (`opcode` fusion)", lambda ops: ops["opcode"] == "fusion"),
    "custom-call": ("a custom call (`opcode` custom-call: library calls, Pallas kernels)",
                    lambda ops: ops["opcode"] == "custom-call"),
    "elementwise": ("an elementwise op, or a loop fusion (`fusion_kind` kLoop) that is neither a "
                    "matmul nor a collective",
                    lambda ops: ops["opcode"].isin(_ELEMENTWISE) | (
                        (_column(ops, "fusion_kind", "") == "kLoop")
                        & ~schema.matmul_rows(ops) & (_column(ops, "collective", "") == ""))),
    "reduce": ("a reduction (`opcode` reduce or reduce-window, or a kInput fusion)",
               lambda ops: ops["opcode"].isin(("reduce", "reduce-window"))
               | (_column(ops, "fusion_kind", "") == "kInput")),
    "copy": ("a copy or a transpose (`opcode` copy, copy-start, copy-done, transpose)",
             lambda ops: ops["opcode"].isin(("copy", "copy-start", "copy-done", "transpose"))),
}  # fmt: skip

# The accepted range of each percent rule, one place for the Rules, the CLI and diff:
# (lowest, lowest allowed itself?, highest or None). A step may need 150% of HBM, and a step may
# be allowed to get faster only (a negative max-regression).
PERCENT_RANGES: dict[str, tuple[float, bool, float | None]] = {
    "min_share": (0.0, True, 100.0),
    "max_memory_share": (0.0, True, 100.0),
    "min_coverage": (0.0, True, 100.0),
    "max_exposed_comm": (0.0, True, 100.0),
    "max_regression": (-math.inf, False, None),
    "max_hbm": (0.0, False, None),
}


def percent_error(name: str, value: object) -> str | None:
    """Why ``value`` is not an accepted ``name`` (a rule of :data:`PERCENT_RANGES`), or None."""
    low, low_ok, high = PERCENT_RANGES[name]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{_flag(name)} must be a number of percent, not {value!r}"
    if high is not None:
        wanted = f"a percent in [{low:g}, {high:g}]"
    elif low == -math.inf:
        wanted = "a finite percent"
    else:
        wanted = f"a finite percent {'>=' if low_ok else '>'} {low:g}"
    ok = math.isfinite(value) and (value >= low if low_ok else value > low)
    if not ok or (high is not None and value > high):
        return f"{_flag(name)} must be {wanted}, not {value:g}"
    return None


class RuleError(ValueError):
    """A rule set that cannot be applied (unknown key, bad regex, out-of-range percent)."""


@dataclass(frozen=True)
class Rules:
    """One rule set; ``None`` leaves a rule off. Percentages are 0-100."""

    select: str | None = None
    exclude: str | None = None
    kind: tuple[str, ...] | None = None
    exclude_kind: tuple[str, ...] | None = None
    min_share: float | None = None
    require: str | None = None
    max_memory_share: float | None = None
    min_coverage: float | None = None
    max_exposed_comm: float | None = None
    max_regression: float | None = None
    max_hbm: float | None = None
    baseline: str | Path | Report | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        for name in ("select", "exclude"):
            pattern = getattr(self, name)
            if pattern is None:
                continue
            if not isinstance(pattern, str):
                raise RuleError(f"{name} must be a regex, not {pattern!r}")
            try:
                re.compile(pattern)
            except re.error as exc:
                raise RuleError(f"bad {name} regex {pattern!r}: {exc}") from None
        for name in ("kind", "exclude_kind"):
            object.__setattr__(self, name, _kinds(name, getattr(self, name)))
        if self.require is not None and self.require not in REQUIRABLE:
            raise RuleError(f"require must be one of {', '.join(REQUIRABLE)}, not {self.require!r}")
        for name in PERCENT_RANGES:
            value = getattr(self, name)
            if value is not None and (error := percent_error(name, value)) is not None:
                raise RuleError(error)
        if (self.max_regression is None) != (self.baseline is None):
            raise RuleError("max-regression and baseline go together: give both or neither")
        if self.baseline is not None and not isinstance(self.baseline, str | Path | Report):
            raise RuleError(f"baseline must be a report's path, not {self.baseline!r}")

    @classmethod
    def from_mapping(cls, data: Mapping, origin: str = "rules", base_dir: Path | None = None):
        """Rules from a TOML table; keys use dashes or underscores, ``baseline`` is file-relative."""
        known = {f.name for f in fields(cls)}
        values = {}
        for key, value in data.items():
            name = str(key).replace("-", "_")
            if name not in known:
                close = difflib.get_close_matches(name, known, n=1)
                hint = f" (did you mean {_flag(close[0])}?)" if close else ""
                raise RuleError(f"{origin}: unknown rule {key!r}{hint}")
            values[name] = value
        if isinstance(values.get("baseline"), str) and base_dir is not None:
            values["baseline"] = str(base_dir / values["baseline"])
        try:
            return cls(**values)
        except RuleError as exc:
            raise RuleError(f"{origin}: {exc}") from None

    def merged(self, **overrides) -> Rules:
        """These rules with every non-``None`` override applied (command-line flags over files)."""
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})

    @property
    def empty(self) -> bool:
        return all(getattr(self, f.name) is None for f in fields(self))

    @property
    def needs_verdicts(self) -> bool:
        return any(getattr(self, n) is not None for n in _NEED_VERDICTS)

    @property
    def selects(self) -> bool:
        """Whether the rules narrow the ops (a selection that leaves none is a violation)."""
        return any(getattr(self, n) is not None for n in _SELECTION)

    @property
    def gates(self) -> list[str]:
        """The rules that can fail, as flags (``require``, ``max-hbm``, ...): the selection
        (``select``, ``exclude``, ``kind``, ``min-share``) counts as one, ``select``, when alone."""
        narrowing = (*_SELECTION, "min_share", "baseline")
        gates = [_flag(f.name) for f in fields(self) if f.name not in narrowing
                 and getattr(self, f.name) is not None]  # fmt: skip
        return gates or (["select"] if self.selects else [])

    def describe(self) -> str:
        parts = [
            f"{_flag(f.name)}={_spelled(getattr(self, f.name))}"
            for f in fields(self)
            if f.name != "baseline" and getattr(self, f.name) is not None
        ]
        if isinstance(self.baseline, str | Path):
            parts.append(f"baseline={self.baseline}")
        return ", ".join(parts)


_SELECTION = ("select", "exclude", "kind", "exclude_kind")
_NEED_VERDICTS = (
    *_SELECTION, "min_share", "require", "max_memory_share", "max_exposed_comm", "max_regression",
)  # fmt: skip


def _flag(name: str) -> str:
    return name.replace("_", "-")


def _spelled(value) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value)


def _kinds(name: str, value) -> tuple[str, ...] | None:
    """``kind``/``exclude_kind`` as a tuple of known kinds: a name, ``"a,b"`` or a list of names."""
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(k, str) for k in items):
        raise RuleError(f"{_flag(name)} must be a kind or a list of kinds, not {value!r}")
    kinds = tuple(k.strip() for k in items if k.strip())
    for k in kinds:
        if k not in KINDS:
            raise RuleError(f"{_flag(name)}: unknown kind {k!r} (one of {', '.join(KINDS)})")
    return kinds or None


def read_toml(path: Path) -> dict:
    """A TOML file (a rules file, a ``pyproject.toml``) as a dict; a file that cannot be read,
    is not UTF-8 or is not TOML is a :class:`RuleError` naming it."""
    try:
        return tomllib.loads(read_text(path))  # a FIFO or a device refused, not waited on
    except OSError as exc:
        raise RuleError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise RuleError(f"{path}: not UTF-8 text, so not TOML") from None
    except tomllib.TOMLDecodeError as exc:
        raise RuleError(f"{path}: not valid TOML ({exc})") from None


def read_rules(path: str | Path) -> Rules:
    """Rules from a TOML file: top-level keys, or a ``[tool.hlo-roofline.check]`` table."""
    path = Path(path)
    data = read_toml(path)
    table = _table(data, PYPROJECT_TABLE, path)
    return Rules.from_mapping(data if table is None else table, str(path), path.parent)


def pyproject_rules(start: str | Path = ".") -> tuple[Rules, Path] | None:
    """``[tool.hlo-roofline.check]`` of the nearest ``pyproject.toml`` at or above ``start``."""
    here = Path(start).resolve()
    for directory in (here, *here.parents):
        path = directory / "pyproject.toml"
        if path.is_file():
            table = _table(read_toml(path), PYPROJECT_TABLE, path)
            if table is None:
                return None
            return Rules.from_mapping(table, f"{path} [tool.hlo-roofline.check]", directory), path
    return None


def _table(data: Mapping, keys: Sequence[str], where: object = "") -> Mapping | None:
    """The table at ``keys`` (None where there is none); a value there that is not a table (a
    ``check = 5`` under ``[tool.hlo-roofline]``) is a :class:`RuleError`."""
    for key in keys:
        if not isinstance(data, Mapping) or key not in data:
            return None
        data = data[key]
    if not isinstance(data, Mapping):
        said = f"{where}: " if where else ""
        raise RuleError(f"{said}[{'.'.join(keys)}] must be a table of rules, not {data!r}")
    return data


# -- applying the rules ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Violation:
    """One broken rule: the op (or ``(step)``) that broke it and why."""

    rule: str
    op: str
    opcode: str = ""
    bound: str = ""
    share: float | None = None
    detail: str = ""


@dataclass
class CheckResult:
    """The violations of one rule set on one report, and the ops it selected."""

    rules: Rules
    violations: list[Violation]
    selected: pd.DataFrame
    # rules the report cannot decide (max-hbm on a need known only as a lower bound under the
    # limit): not a pass, and not a fail either
    unknown: list[Violation] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.violations and not self.unknown

    @property
    def undecided(self) -> bool:
        """Nothing failed, but a rule could not be decided (the CLI exits 2)."""
        return not self.violations and bool(self.unknown)

    def table(self) -> str:
        return violation_table(self.violations)


def _searched(ops: pd.DataFrame, regex: str) -> pd.Series:
    pattern = re.compile(regex)
    hit = pd.Series(False, index=ops.index)
    for column in (c for c in SEARCHED if c in ops):  # reports before user_source lack it
        hit |= ops[column].astype(str).map(lambda s: pattern.search(s) is not None)
    return hit


def of_kind(ops: pd.DataFrame, kinds: Sequence[str]) -> pd.Series:
    """Which of ``ops`` are of any of ``kinds`` (:data:`KINDS`)."""
    hit = pd.Series(False, index=ops.index)
    for kind in kinds:
        hit |= KINDS[kind][1](ops).astype(bool)
    return hit


def select(report: Report, rules: Rules) -> pd.DataFrame:
    """The ops the rules talk about: timed ops matching ``select`` and ``kind``, less those
    matching ``exclude`` or ``exclude_kind``, with at least ``min_share``."""
    ops = report.ops[report.ops["t_expected_s"] > 0]
    if rules.select is not None:
        ops = ops[_searched(ops, rules.select)]
    if rules.kind is not None:
        ops = ops[of_kind(ops, rules.kind)]
    if rules.exclude is not None:
        ops = ops[~_searched(ops, rules.exclude)]
    if rules.exclude_kind is not None:
        ops = ops[~of_kind(ops, rules.exclude_kind)]
    if rules.min_share is not None:
        ops = ops[ops["share"] * 100 >= rules.min_share]
    return ops.sort_values("t_expected_s", ascending=False)


def refusal(report: Report) -> str | None:
    """The compiler's reason when it refused the step (out of memory for its target), else None."""
    return evidence.refusal(report.summary)


def refused(rules: Rules, reason: str, selected: pd.DataFrame | None = None) -> CheckResult:
    """Every rule fails on a step that did not compile: one violation per rule, with the reason."""
    detail = f"the compiler refused the program: {' '.join(reason.split())}"
    violations = [Violation(rule, "(step)", detail=detail) for rule in rules.gates]
    empty = pd.DataFrame() if selected is None else selected.iloc[:0]
    return CheckResult(rules, violations, empty)


def check(report: Report, rules: Rules, baseline: Report | None = None) -> CheckResult:
    """Apply ``rules`` to a classified ``report``; ``baseline`` overrides ``rules.baseline``."""
    reason = refusal(report)
    if reason is not None:
        result = refused(rules, reason, report.ops)
        fit = _hbm(report, rules.max_hbm) if rules.max_hbm is not None else []
        result.violations = [  # the fit, where the error states it, before the reason
            replace(v, detail=f"{fit[0].detail}; {v.detail}") if v.rule == "max-hbm" and fit
            else v for v in result.violations
        ]  # fmt: skip
        return result
    if report.ops.empty:  # no evidence passes no gate
        detail = "the report has no rows: there is nothing to judge"
        violations = [Violation(rule, "(step)", detail=detail) for rule in rules.gates]
        return CheckResult(rules, violations, report.ops)
    if rules.needs_verdicts:
        require_verdicts(report)
    violations: list[Violation] = _unjudgeable(report) if rules.needs_verdicts else []
    selected = select(report, rules) if rules.needs_verdicts else report.ops.iloc[:0]
    if rules.selects:
        narrowing = {n: getattr(rules, n) for n in _SELECTION if getattr(rules, n) is not None}
        if select(report, Rules(**narrowing)).empty:
            said = ", ".join(f"{_flag(n)} {_spelled(v)!r}" for n, v in narrowing.items())
            violations.append(Violation("select", "(step)", detail=f"{said} leaves no timed op"))
    if rules.require is not None:
        for op in selected[selected["bound"] != rules.require].itertuples():
            violations.append(
                Violation(
                    f"require {rules.require}",
                    op.name,
                    op.opcode,
                    op.bound,
                    op.share,
                    f"intensity {op.intensity:.3g} vs ridge {op.critical_intensity:.3g} FLOP/B"
                    + (f"; {op.hint}" if op.hint else ""),
                )
            )
    if rules.max_memory_share is not None:
        violations += _memory_share(selected, rules.max_memory_share)
    if rules.min_coverage is not None:
        violations += coverage_violations(report, rules.min_coverage)
    if rules.max_exposed_comm is not None:
        violations += _exposed_comm(report, rules.max_exposed_comm)
    unknown: list[Violation] = []
    if rules.max_hbm is not None:
        fit = _hbm(report, rules.max_hbm)
        unknown = [v for v in fit if v.rule == HBM_UNKNOWN]
        violations += [v for v in fit if v.rule != HBM_UNKNOWN]
    if rules.max_regression is not None:
        base = baseline if baseline is not None else rules.baseline
        if isinstance(base, str | Path):
            base = Report.read(base)
        violations += _regression(base, report, rules.max_regression)
    return CheckResult(rules, violations, selected, unknown)


def _unjudgeable(report: Report) -> list[Violation]:
    """Ops whose time, share or bound a gate cannot read (NaN, an unknown bound): a violation
    each, never left out of the selection as if they took no time."""
    ops = report.ops
    bad = ops["t_expected_s"].isna() | ops["share"].isna() | ~ops["bound"].isin(verdict.BOUNDS)
    return [
        Violation("judgeable", op.name, op.opcode, str(op.bound), detail="no time, share or bound")
        for op in ops[bad].head(10).itertuples()
    ]


def coverage_violations(report: Report, limit: float, side: str = "") -> list[Violation]:
    """``min-coverage``: the share of ops priced at least ``limit`` percent; a coverage the report
    does not state (absent, NaN) is a violation, not a pass, and so is a report with no rows (a
    coverage of nothing proves nothing: as every gate of :func:`check` fails it)."""
    op = f"({side})" if side else "(step)"
    if report.ops.empty:
        return [Violation("min-coverage", op, detail="the report has no rows: nothing is priced")]
    value = diff_coverage(report)
    coverage = math.nan if value is None else value * 100
    if coverage >= limit:
        return []
    if math.isnan(coverage):
        return [Violation("min-coverage", op, detail="coverage unknown (the report does not say)")]
    unknown = report.summary.get("unknown_ops") or []
    detail = f"{coverage:.1f}% of ops priced (min {limit:g}%)"
    if unknown:
        detail += f"; unknown: {', '.join(map(str, unknown[:5]))}"
    return [Violation("min-coverage", op, detail=detail)]


def _memory_share(selected: pd.DataFrame, limit: float) -> list[Violation]:
    memory = selected[selected["bound"] == "memory"]
    share = float(memory["share"].sum()) * 100
    if share <= limit:
        return []
    largest = ", ".join(f"{op.name} {op.share:.1%}" for op in memory.head(3).itertuples())
    detail = f"memory-bound ops take {share:.1f}% of the step (max {limit:g}%); largest: {largest}"
    return [Violation("max-memory-share", "(step)", "", "memory", share / 100, detail)]


def _exposed_comm(report: Report, limit: float) -> list[Violation]:
    """Communication the schedule leaves exposed, as a share of the scheduled step."""
    step = report.summary.get("step_expected_s")
    if step is None or "t_exposed_s" not in report.ops:
        raise RuleError(
            "max-exposed-comm: the report has no scheduled step (written by an older version): "
            "judge it again against its chip"
        )
    exposed = float(report.summary.get("exposed_comm_s", 0.0))
    share = exposed / step * 100 if step else 0.0
    if share <= limit:
        return []
    ops = report.ops[(report.ops["collective"] != "") & (report.ops["t_exposed_s"] > 0)]
    largest = ", ".join(
        f"{op.name} {format_seconds(op.t_exposed_s)}"
        for op in ops.nlargest(3, "t_exposed_s").itertuples()
    )
    detail = (
        f"exposed communication {format_seconds(exposed)} is {share:.1f}% of the scheduled step "
        f"{format_seconds(step)} (max {limit:g}%); largest: {largest}"
    )
    return [Violation("max-exposed-comm", "(step)", "", "communication", share / 100, detail)]


# The rule name of a max-hbm the report cannot decide (CheckResult.unknown).
HBM_UNKNOWN = "max-hbm unknown"


def _hbm(report: Report, limit: float) -> list[Violation]:
    """The memory fit against a limit: a need that is only a lower bound still fails when the
    bound alone is over it; under the limit, or with no fit at all, it is undecided
    (:data:`HBM_UNKNOWN`): neither a pass nor a fail."""
    fit = report.summary.get("memory_fit")
    if not fit:
        why = "no chip to judge against" if report.chip is None else "no memory figures"
        return [Violation(HBM_UNKNOWN, "(step)", detail=f"memory fit unknown: {why}")]
    used = fit["used_fraction"] * 100
    need, capacity = fit["need_bytes"] / 1e9, fit["capacity_bytes"] / 1e9
    detail = f"needs {need:.2f} GB of {capacity:.2f} GB per device ({used:.0f}%, max {limit:g}%)"
    if used > limit:
        largest = (report.summary.get("memory") or {}).get("largest") or []
        if largest:
            detail += "; largest: " + ", ".join(
                f"{b['name']} {b['bytes'] / 1e9:.2f} GB" for b in largest[:3]
            )
        return [Violation("max-hbm", "(step)", detail=detail)]
    if fit["verdict"] == "unknown":
        source = (report.summary.get("memory") or {}).get("source")
        where = "XLA:TPU's dump omits code generation's" if source == "dump" else "HLO text only"
        detail += (
            f"; temporaries unknown ({where}): a lower bound under the limit decides nothing. "
            "Analyze the step itself (analyze, hlo-roofline analyze FILE.py:NAME) to know"
        )
        return [Violation(HBM_UNKNOWN, "(step)", detail=detail)]
    return []


def _regression(baseline: Report, report: Report, limit: float) -> list[Violation]:
    """The step against a baseline judged on the same chip (re-judged if it was not)."""
    _, baseline, note = judged_alike(report, baseline)
    diff = compare(baseline, report)
    change = diff.step_change * 100
    if change <= limit:
        return []
    detail = (
        f"predicted step {format_seconds(diff.step_a)} → {format_seconds(diff.step_b)} "
        f"({change:+.1f}%, max {limit:+g}%)" + (f"; baseline {note}" if note else "")
    )
    out = [Violation("max-regression", "(step)", detail=detail)]
    growing = diff.ops[diff.ops["delta_s"] > 0].nlargest(3, "delta_s")
    for op in growing.itertuples():
        name = op.name_b if isinstance(op.name_b, str) else op.name_a
        grew = f"{op.change}: +{format_seconds(op.delta_s)}"
        if op.change == "flipped":
            grew += f", {op.bound_a} → {op.bound_b}"
        out.append(Violation("max-regression", name, op.opcode, str(op.bound_b), op.share_b, grew))
    return out


# -- showing ---------------------------------------------------------------------------------------


def violation_table(violations: Sequence[Violation]) -> str:
    """One row per violation: the rule, the op, its bound and share of the step, and why."""
    rows = [
        {
            "rule": v.rule,
            "op": v.op,
            "opcode": v.opcode,
            "bound": v.bound,
            "share": "" if v.share is None else f"{v.share:.1%}",
            "detail": v.detail,
        }
        for v in violations
    ]
    return format_table(rows, right=("share",))


# -- the explorer's gate: the configured layout against the best explored -------------------------

GAP_RULE = "max-gap-to-best"


@dataclass
class ExploreGateResult:
    """The configured layout's row of an exploration against its first-ranked row."""

    layout: str  # the configured candidate's label
    best: str | None  # the first-ranked candidate's label (None: nothing compiled and fit)
    gap: float | None  # the configured layout's ``gap_to_best`` (0.25: 25% slower)
    max_gap_to_best: float  # percent
    violations: list[Violation]

    @property
    def passed(self) -> bool:
        return not self.violations

    def describe(self) -> str:
        return f"{GAP_RULE} {self.max_gap_to_best:g}%"

    def table(self) -> str:
        return violation_table(self.violations)


def match_layout(table: pd.DataFrame, layout: str) -> pd.Series:
    """The one row of an explorer table that ``layout`` names: a candidate label
    (``data16_fsdp1_tensor4_batch=64``) or ``NAME=VALUE`` pairs over its axis and knob columns
    (``data=16,tensor=4``). No row or several: :class:`RuleError` naming what there is."""
    labels = table["candidate"].astype(str)
    if (labels == layout).sum() == 1:
        return table[labels == layout].iloc[0]
    pairs = [p.strip() for p in layout.split(",") if p.strip()]
    wanted: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name or not value:
            raise RuleError(
                f"layout {layout!r} is neither a candidate of the exploration nor NAME=VALUE "
                f"pairs (e.g. data=16,tensor=4); candidates: {', '.join(labels[:4])}, ..."
            )
        if name not in table.columns:
            raise RuleError(f"layout {layout!r}: the exploration has no column {name!r}")
        wanted[name] = value
    hit = pd.Series(True, index=table.index)
    for name, value in wanted.items():
        hit &= table[name].map(lambda cell, value=value: _same_value(cell, value))
    if hit.sum() != 1:
        found = ", ".join(labels[hit][:4]) or "none"
        raise RuleError(
            f"layout {layout!r} matches {int(hit.sum())} candidates ({found}); name one "
            "(its label, or more NAME=VALUE pairs)"
        )
    return table[hit].iloc[0]


def _same_value(cell, text: str) -> bool:
    """A table cell equals a value typed on the command line (``16`` is 16 and 16.0)."""
    if str(cell) == text:
        return True
    try:
        return float(cell) == float(text)
    except (TypeError, ValueError):
        return False


COMPLETE_RULE = "complete-exploration"


def matching_rows(table: pd.DataFrame, selector: str) -> pd.Series:
    """Which rows ``selector`` names: ``any``, a candidate label, or ``NAME=VALUE`` pairs over
    the axis and knob columns (any number of rows); a selector of unknown columns is a RuleError."""
    labels = table["candidate"].astype(str)
    if selector == "any":
        return pd.Series(True, index=table.index)
    if (labels == selector).any():
        return labels == selector
    hit = pd.Series(True, index=table.index)
    for pair in (p.strip() for p in selector.split(",") if p.strip()):
        name, sep, value = pair.partition("=")
        if not sep or not name or not value:
            raise RuleError(
                f"--allow-missing {selector!r} is neither a candidate nor NAME=VALUE pairs "
                "(e.g. tensor=4) nor 'any'"
            )
        if name not in table.columns:
            raise RuleError(f"--allow-missing {selector!r}: the exploration has no column {name!r}")
        hit &= table[name].map(lambda cell, value=value: _same_value(cell, value))
    return hit


def explore_gate(
    table: pd.DataFrame, layout: str, max_gap_to_best: float, allow_missing: Sequence[str] = ()
) -> ExploreGateResult:
    """Fail when the configured ``layout`` is more than ``max_gap_to_best`` percent slower than
    the best layout explored (the row's own ``gap_to_best``, which the explorer ranked on), or
    did not compile or fit at all, or when the exploration is incomplete: a candidate without an
    answer (it crashed, timed out, raised) might have been the best. ``allow_missing`` names the
    candidates that may be missing (labels, ``NAME=VALUE`` pairs, ``any``)."""
    if isinstance(max_gap_to_best, bool) or not isinstance(max_gap_to_best, int | float):
        raise RuleError(f"{GAP_RULE} must be a number of percent, not {max_gap_to_best!r}")
    if not (math.isfinite(max_gap_to_best) and max_gap_to_best >= 0):
        raise RuleError(f"{GAP_RULE} must be a finite percent >= 0, not {max_gap_to_best:g}")
    row = match_layout(table, layout)
    status = table["status"].map(lambda s: schema.EXPLORE_FORMER_STATUSES.get(s, s))
    missing = ~status.isin(schema.EXPLORE_ANSWERS)
    allowed = pd.Series(False, index=table.index)
    for selector in allow_missing:
        allowed |= matching_rows(table, selector)
    unexplained = table[missing & ~allowed]
    label = str(row["candidate"])
    ranked = table[pd.to_numeric(table["rank"], errors="coerce") == 1]
    if "flags" in table:  # the explorer ranks each set of compiler flags apart: the layout's own
        own = row["flags"] if isinstance(row["flags"], str) else ""
        ranked = ranked[ranked["flags"].fillna("").astype(str) == own]
    best = str(ranked.iloc[0]["candidate"]) if len(ranked) else None
    gap = pd.to_numeric(pd.Series([row["gap_to_best"]]), errors="coerce").iloc[0]
    gap = None if pd.isna(gap) else float(gap)
    violations = []
    if status[row.name] != "ok" or gap is None:
        why = row.get("why")  # the explorer's words, its status first where it is not ok
        detail = why if isinstance(why, str) and why else str(row["status"])
        violations.append(Violation(GAP_RULE, label, detail=detail))
    elif gap * 100 > max_gap_to_best:
        violations.append(
            Violation(
                GAP_RULE,
                label,
                detail=f"{gap:.1%} slower than the best explored, {best} "
                f"(max {max_gap_to_best:g}%)",
            )
        )
    for _, lost in unexplained.iterrows():
        error = lost.get("error")
        violations.append(
            Violation(
                COMPLETE_RULE,
                str(lost["candidate"]),
                detail=f"no answer ({status[lost.name]}"
                + (f": {error}" if isinstance(error, str) and error else "")
                + "): it may be the best; explore again, or name it with --allow-missing",
            )
        )
    return ExploreGateResult(label, best, gap, float(max_gap_to_best), violations)
