"""Gate rules over a :class:`Report`: plain functions shared by the CLI, pytest and TensorBoard.

A rule set selects ops and states what must hold. All percentages are of the predicted step time
(the lower bound, Σ per-op max) unless said otherwise:

``select``            regex searched in each op's name, opcode, op_name, source and user_source
``min_share``         select only ops taking at least this percent of the step
``require``           every selected op must be ``compute`` (or ``memory``, ``communication``) bound
``max_memory_share``  memory-bound ops among the selection take at most this percent of the step
``min_coverage``      at least this percent of the ops have a known cost
``max_exposed_comm``  communication not hidden behind compute takes at most this percent of the
                      step as scheduled (``exposed_comm_s / step_time_scheduled_s``)
``max_regression``    the step is predicted at most this percent slower than ``baseline``
``max_hbm``           the step needs at most this percent of one device's HBM (the memory fit)

Ops that take no time (parameters, constants, tuples) are never selected. A ``select`` regex that
matches no op is itself a violation, so a rename cannot silently turn a gate off.
"""

from __future__ import annotations

import difflib
import math
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import pandas as pd

from hlo_roofline.diff import compare, judged_alike, require_verdicts
from hlo_roofline.report import Report
from hlo_roofline.text import format_seconds, format_table

REQUIRABLE = ("compute", "memory", "communication")
SEARCHED = ("name", "opcode", "op_name", "source", "user_source")
PYPROJECT_TABLE = ("tool", "hlo-roofline", "check")


class RuleError(ValueError):
    """A rule set that cannot be applied (unknown key, bad regex, out-of-range percent)."""


@dataclass(frozen=True)
class Rules:
    """One rule set; ``None`` leaves a rule off. Percentages are 0-100."""

    select: str | None = None
    min_share: float | None = None
    require: str | None = None
    max_memory_share: float | None = None
    min_coverage: float | None = None
    max_exposed_comm: float | None = None
    max_regression: float | None = None
    max_hbm: float | None = None
    baseline: str | Path | Report | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.select is not None:
            try:
                re.compile(self.select)
            except re.error as exc:
                raise RuleError(f"bad select regex {self.select!r}: {exc}") from None
        if self.require is not None and self.require not in REQUIRABLE:
            raise RuleError(f"require must be one of {', '.join(REQUIRABLE)}, not {self.require!r}")
        for name in (
            "min_share", "max_memory_share", "min_coverage", "max_exposed_comm", "max_regression",
            "max_hbm",
        ):  # fmt: skip
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise RuleError(f"{_flag(name)} must be a number of percent, not {value!r}")
            bounded = name not in ("max_regression", "max_hbm")  # a step may need 150% of HBM
            if not math.isfinite(value) or (bounded and not 0 <= value <= 100):
                raise RuleError(f"{_flag(name)} must be a percent in [0, 100], not {value!r}")
            if name == "max_hbm" and value <= 0:
                raise RuleError(f"max-hbm must be a positive percent, not {value!r}")
        if (self.max_regression is None) != (self.baseline is None):
            raise RuleError("max-regression and baseline go together: give both or neither")

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

    def describe(self) -> str:
        parts = [
            f"{_flag(f.name)}={getattr(self, f.name):g}"
            if isinstance(getattr(self, f.name), float)
            else f"{_flag(f.name)}={getattr(self, f.name)}"
            for f in fields(self)
            if f.name != "baseline" and getattr(self, f.name) is not None
        ]
        if isinstance(self.baseline, str | Path):
            parts.append(f"baseline={self.baseline}")
        return ", ".join(parts)


_NEED_VERDICTS = (
    "select", "min_share", "require", "max_memory_share", "max_exposed_comm", "max_regression",
)  # fmt: skip


def _flag(name: str) -> str:
    return name.replace("_", "-")


