"""XLA:TPU's own estimate beside the roofline: its cycles at the chip's clock, and why a row's
estimate sits outside the roofline's reach (``xla_gap``). Information for the user, never fitted away."""

from __future__ import annotations

import numpy as np
import pandas as pd

from hlo_roofline import schema
from hlo_roofline.chips import Chip
from hlo_roofline.judge.compute import streams_columns

# Why XLA:TPU's estimate sits outside the roofline's reach (``xla_gap``): owned by the schema.
XLA_GAPS = schema.XLA_GAPS


BELOW_MEMORY_FLOOR = schema.BELOW_MEMORY_FLOOR


_FAR_ABOVE = 2.0  # XLA's estimate over the roofline at which a row names the gap


def xla_gaps(
    ops: pd.DataFrame,
    chip: Chip,
    t_roofline: np.ndarray,
    xla: np.ndarray,
    padding: np.ndarray,
    own_memory: np.ndarray,
):
    """For each op whose XLA:TPU estimate the roofline cannot meet, why (a key of
    :data:`XLA_GAPS`); "" elsewhere. Information for the user, never fitted away.

    Below: XLA's estimate under ``own_memory``, the time the op's own bytes take where XLA
    placed them (HBM, or VMEM at its bandwidth; a prefetch it reads is not charged, as XLA's
    per-op number does not see it). No lower bound can sit under that, so the row is XLA's
    implausibility, not the roofline's: ``below_memory_floor``. Above: XLA's estimate over
    twice the roofline, the likely reason."""
    gaps = np.full(len(ops), "", dtype=object)
    with np.errstate(invalid="ignore"):
        gaps[xla < own_memory] = BELOW_MEMORY_FLOOR
    with np.errstate(divide="ignore", invalid="ignore"):
        far = np.flatnonzero(xla > _FAR_ABOVE * t_roofline)
    if not len(far):
        return gaps
    width = chip.mxu_width
    floor = (chip.calibration.op_floor_s or 0.0) * ops["count"].to_numpy(dtype=float)
    columns = ("opcode", "fused_ops", "mm_m", "mm_n", "mm_k")
    opcode, fused, m, n, k = (ops[c].to_numpy() for c in columns)
    major = (
        ops["major_reduced_elements"].to_numpy(dtype=float)
        if "major_reduced_elements" in ops
        else np.zeros(len(ops))
    )  # a report written before the column existed
    streamed = np.where(streams_columns(ops), n, m)  # the rows each held weight tile sees
    for i in far:
        if k[i] > 0:
            reason = (
                "vector_matmul" if min(n[i], k[i]) == 1
                else "mxu_padding" if padding[i] >= 1.5
                else "mxu_weight_loads" if width and streamed[i] < 8 * width
                else "unexplained"
            )  # fmt: skip
        elif opcode[i] in ("copy", "transpose") or "transpose" in fused[i] or "copy" in fused[i]:
            reason = "layout_change"
        elif opcode[i] == "reduce" or "reduce" in fused[i]:
            reason = "major_reduction" if major[i] > 0 else "lane_reduction"
        elif t_roofline[i] <= _FAR_ABOVE * floor[i]:
            reason = "tiny_op"
        else:
            reason = "unexplained"
        gaps[i] = reason
    return gaps


def xla_estimate(ops: pd.DataFrame, chip: Chip) -> np.ndarray:
    """XLA:TPU's own time for each op as compiled: its cycle estimate at the chip's clock (NaN
    where the compiler recorded none, or the chip has no clock). Shown beside the roofline and
    used to check it; never part of it."""
    if "xla_cycles" not in ops or not chip.clock_hz:
        return np.full(len(ops), np.nan)
    return ops["xla_cycles"].to_numpy(dtype=float) / chip.clock_hz
