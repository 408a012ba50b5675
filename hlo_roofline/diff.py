"""Compare two runs op by op: which ops flipped bound, grew or shrank, appeared or vanished.

Fusion names (``fusion.42``) change whenever XLA's pass pipeline changes anything, so ops are matched
by what stays put between compiles of the same program, in three passes:

1. identity ``(op_name, source, opcode, shape)`` (shape without layout);
2. ``(op_name, source, opcode)`` for ops that carry metadata, so the same op at another batch size
   still matches;
3. ``opcode`` alone for ops without metadata (copies and other ops XLA inserted).

Within one key, duplicates pair up in program order. Only ops that take time are compared
(parameters, constants and tuples cost nothing and carry no verdict). An op held at the chip's
per-op floor on both sides has not flipped whatever its bound says: no unit sets its time. Both
reports must be classified against the same chip; :func:`compare` re-judges ``b`` against ``a``'s
chip if needed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

from hlo_roofline import chips, schema
from hlo_roofline.report import Report

IDENTITY = ("op_name", "source", "opcode", "shape")
_LAYOUT = re.compile(r"\{[^{}]*\}")
_KEPT = ("name", "opcode", "op_name", "source", "shape", "bound", "t_expected_s", "share",
         "intensity", "t_compute_s", "t_memory_s", "t_comm_s", "roof_unit", "expected_by")  # fmt: skip


class NotClassifiedError(ValueError):
    """A report without verdicts where one is needed: classify it against a chip first."""


def require_verdicts(report: Report, what: str = "report") -> None:
    """Raise :class:`NotClassifiedError` unless ``report`` carries per-op times and bounds."""
    if "t_expected_s" not in report.ops or not report.chip:
        raise NotClassifiedError(
            f"{what} {report.module or ''} is not classified against a chip: pass a chip"
        )


def judged_alike(a: Report, b: Report) -> tuple[Report, Report, str]:
    """(a, b judged against a's chip and profile, a note if b had to be re-judged)."""
    require_verdicts(a, "the first report")
    same = b.chip == a.chip and b.summary.get("chip_profile") == a.summary.get("chip_profile")
    if same and "t_expected_s" in b.ops:
        return a, b, ""
    chip = chips.get(a.chip, profile=a.summary.get("chip_profile", "vendor"))
    note = f"re-judged against {a.chip}" + (f" (was {b.chip})" if b.chip else "")
    return a, b.classify(chip), note


def shape_key(shape: str) -> str:
    """The shape without layouts and tiling: ``bf16[8,128]{1,0:T(8,128)}`` → ``bf16[8,128]``."""
    return _LAYOUT.sub("", shape)


# The ways an op differs between two reports, as ``change`` names them (``same``: not at all).
CHANGES = ("flipped", "added", "removed", "changed")


@dataclass
class Diff:
    """The matched ops of two reports (``ops``: one row per op on either side) and both steps."""

    ops: pd.DataFrame
    step_a: float
    step_b: float
    chip: str
    note: str = ""
    hbm_a: float | None = None  # per-device HBM need (bytes), where the reports carry it
    hbm_b: float | None = None
    coverage_a: float | None = None  # share of ops priced; None where the report does not say
    coverage_b: float | None = None
    unknown_a: tuple[str, ...] = ()  # the ops whose FLOPs are unknown (unpriced)
    unknown_b: tuple[str, ...] = ()

    @property
    def hbm_change(self) -> float | None:
        """Relative change of the per-device HBM need (None where a report does not say)."""
        if not self.hbm_a or self.hbm_b is None:
            return None
        return self.hbm_b / self.hbm_a - 1

    @property
    def step_change(self) -> float:
        """Relative change of the predicted step time (0.25 = 25 % slower); inf from zero."""
        if self.step_a == 0:
            return 0.0 if self.step_b == 0 else float("inf")
        return self.step_b / self.step_a - 1

    @property
    def flipped(self) -> pd.DataFrame:
        return self.ops[self.ops["change"] == "flipped"]

    @property
    def added(self) -> pd.DataFrame:
        return self.ops[self.ops["change"] == "added"]

    @property
    def removed(self) -> pd.DataFrame:
        return self.ops[self.ops["change"] == "removed"]

    @property
    def counts(self) -> dict[str, int]:
        """How many ops changed in each way: the numbers ``diff`` prints and the tab shows."""
        change = self.ops["change"]
        return {kind: int((change == kind).sum()) for kind in CHANGES}

    def to_dict(self) -> dict:
        ops = self.ops.astype(object).where(self.ops.notna(), None)
        return {
            "chip": self.chip,
            "step_a_s": self.step_a,
            "step_b_s": self.step_b,
            "step_change": self.step_change,
            "note": self.note,
            "coverage_a": self.coverage_a,
            "coverage_b": self.coverage_b,
            "unknown_a": list(self.unknown_a),
            "unknown_b": list(self.unknown_b),
            **self.counts,
            "ops": ops.to_dict(orient="records"),
        }


def _timed(report: Report) -> pd.DataFrame:
    ops = report.ops[report.ops["t_expected_s"] > 0]
    ops = ops[[c for c in _KEPT if c in ops]].reset_index(drop=True)
    return ops.assign(shape=ops["shape"].map(shape_key), _row=range(len(ops)))


def _pair(a: pd.DataFrame, b: pd.DataFrame, key: list[str]) -> pd.DataFrame:
    """Pairs ``(_row_a, _row_b)`` of ops equal on ``key``, duplicates matched in program order."""
    if a.empty or b.empty:
        return pd.DataFrame({"_row_a": [], "_row_b": []}, dtype=int)
    left = a[[*key, "_row"]].assign(_nth=a.groupby(key, sort=False).cumcount())
    right = b[[*key, "_row"]].assign(_nth=b.groupby(key, sort=False).cumcount())
    pairs = left.merge(right, on=[*key, "_nth"], suffixes=("_a", "_b"))
    return pairs[["_row_a", "_row_b"]]


def _held_at_floor(rows: pd.DataFrame, side: str) -> pd.Series:
    """Ops expected at the chip's per-op floor: above what any unit would take, so their bound
    (the unit that would set their time above it) does not decide it, and its change is no flip."""
    if f"expected_by_{side}" in rows:  # the expectation names the floor
        return rows[f"expected_by_{side}"] == "floor"
    if f"roof_unit_{side}" in rows:  # before the split the verdict named it (not a pipeline)
        return rows[f"roof_unit_{side}"] == "floor"
    units = [f"{time}_{side}" for time in schema.BOUND_TIMES.values()]
    if not all(u in rows for u in units):
        return pd.Series(False, index=rows.index)
    return rows[f"t_expected_s_{side}"] > rows[units].max(axis=1) * (1 + 1e-9)


def flipped(rows: pd.DataFrame) -> pd.Series:
    """Which rows of a pairing (each op's columns twice, suffixed ``_a`` and ``_b``) flipped bound:
    the bound changed, and the op is not held at the per-op floor on both sides (no unit sets its
    time there, so the unit its bound names decides nothing). The one test ``compare`` and the
    demo's sentences share."""
    floors = _held_at_floor(rows, "a") & _held_at_floor(rows, "b")
    return rows["bound_a"].notna() & (rows["bound_a"] != rows["bound_b"]) & ~floors


def compare(a: Report, b: Report) -> Diff:
    """Match the timed ops of ``a`` (before) and ``b`` (after); see the module docstring."""
    a, b, note = judged_alike(a, b)
    ops_a, ops_b = _timed(a), _timed(b)
    has_meta_a = (ops_a["op_name"] != "") | (ops_a["source"] != "")
    has_meta_b = (ops_b["op_name"] != "") | (ops_b["source"] != "")
    passes = [
        (list(IDENTITY), None),
        (["op_name", "source", "opcode"], True),
        (["opcode"], False),
    ]
    matched: list[pd.DataFrame] = []
    free_a = pd.Series(True, index=ops_a.index)
    free_b = pd.Series(True, index=ops_b.index)
    for key, with_meta in passes:
        sel_a, sel_b = free_a.copy(), free_b.copy()
        if with_meta is not None:
            sel_a &= has_meta_a if with_meta else ~has_meta_a
            sel_b &= has_meta_b if with_meta else ~has_meta_b
        pairs = _pair(ops_a[sel_a], ops_b[sel_b], key)
        free_a[pairs["_row_a"].to_numpy()] = False
        free_b[pairs["_row_b"].to_numpy()] = False
        matched.append(pairs)
    pairs = pd.concat(matched, ignore_index=True)
    both = pd.concat(
        [
            ops_a.loc[pairs["_row_a"]].reset_index(drop=True).add_suffix("_a"),
            ops_b.loc[pairs["_row_b"]].reset_index(drop=True).add_suffix("_b"),
        ],
        axis=1,
    )
    only_a = ops_a[free_a].add_suffix("_a")
    only_b = ops_b[free_b].add_suffix("_b")
    rows = pd.concat([both, only_a, only_b], ignore_index=True)
    for column in ("opcode", "op_name", "source"):
        rows[column] = rows[f"{column}_a"].fillna(rows[f"{column}_b"])
    t_a = rows["t_expected_s_a"].fillna(0.0)
    t_b = rows["t_expected_s_b"].fillna(0.0)
    rows["delta_s"] = t_b - t_a
    rows["change"] = "same"
    rows.loc[t_b != t_a, "change"] = "changed"
    rows.loc[flipped(rows), "change"] = "flipped"
    rows.loc[rows["name_b"].isna(), "change"] = "removed"
    rows.loc[rows["name_a"].isna(), "change"] = "added"
    columns = [
        "change", "name_a", "name_b", "opcode", "op_name", "source", "shape_a", "shape_b",
        "bound_a", "bound_b", "t_expected_s_a", "t_expected_s_b", "delta_s", "share_a", "share_b",
        "intensity_a", "intensity_b",
    ]  # fmt: skip
    rows = rows[columns]
    order = rows["change"].map({"flipped": 0, "added": 1, "removed": 1, "changed": 2, "same": 3})
    # (the order the CLI prints and the tab lists: flips, then ops on one side, then time changes,
    # each by the size of its change)
    rows = rows.assign(_order=order, _size=-rows["delta_s"].abs())
    rows = rows.sort_values(["_order", "_size"], kind="stable").drop(columns=["_order", "_size"])
    return Diff(
        ops=rows.reset_index(drop=True),
        step_a=float(a.summary["step_time_serial_s"]),
        step_b=float(b.summary["step_time_serial_s"]),
        chip=a.chip,
        note=note,
        hbm_a=_hbm_need(a),
        hbm_b=_hbm_need(b),
        coverage_a=coverage(a),
        coverage_b=coverage(b),
        unknown_a=tuple(map(str, a.summary.get("unknown_ops") or ())),
        unknown_b=tuple(map(str, b.summary.get("unknown_ops") or ())),
    )


def coverage(report: Report) -> float | None:
    """The share of the report's ops that are priced; None where it does not say (NaN, absent)."""
    value = report.summary.get("coverage")
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return None
    return float(value)


def _hbm_need(report: Report) -> float | None:
    memory = report.summary.get("memory")
    return float(memory["need_bytes"]) if memory else None
