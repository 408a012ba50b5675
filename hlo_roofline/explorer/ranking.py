"""Ranking an explorer table: by throughput where the work is known (tokens, model FLOPs), by the
step where every candidate does the same work, else by the FLOP/s the program achieves; each set
of compiler flags apart."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import pandas as pd

from hlo_roofline.explorer.status import STATUS_OK, status_of

SPAN_PREFIXES = ("n_axes_", "nodes_")  # per-axis span columns: torus axes (TPU), nodes (GPU)


# The row's own columns (the rest are axis sizes, n_axes_<axis> and knobs).
ROW_COLUMNS = frozenset({
    "candidate", "status", "error", "traceback", "compile_s", "flags", "step_s", "lower_s",
    "upper_s", "compute_s", "memory_s", "comm_s", "exposed_comm_s", "exposed_comm_share",
    "matmul_fwd_s", "collective_fwd_s", "exposed_fwd_s", "matmul_bwd_s", "collective_bwd_s",
    "exposed_bwd_s", "mfu_upper_bound",
    "mfu_model", "tokens_per_step", "model_flops", "tokens_per_s_per_chip",
    "model_flops_per_s_per_chip", "flops_per_s_per_chip", "hbm_per_device", "fit", "bound",
    "why", "rank", "gap_to_best",
})  # fmt: skip


# What a ranking compares, in order of preference: the work the user counts (tokens, model
# FLOPs: given, or returned by make_step), then the step itself where every candidate does the
# same work (no knob varies), else the FLOP/s the compiled program achieves (never raw step time
# across candidates doing different work).
THROUGHPUT_COLUMNS = ("tokens_per_s_per_chip", "model_flops_per_s_per_chip")


STEP_COLUMN, FLOPS_COLUMN = "step_s", "flops_per_s_per_chip"


HIGHER_IS_BETTER = frozenset({*THROUGHPUT_COLUMNS, FLOPS_COLUMN})


def knob_columns(table: pd.DataFrame, axes: Iterable[str] = ()) -> list[str]:
    """The knob columns of an explorer table: neither the row's own, a span, an axis (``axes``,
    or any column with a span twin ``n_axes_<axis>``/``nodes_<axis>``)."""
    spans = {c.removeprefix(p) for c in table.columns for p in SPAN_PREFIXES if c.startswith(p)}
    skip = {*axes, *spans}
    return [c for c in table.columns if c not in ROW_COLUMNS and c not in skip
            and not c.startswith(SPAN_PREFIXES)]  # fmt: skip


def rank_by(table: pd.DataFrame, knobs: Sequence[str] | None = None) -> str:
    """The column a ranking compares (see :data:`THROUGHPUT_COLUMNS`): tokens/s per chip where
    every candidate that compiled and fits has it, else model FLOP/s per chip, else the step time
    where no knob varies among them (``knobs``: their columns; default :func:`knob_columns`),
    else the compiled program's FLOP/s per chip."""
    if "status" not in table or table.empty:
        return STEP_COLUMN
    ok = table["status"].map(status_of) == STATUS_OK
    if not ok.any():
        return STEP_COLUMN
    for column in THROUGHPUT_COLUMNS:
        values = pd.to_numeric(table.get(column, pd.Series(index=table.index)), errors="coerce")
        if (values[ok] > 0).all():
            return column
    knobs = knob_columns(table) if knobs is None else [k for k in knobs if k in table]
    same_work = all(table.loc[ok, k].astype(str).nunique() <= 1 for k in knobs)
    return STEP_COLUMN if same_work or FLOPS_COLUMN not in table else FLOPS_COLUMN


def rank(table: pd.DataFrame, knobs: Sequence[str] | None = None) -> pd.DataFrame:
    """Rank the candidates that compiled and fit by :func:`rank_by` (most work per second, else
    the shortest step) and give each its ``gap_to_best``: how much longer it takes per unit of
    work (or per step) than the first, as a fraction (0.25: 25% slower). Candidates compiled
    under different compiler flags (the ``flags`` column) are ranked apart, each group from 1."""
    table = table.copy()
    table["rank"] = pd.NA
    table["gap_to_best"] = math.nan
    if table.empty or "status" not in table:
        table["rank"] = table["rank"].astype("Int64")
        return table
    by = rank_by(table, knobs)
    values = pd.to_numeric(table.get(by, pd.Series(index=table.index)), errors="coerce")
    ok = (table["status"].map(status_of) == STATUS_OK) & (values > 0) & values.map(math.isfinite)
    groups = (
        table["flags"].fillna("").astype(str) if "flags" in table else pd.Series("", table.index)
    )
    for _, members in table[ok].groupby(groups[ok], sort=False):
        higher = by in HIGHER_IS_BETTER
        order = values[members.index].sort_values(ascending=not higher, kind="stable")
        best = order.iloc[0]
        table.loc[order.index, "gap_to_best"] = best / order - 1 if higher else order / best - 1
        table.loc[order.index, "rank"] = range(1, len(order) + 1)
    table["rank"] = table["rank"].astype("Int64")
    sort_key = table["rank"].astype("Float64").fillna(math.inf)
    return table.assign(_k=sort_key).sort_values("_k", kind="stable").drop(columns="_k")