def read_rules(path: str | Path) -> Rules:
    """Rules from a TOML file: top-level keys, or a ``[tool.hlo-roofline.check]`` table."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise RuleError(f"cannot read rules {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise RuleError(f"{path}: not valid TOML ({exc})") from None
    table = _table(data, PYPROJECT_TABLE)
    return Rules.from_mapping(data if table is None else table, str(path), path.parent)


def pyproject_rules(start: str | Path = ".") -> tuple[Rules, Path] | None:
    """``[tool.hlo-roofline.check]`` of the nearest ``pyproject.toml`` at or above ``start``."""
    here = Path(start).resolve()
    for directory in (here, *here.parents):
        path = directory / "pyproject.toml"
        if path.is_file():
            try:
                table = _table(tomllib.loads(path.read_text(encoding="utf-8")), PYPROJECT_TABLE)
            except tomllib.TOMLDecodeError as exc:
                raise RuleError(f"{path}: not valid TOML ({exc})") from None
            if table is None:
                return None
            return Rules.from_mapping(table, f"{path} [tool.hlo-roofline.check]", directory), path
    return None


def _table(data: Mapping, keys: Sequence[str]) -> Mapping | None:
    for key in keys:
        if not isinstance(data, Mapping) or key not in data:
            return None
        data = data[key]
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

    @property
    def passed(self) -> bool:
        return not self.violations

    def table(self) -> str:
        return violation_table(self.violations)


def select(report: Report, rules: Rules) -> pd.DataFrame:
    """The ops the rules talk about: timed ops matching ``select`` with at least ``min_share``."""
    ops = report.ops[report.ops["t_roofline_s"] > 0]
    if rules.select is not None:
        pattern = re.compile(rules.select)
        hit = pd.Series(False, index=ops.index)
        for column in (c for c in SEARCHED if c in ops):  # reports before user_source lack it
            hit |= ops[column].astype(str).map(lambda s: pattern.search(s) is not None)
        ops = ops[hit]
    if rules.min_share is not None:
        ops = ops[ops["share"] * 100 >= rules.min_share]
    return ops.sort_values("t_roofline_s", ascending=False)


def check(report: Report, rules: Rules, baseline: Report | None = None) -> CheckResult:
    """Apply ``rules`` to a classified ``report``; ``baseline`` overrides ``rules.baseline``."""
    if rules.needs_verdicts:
        require_verdicts(report)
    violations: list[Violation] = []
    selected = select(report, rules) if rules.needs_verdicts else report.ops.iloc[:0]
    if rules.select is not None and select(report, Rules(select=rules.select)).empty:
        violations.append(
            Violation("select", "(step)", detail=f"regex {rules.select!r} matches no timed op")
        )
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
        coverage = float(report.summary.get("coverage", 1.0)) * 100
        if coverage < rules.min_coverage:
            unknown = report.summary.get("unknown_ops") or []
            detail = f"{coverage:.1f}% of ops priced (min {rules.min_coverage:g}%)"
            if unknown:
                detail += f"; unknown: {', '.join(map(str, unknown[:5]))}"
            violations.append(Violation("min-coverage", "(step)", detail=detail))
    if rules.max_exposed_comm is not None:
        violations += _exposed_comm(report, rules.max_exposed_comm)
    if rules.max_hbm is not None:
        violations += _hbm(report, rules.max_hbm)
    if rules.max_regression is not None:
        base = baseline if baseline is not None else rules.baseline
        if isinstance(base, str | Path):
            base = Report.read(base)
        violations += _regression(base, report, rules.max_regression)
    return CheckResult(rules, violations, selected)


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
    step = report.summary.get("step_time_scheduled_s")
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


def _hbm(report: Report, limit: float) -> list[Violation]:
    """The memory fit against a limit: a need that is only a lower bound still fails when the
    bound alone is over it; one that cannot be told at all is a violation, not a pass."""
    fit = report.summary.get("memory_fit")
    if not fit:
        why = "no chip to judge against" if report.chip is None else "no memory figures"
        return [Violation("max-hbm", "(step)", detail=f"memory fit unknown: {why}")]
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
        detail += "; temporaries unknown (HLO text only): compile the step to know"
        return [Violation("max-hbm", "(step)", detail=detail)]
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
