"""The ridge solver: the M (or K) at which a matmul row's verdict flips, from its geometry and
how its arrays cross HBM."""

from __future__ import annotations

import numpy as np
import pandas as pd

from hlo_roofline.chips import Chip
from hlo_roofline.judge.compute import column, holds_rows, padded


def ridge_fields(
    ops: pd.DataFrame, rows: np.ndarray, ridge: np.ndarray, chip: Chip, padding: np.ndarray
) -> dict[str, np.ndarray]:
    """The hint fields of the matmul rows ``rows`` (``ridge``: the intensity at which each one's
    compute time meets its memory time; ``padding``: :func:`mxu_padding` of those rows), from its
    geometry and how its arrays cross HBM.

    From the op as it is, one more lhs row (M) adds ``2·N·K`` FLOPs and ``K·lhs + N·out`` bytes
    per batch element, each array at its own element size (s8 in, s32 out: 1 and 4 B), and its
    share of the bytes a fusion moves besides the matmul's arrays (result-shaped: an activation
    saved, a weight update); the weights and other FLOPs (a fused convert) stay. Where that line
    crosses the ridge is the M at which the verdict flips: exact for a single matmul, and on the
    row's own verdict for any op. Along K (the extras fixed) it gives the contracting size where
    no M reaches the ridge. Per-batch weights (batch dims on both operands) keep the intensity
    whatever the batch, so M and K are per batch element; a split-K GEMM is solved as the one
    unsplit GEMM it computes (weights and result once), which is what XLA compiles at a larger
    M."""
    count = column(ops, "count", rows, 1.0)
    count = np.where(count > 0, count, 1.0)
    flops, data = column(ops, "flops", rows, 0.0), column(ops, "bytes_accessed", rows, 0.0)
    batch = np.maximum(column(ops, "mm_batch", rows, 1.0), 1.0)
    m, n, k = (column(ops, c, rows, 0.0) for c in ("mm_m", "mm_n", "mm_k"))
    slices = np.maximum(column(ops, "mm_split_k", rows, 1.0), 1.0)
    batch, k_total = batch / slices, k * slices  # a split-K GEMM as the one GEMM it computes
    sizes = [
        column(ops, c, rows, np.nan) for c in ("mm_lhs_bytes", "mm_rhs_bytes", "mm_out_bytes")
    ]
    with np.errstate(divide="ignore", invalid="ignore"):
        elements = count * batch * (m * k_total + k_total * n + m * n)
        average = np.where(elements > 0, data / elements, 2.0)  # no element sizes: their mean
    lhs, rhs, out = (np.where(np.isnan(e) | (e <= 0), average, e) for e in sizes)
    split = slices > 1
    per = count * batch  # matmuls of this shape per step
    row_bytes = per * (k_total * lhs + n * out)  # an lhs row and a result row
    weights, results = per * k_total * n * rhs, per * m * n * out
    with np.errstate(divide="ignore", invalid="ignore"):  # fused extras: result-shaped, ∝ M
        extra = np.where(m > 0, np.maximum(data - m * row_bytes - weights, 0) / m, 0)
    # The MXU pads N and K to its width (mxu_padding): the work it does, not the FLOPs asked
    # for, meets the memory time at the ridge. Along M that padding is fixed; along K it changes,
    # so K is solved with N's padding alone: from that K on the row is compute-bound (below it,
    # only at a K the padding inflates).
    padding = np.where(split, 1.0, padding)
    n_padding = np.ones(len(rows))
    width = chip.mxu_width
    if width:
        held = np.where(holds_rows(m, n), m, n)  # the dim the array holds besides K
        n_padding = np.where(padding > 1, padded(held, width) / np.maximum(held, 1), 1.0)
    mxu = 2 * per * m * n * k_total  # the matmul's own FLOPs (unpadded)
    # a split-K GEMM from nothing: its weights (along M) or its result (along K) once
    ridge_m = solve(np.where(split, 0.0, m), np.where(split, 0.0, flops + mxu * (padding - 1)),
                     np.where(split, weights, data), 2 * per * n * k_total * padding,
                     row_bytes + np.where(split, 0.0, extra), ridge)  # fmt: skip
    ridge_k = solve(np.where(split, 0.0, k_total),
                     np.where(split, 0.0, flops + mxu * (n_padding - 1)),
                     np.where(split, results, data), 2 * per * m * n * n_padding,
                     per * (m * lhs + n * rhs), ridge)  # fmt: skip
    ridge_k[~np.isnan(ridge_m)] = np.nan  # said only where no M reaches the ridge
    ridge_k[ridge_k <= k_total] = np.nan  # past it already: a longer K would not reach it
    reason = np.where(
        ~np.isnan(ridge_m), "ridge_m", np.where(~np.isnan(ridge_k), "ridge_k", "unreachable")
    )
    reason = np.where(batch > 1, "batched_weights", reason)
    reason = np.where(split, "split_k", reason).astype(object)
    waste = 1 - 1 / padding  # the share of the MXU's work that is padding
    return {"hint_reason": reason, "ridge_m": ridge_m, "ridge_k": ridge_k, "mxu_waste": waste}


def solve(
    size: np.ndarray,
    flops: np.ndarray,
    data: np.ndarray,
    flops_per_unit: np.ndarray,
    bytes_per_unit: np.ndarray,
    ridge: np.ndarray,
) -> np.ndarray:
    """The size x at which ``flops + (x − size)·flops_per_unit`` over ``data + (x − size)·
    bytes_per_unit`` is ``ridge``: where a row of ``size`` would cross it by growing. NaN where
    growing does not raise the intensity to the ridge."""
    with np.errstate(divide="ignore", invalid="ignore"):
        denominator = flops_per_unit - ridge * bytes_per_unit
        x = size + (ridge * data - flops) / denominator
    return np.where((flops_per_unit > 0) & (denominator > 0), np.maximum(x, 0.0), np.nan)
