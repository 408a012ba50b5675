"""XLA:TPU's per-op ``estimated_cycles`` as the oracle: pricing a committed program and the shares
of XLA's time the roofline lands in. Shared by test_tpu_estimates.py (small programs) and
test_tpu_programs.py (realistic ones), so both judge the model the same way."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from hlo_roofline import analyze_hlo, chips
from hlo_roofline.judge import compute, verdict, xla_gap

BAND = (0.5, 1.25)  # roofline ÷ XLA's estimate counted as agreeing
# Rows where XLA's own estimate is below the op's byte time: XLA is the implausible one there, so
# the row is left out of the shares (with that reason): the verdict names the gap.
BELOW_MEMORY_FLOOR = xla_gap.BELOW_MEMORY_FLOOR


def priced_ops(text: str, chip: str) -> pd.DataFrame:
    """Every op of an optimized module, classified for ``chip``, each at its own time (a
    prefetching copy's HBM read is not charged to its reader: XLA's number does not see the
    prefetch); ``reads_prefetch`` marks the readers. Ops without an XLA estimate are kept."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = analyze_hlo(text)
    readers = {n for names in report.model_frame()["prefetch_for"] for n in names.split(",") if n}
    ops = report.model_frame().assign(prefetch_for="")
    ops, _ = verdict.classify(ops, chip)
    return ops.assign(reads_prefetch=ops["name"].isin(readers))


def shares(ops: pd.DataFrame) -> tuple[float, float]:
    """Of XLA's time over ``ops`` (those with an estimate): the share whose roofline is within
    the band, and the share above it."""
    bands = band_shares(ops)
    return bands["within"], bands["above"]


def band_shares(ops: pd.DataFrame) -> dict[str, float]:
    """Shares of XLA's time within 0.5–1.25×, above and below, over the ops with an estimate
    whose gap is not "below the memory floor"; ``left_out``: the share of XLA's time left out for
    that reason."""
    ops = ops[ops["xla_estimate_s"].notna()]
    total = ops["xla_estimate_s"].sum()
    floor = ops["xla_gap"] == BELOW_MEMORY_FLOOR if "xla_gap" in ops else False
    kept = ops[~floor]
    ratio = kept["t_expected_s"] / kept["xla_estimate_s"]
    weight = kept["xla_estimate_s"]
    whole = weight.sum()
    return {
        "within": float(weight[ratio.between(*BAND)].sum() / whole),
        "above": float(weight[ratio > BAND[1]].sum() / whole),
        "below": float(weight[ratio < BAND[0]].sum() / whole),
        "left_out": float(1 - whole / total) if total else 0.0,
    }


def assert_within_band(rows: pd.DataFrame, floor: float, label: str) -> None:
    """Of the XLA time of ``rows`` (each with an estimate, none left out), at least ``floor``
    within the band, and no row above it."""
    ratio = rows["t_expected_s"] / rows["xla_estimate_s"]
    weight = rows["xla_estimate_s"] / rows["xla_estimate_s"].sum()
    within = float(weight[ratio.between(*BAND)].sum())
    print(f"{label}: {len(rows)} rows, within {within:.1%}")
    assert within >= floor, (label, within)
    assert (ratio <= BAND[1]).all(), rows.loc[ratio > BAND[1], "name"].tolist()


def loop_times(ops: pd.DataFrame, chip: str) -> np.ndarray:
    """Each row's vector loop time on ``chip`` (one device): its elements at the loop rate, or
    that plus the HBM reads XLA:TPU charges on top (compute.loop_reads) where those set it; the
    rows whose roofline this reaches are the ones the loop rate sets."""
    device = chips.get(chip).per_device()
    loop = (ops["vector_elements"] / device.calibration.vector_elements_rate).to_numpy(dtype=float)
    hbm_bytes = (ops["bytes_accessed"] - ops["vmem_bytes"]).to_numpy(dtype=float)
    matmul = ops["mm_k"].to_numpy() > 0
    return np.maximum(loop, compute.loop_reads(ops, device, matmul, loop, hbm_bytes))
