"""The vector pass over a K-split TPU matmul fusion's result-sized arrays (``vpu.epilogue``).

XLA:TPU's estimate of a matmul fusion whose tiling loop splits K adds a pass of the vector unit
over every array of the result's size (the results, and the fused operands only the epilogue
reads: SwiGLU or GELU backward's saved activations), overlapping one K step of MXU time. The rate
is fitted on the fitting set's epilogue fixtures (fixtures/tpu_estimates: the fastest per chip, a
lower bound); the report set (fixtures/tpu_programs) was not fitted on.
"""

from __future__ import annotations

import gzip
from functools import cache
from pathlib import Path

import pandas as pd
import pytest
from tpu_oracle import BAND, priced_ops

from hlo_roofline import chips

ROOT = Path(__file__).resolve().parent.parent / "fixtures"
CHIPS = ("v5e", "v5p", "7x")
# v6e has no rate: the fastest its fixtures imply (gelu_bwd_experts, 119.6 elements per cycle) put
# the Llama block's SwiGLU backward (llama_train fusion.17, K split 4 ways) at 1.29x XLA, 0.5% of
# v6e's report-set time above the band; XLA hides more of the pass there than on any fit point.
# The fitting set's epilogue fixtures (fixtures/tpu_estimates.py): a SwiGLU and a GELU backward
# fused after a K = 14336 product, and the same per expert of an MoE (K = 4096).
FITTING = ("swiglu_bwd_k14336", "gelu_bwd_k14336", "swiglu_bwd_experts", "gelu_bwd_experts")
# Report set: the share of the XLA time of the rows the pass is counted on within the band, at
# least (measured: 100% / 99.3% / 99.1%), and above it, at most.
IN_BAND_FLOOR = {"v5e": 0.99, "v5p": 0.98, "7x": 0.98}
ABOVE_CEILING = {"v5e": 0.0, "v5p": 0.0, "7x": 0.0}


def _fit_point(program: str, chip: str) -> tuple[pd.Series, float] | None:
    """The fixture's matmul row and the rate its estimate implies: its epilogue elements over
    XLA's time less the MXU's, less the tile steps, plus the one K step it overlaps; None where
    XLA did not split K there."""
    ops = priced_ops((ROOT / "tpu_estimates" / f"{program}.{chip}.hlo.txt").read_text(), chip)
    rows = ops[ops["epilogue_elements"] > 0]
    if rows.empty:
        return None
    row = rows.iloc[0]
    device = chips.get(chip).per_device()
    mxu = row["t_compute_s"]
    assert row["compute_unit"] == "mxu"
    rest = (
        row["xla_estimate_s"] - mxu - row["tile_steps"] * device.tile_step_s
        + mxu / row["tile_k_steps"]
    )  # fmt: skip
    return row, row["epilogue_elements"] / rest


@pytest.mark.parametrize("chip", CHIPS)
def test_the_epilogue_rate_is_the_fastest_fit_point(chip):
    """The chip's rate is the fastest its fitting fixtures imply (rounded up, at most 0.1%)."""
    rates = [found[1] for p in FITTING if (found := _fit_point(p, chip)) is not None]
    assert rates, f"{chip}: no fitting fixture splits K"
    device = chips.get(chip).per_device()
    assert max(rates) <= device.epilogue_rate <= max(rates) * 1.001


@pytest.mark.parametrize("chip", CHIPS)
def test_the_fitting_fixtures_split_k_and_count_their_arrays(chip):
    """The count from shapes: SwiGLU backward passes 2 activations in and 2 gradients out, GELU
    backward 1 and 1, each of the result's elements; its K steps are the loop's over the result's
    windows (4 or more)."""
    arrays = {"swiglu": 4, "gelu": 2}
    for program in FITTING:
        found = _fit_point(program, chip)
        if found is None:
            continue
        row, _ = found
        result = row["mm_batch"] * row["mm_m"] * row["mm_n"]
        assert row["epilogue_elements"] == arrays[program.split("_")[0]] * result
        assert row["tile_k_steps"] >= 4
        assert row["tile_steps"] % row["tile_k_steps"] == 0


@pytest.mark.parametrize("chip", CHIPS)
def test_fitting_fixtures_within_the_band(chip):
    """Every epilogue fixture's matmul, fitted or not, is within the band."""
    for program in FITTING:
        found = _fit_point(program, chip)
        if found is None:
            continue
        row, _ = found
        ratio = row["t_roofline_s"] / row["xla_estimate_s"]
        assert BAND[0] <= ratio <= BAND[1], f"{program}.{chip}: {ratio:.2f}"


@cache
def _report_rows(chip: str) -> pd.DataFrame:
    frames = []
    for path in sorted((ROOT / "tpu_programs").glob(f"*.{chip}.hlo.txt.gz")):
        ops = priced_ops(gzip.decompress(path.read_bytes()).decode(), chip)
        frames.append(ops[(ops["epilogue_elements"] > 0) & ops["xla_estimate_s"].notna()])
    return pd.concat(frames, ignore_index=True)


@pytest.mark.parametrize("chip", CHIPS)
def test_epilogue_rows_of_the_report_set_within_the_band(chip):
    """On programs no rate was fitted on, the rows the pass is counted on are within the band for
    most of their XLA time, and above it for at most the chip's ceiling."""
    rows = _report_rows(chip)
    assert len(rows), chip
    ratio = rows["t_roofline_s"] / rows["xla_estimate_s"]
    weight = rows["xla_estimate_s"] / rows["xla_estimate_s"].sum()
    within = float(weight[ratio.between(*BAND)].sum())
    above = float(weight[ratio > BAND[1]].sum())
    print(f"{chip}: {len(rows)} rows, within {within:.1%}, above {above:.1%}")
    assert within >= IN_BAND_FLOOR[chip]
    assert above <= ABOVE_CEILING[chip] + 1e-9


def test_v6e_has_no_epilogue_rate():
    """v6e is left at the tile step (see ``CHIPS``): no rate, so no row's time moves."""
    assert chips.get("v6e").per_device().epilogue_rate is None
