"""Hints: the ``hint``, ``hint_reason``, ``ridge_m``, ``ridge_k`` and ``mxu_waste`` columns of
classified ops, and the one place a hint is worded (:func:`hint_text`)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from hlo_roofline.chips import Chip
from hlo_roofline.cost.facts import shape_of
from hlo_roofline.hlo.parser import HloParseError
from hlo_roofline.judge.compute import column, holds_rows
from hlo_roofline.judge.ridge import ridge_fields
from hlo_roofline.schema import BOUNDS


def hint_columns(
    ops: pd.DataFrame,
    verdicts: Mapping[str, np.ndarray],
    matmul: np.ndarray,
    no_rate: np.ndarray,
    rates: dict,
    chip: Chip,
    padding: np.ndarray,
) -> dict[str, object]:
    """The hint columns of classified ops: fields for matmuls that have a verdict (NumPy over
    those rows), the text rendered from them, and the rows that say why they have no verdict
    (no rate for the dtype) or no time (a prefetch). ``verdicts``: the rows' ``bound``,
    ``intensity``, ``critical_intensity`` and ``expected_by``, judged before their hints."""
    size = len(ops)
    reason = np.full(size, "", dtype=object)
    hint = np.full(size, "", dtype=object)
    ridge_m, ridge_k, waste = np.full(size, np.nan), np.full(size, np.nan), np.zeros(size)
    bound = np.asarray(verdicts["bound"])
    rows = np.flatnonzero(matmul & ~no_rate & np.isin(bound, BOUNDS[:3]))
    if len(rows):
        intensity = np.asarray(verdicts["intensity"], dtype=float)[rows]
        ridge = np.asarray(verdicts["critical_intensity"], dtype=float)[rows]
        fields = ridge_fields(ops, rows, ridge, chip, padding[rows])
        by = (
            np.asarray(verdicts["expected_by"])[rows]
            if "expected_by" in verdicts
            else np.full(len(rows), "")
        )
        loop = by == "loop"  # expected at its result's loop, not the MXU
        fields["hint_reason"][loop] = "vector_loop"
        reason[rows] = fields["hint_reason"]
        ridge_m[rows], ridge_k[rows] = fields["ridge_m"], fields["ridge_k"]
        waste[rows] = fields["mxu_waste"]
        split = reason[rows] == "split_k"
        geometry = ops[["mm_m", "mm_n", "mm_k", "mm_batch"]].to_numpy()[rows]
        batch = np.where(split, ops["mm_split_k"].to_numpy()[rows] if "mm_split_k" in ops else 1,
                         geometry[:, 3])  # fmt: skip
        width = chip.mxu_width
        tiles = row_tiles(ops, rows)
        hint[rows] = [
            hint_text(r, b, m=int(g[0]), n=int(g[1]), k=int(g[2]), batch=int(nb),
                      ridge_m=rm, ridge_k=rk, intensity=i, ridge=ri, mxu_waste=w, mxu_width=width,
                      row_tile=t)
            for r, b, g, nb, rm, rk, i, ri, w, t in zip(
                reason[rows], bound[rows], geometry, batch, fields["ridge_m"], fields["ridge_k"],
                intensity, ridge, fields["mxu_waste"], tiles, strict=True)
        ]  # fmt: skip
    for i in np.flatnonzero(no_rate):  # the row says why its compute time is missing
        reason[i] = "no_rate"
        hint[i] = hint_text(
            "no_rate", bound[i], detail=rates[ops["dtype"].iat[i], ops["precision"].iat[i]][1]
        )
    if "prefetch_for" in ops:  # the copy row stays, saying whom it feeds
        readers = ops["prefetch_for"].to_numpy()
        for i in np.flatnonzero(readers != ""):
            reason[i] = "prefetch"
            hint[i] = hint_text("prefetch", bound[i], detail=readers[i])
    return {"hint": hint, "hint_reason": reason, "ridge_m": ridge_m, "ridge_k": ridge_k,
            "mxu_waste": waste}  # fmt: skip


def row_tiles(ops: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """The rows each matmul's result is stored in tiles of, by its layout's first tile (a TPU's
    ``T(8,128)``: 8), where its M rows are its second-minor dim; 0 where untiled (a GPU, HLO
    without layouts): the bytes are counted as stored, so the crossover is for that array."""
    tiles = np.zeros(len(rows), dtype=int)
    if "shape" not in ops:
        return tiles
    m = column(ops, "mm_m", rows, 0.0)
    # Each distinct (shape, M) once: a big program repeats a few hundred of them.
    uniques: dict[tuple[str, float], int] = {}
    codes = np.fromiter(
        (
            uniques.setdefault((text, rows_m), len(uniques)) if isinstance(text, str) else -1
            for text, rows_m in zip(ops["shape"].to_numpy()[rows].tolist(), m.tolist(), strict=True)
        ),
        int,
        len(rows),
    )
    found = np.zeros(len(uniques), dtype=int)
    for k, (text, rows_m) in enumerate(uniques):
        shape = shape_of(text)  # typed by the cost layer (None: no shape)
        if shape is None:
            continue
        with contextlib.suppress(HloParseError, ValueError, IndexError, TypeError):
            leaf = shape.leaves()[0]
            layout = leaf.layout
            if layout is None or not layout.tiles or len(layout.tiles[0]) < 2:
                continue
            order = layout.minor_to_major or tuple(range(len(leaf.dims) - 1, -1, -1))
            if len(order) >= 2 and leaf.dims[order[1]] == rows_m:
                found[k] = layout.tiles[0][-2]
    known = codes >= 0  # a missing shape: untiled
    tiles[known] = found[codes[known]]
    return tiles


def hint_text(
    reason: str,
    bound: str,
    *,
    m: int = 0,
    n: int = 0,
    k: int = 0,
    batch: int = 1,
    ridge_m: float = math.nan,
    ridge_k: float = math.nan,
    intensity: float = math.nan,
    ridge: float = math.nan,
    mxu_waste: float = 0.0,
    mxu_width: int = 0,
    row_tile: int = 0,
    detail: str = "",
) -> str:
    """A row's hint in words, from its fields: the one place a hint is written. ``bound`` opens
    it (so it never contradicts the row's verdict); ``batch`` is the batch elements with their
    own weights, or for ``split_k`` the slices of K; ``detail`` is the text of a ``prefetch``
    (the readers) or ``no_rate`` (the problem) row. ``row_tile``: the rows of the lhs's storage
    tile on a TPU; where M is not a multiple of it, the array as stored has more rows than M, its
    bytes are the stored ones, and the hint says that its crossover is for that array."""
    if reason == "prefetch":
        return f"HBM→VMEM prefetch for {detail}: its HBM time is charged to them"
    if reason == "no_rate" or not reason:
        return detail
    state = f"{bound}-bound"
    if reason == "vector_loop":
        return (
            f"{state}: the loop over its result on the vector unit is slower than its MXU work "
            "and its bytes (XLA:TPU's loop rate); a larger M or K would not change that"
        )
    per = " per batch element" if reason == "batched_weights" else ""
    if ridge_m < 1:  # even one row is past it (NaN compares False): no M to name
        reaches = f"every M{per} reaches the ridge ({ridge:.0f} FLOP/B)"
    elif not math.isnan(ridge_m):
        reaches = f"ridge at M≈{ridge_m:.0f}{' rows' + per if per else ''}"
    elif not math.isnan(ridge_k):
        whole_k = k * batch if reason == "split_k" else k
        reaches = (
            f"no M{per} reaches the ridge ({ridge:.0f} FLOP/B): N·K too small; the contracting "
            f"dim{per} would at K≈{ridge_k:.0f} (K={whole_k})"
        )
    elif bound == "compute":  # past the ridge, and a larger M or K would not raise it further
        reaches = f"past the ridge ({ridge:.0f} FLOP/B) at this M and K{per}"
    else:
        reaches = f"cannot reach the ridge ({ridge:.0f} FLOP/B) at any M or K{per}"
    if reason == "batched_weights":
        text = (
            f"{state}: {batch} batch elements with their own weights keep the intensity at "
            f"{intensity:.3g} FLOP/B whatever the batch; {reaches}"
            + (f" (M={m})" if not math.isnan(ridge_m) else "")
        )
    elif reason == "split_k":
        text = (
            f"{state} at M={m}: a split-K GEMM (K={k * batch} cut into {batch} slices summed "
            f"after); as one GEMM, {reaches}"
        )
    elif reason == "ridge_m":
        text = f"{state} at M={m}; {reaches}"
        if row_tile and m % row_tile and not math.isnan(ridge_m) and ridge_m >= 1:
            text += " for the lhs as stored (its rows padded to the layout's tile)"
    else:
        text = f"{state}: {reaches}"
    if mxu_waste > 0.01:
        held = f"M,K={m},{k}" if holds_rows(m, n) else f"N,K={n},{k}"
        text += f"; MXU {mxu_width}-padding of {held} wastes {mxu_waste:.0%}"
    return text
