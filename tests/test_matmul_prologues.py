"""A matmul fusion's computed left operand, computed again per fetch of its window
(``prologue_elements``, ``calibrated.prologue_passes``).

Where a TPU matmul fusion computes its left operand (SwiGLU's ``silu(gate) * up`` feeding the down
projection, an RMS-scaled input) and its tiling loop splits K 4 or more ways, XLA:TPU's estimate
grows with the times the loop fetches each window of that operand: once per window of the
result's other dimension (N) where N moves outside M, none at one fetch. The fitting set's
products (fixtures/tpu_estimates: const_scaled_matmul, scaled_matmul, swiglu_down,
swiglu_down_n8192, moe_swiglu_grads) set the passes per element (the least they imply); the
report set (fixtures/tpu_programs) was not fitted on.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pandas as pd
import pytest
from tpu_oracle import assert_within_band, priced_ops

from hlo_roofline import chips
from hlo_roofline.hlo.parser import parse_module

ROOT = Path(__file__).resolve().parent.parent / "fixtures"
CHIPS = ("v5e", "v5p", "v6e", "7x")
# The chips whose database charges the recompute (v5e: the fitting set implies none).
CHARGED = ("v5p", "v6e", "7x")
# Report set: the share of the XLA time of the rows with a counted prologue within the band, at
# least (measured: 100% on every chip); none above it.
IN_BAND_FLOOR = {"v5e": 0.99, "v5p": 0.99, "v6e": 0.99, "7x": 0.99}


def _ops(path: Path, chip: str) -> pd.DataFrame:
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    return priced_ops(text, chip)


def _fitting(chip: str) -> pd.DataFrame:
    frames = [_ops(path, chip) for path in sorted((ROOT / "tpu_estimates").glob(f"*.{chip}.hlo.txt"))]
    ops = pd.concat(frames, ignore_index=True)
    return ops[(ops["prologue_elements"] > 0) & ops["xla_estimate_s"].notna()]


def _window_config(path: Path, name: str) -> dict:
    module = parse_module(path.read_text())
    fusion = next(i for c in module.computations.values() for i in c.instructions if i.name == name)
    return json.loads(fusion.attrs["backend_config"])["window_config"]


@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize(
    "program", ["const_scaled_matmul", "scaled_matmul", "swiglu_down", "swiglu_down_n8192"]
)
def test_recompute_count_from_the_window_config(program, chip):
    """The count from XLA's own tiling: the result [4096, N] is walked in windows of
    ``output_window_bounds`` (rows in tiles of 8, columns in lanes of 128), N outermost; where the
    steps outnumber the result's windows 4 or more times (K split) and N has 2 windows or more,
    the computed [4096, K] left operand is counted once per N window, elsewhere not at all."""
    path = ROOT / "tpu_estimates" / f"{program}.{chip}.hlo.txt"
    ops = _ops(path, chip)
    row = ops[(ops["mm_m"] == 4096) & (ops["mm_k"] > 0)].iloc[0]
    config = _window_config(path, row["name"])
    rows, lanes = (int(b) for b in config["output_window_bounds"])
    loop = [int(b) for b in config["iteration_bounds"]]
    m_windows, n_windows = math.ceil(4096 / (8 * rows)), math.ceil(row["mm_n"] / (128 * lanes))
    k_steps = math.prod(loop) / (m_windows * n_windows)
    if k_steps < 4 or n_windows < 2:
        assert row["prologue_elements"] == 0
        return
    assert loop[0] == n_windows  # N outside M: each M window of the operand fetched per N window
    assert row["prologue_elements"] == 4096 * row["mm_k"] * n_windows


@pytest.mark.parametrize("chip", ("v5p", "v6e", "7x"))
def test_xla_charges_the_recompute_per_fetch(chip):
    """SwiGLU's down projection at N = 4096 and 8192: the same operand, the same K split, twice
    the N windows. XLA's time beyond the roofline's other terms, in loop passes over the operand
    computed once, doubles with the counted fetches (within 10%)."""
    device = chips.get(chip).per_device()
    implied = {}
    for program in ("swiglu_down", "swiglu_down_n8192"):
        ops = _ops(ROOT / "tpu_estimates" / f"{program}.{chip}.hlo.txt", chip)
        row = ops[ops["prologue_elements"] > 0].iloc[0]
        counted = row["prologue_elements"] * (device.calibration.prologue_passes or 0.0)
        rest = row["xla_estimate_s"] - row["t_expected_s"] + counted / device.calibration.vector_elements_rate
        fetches = row["prologue_elements"] / (4096 * 14336)
        implied[program] = (fetches, rest / (4096 * 14336 / device.calibration.vector_elements_rate))
    (few, short), (many, long) = implied.values()
    assert many == 2 * few, implied
    assert 0.9 * many / few <= long / short <= 1.1 * many / few, implied


@pytest.mark.parametrize("chip", CHARGED)
def test_passes_are_the_least_the_fitting_set_implies(chip):
    """Each fitting product's estimate implies at least the chip's passes per fetched element
    (XLA's time less the roofline's other terms, over one loop pass of the counted elements), the
    closest within 0.01 of it: the least of them, rounded down."""
    device = chips.get(chip).per_device()
    rows = _fitting(chip)
    assert len(rows) >= 2
    one_pass = rows["prologue_elements"] / device.calibration.vector_elements_rate
    implied = device.calibration.prologue_passes + (rows["xla_estimate_s"] - rows["t_expected_s"]) / one_pass
    assert implied.min() >= device.calibration.prologue_passes, implied.tolist()
    assert implied.min() < device.calibration.prologue_passes + 0.01, implied.tolist()


def test_v5e_estimates_charge_no_recompute():
    """On v5e the SwiGLU down projection at N = 4096 (its operand fetched twice) costs XLA
    nothing beyond the roofline's other terms (at N = 8192, 5 fetches, 0.47 passes per fetch):
    the least the fitting set implies is none, so v5e charges none."""
    ops = _ops(ROOT / "tpu_estimates" / "swiglu_down.v5e.hlo.txt", "v5e")
    row = ops[ops["prologue_elements"] > 0].iloc[0]
    assert row["prologue_elements"] == 2 * 4096 * 14336
    assert chips.get("v5e").calibration.prologue_passes is None
    assert row["xla_estimate_s"] <= 1.01 * row["t_expected_s"]


@pytest.mark.parametrize(
    ("program", "name"),
    [
        ("tpu_programs/vit_train.v5p", "fusion.162"),
        ("tpu_programs/scan_remat_train.v5p", "fusion.354"),
        ("tpu_programs/maxtext_llama3_8b.v5p", "fusion.296"),
        ("published/v5p_32b", "fusion.696"),
    ],
)
def test_not_counted_where_xla_charges_no_recompute(program, name):
    """v5p products whose computed operand the loop fetches 8 to 501 times yet whose estimate is
    the roofline's without it: a computed right operand (ViT's layer-normalised weight gradient),
    an operand computed from VMEM (a scanned layer's), K whole (the vocabulary projection), an
    operand merged from padded windows (a collective matmul's ring chunk in MaxText's 32B step,
    fetched 8 times). None is counted."""
    ops = _ops(ROOT / f"{program}.hlo.txt.gz", "v5p")
    row = ops[ops["name"] == name].iloc[0]
    assert row["prologue_elements"] == 0
    assert row["t_expected_s"] >= 0.95 * row["xla_estimate_s"]


@pytest.mark.parametrize("chip", CHIPS)
def test_report_set_rows_within_the_band(chip):
    """On the report set (nothing fitted on it), the rows with a counted prologue are within the
    band for most of their XLA time and never above it."""
    frames = []
    for path in sorted((ROOT / "tpu_programs").glob(f"*.{chip}.hlo.txt.gz")):
        ops = _ops(path, chip)
        frames.append(ops[(ops["prologue_elements"] > 0) & ops["xla_estimate_s"].notna()])
    rows = pd.concat(frames, ignore_index=True)
    assert len(rows) >= 8, len(rows)
    assert_within_band(rows, IN_BAND_FLOOR[chip], chip)


WINDOW = '"iteration_bounds":["3","6","28"]'  # swiglu_down.v5p's tiling loop, as compiled


@pytest.mark.parametrize(
    "odd",
    [
        '"iteration_bounds":["x","6","28"]',  # not numbers
        '"iteration_bounds":[]',  # no loop
        '"iteration_bounds":"3,6,28"',  # not a list
    ],
)
def test_an_odd_window_config_counts_nothing_and_breaks_nothing(odd):
    """A tiling loop the rules cannot read gives no recompute, pass or K steps (the row keeps its
    MXU time), where the same fusion as compiled has them."""
    text = (ROOT / "tpu_estimates" / "swiglu_down.v5p.hlo.txt").read_text()
    assert text.count(WINDOW) == 1
    columns = ["prologue_elements", "epilogue_elements", "tile_k_steps"]
    compiled = priced_ops(text, "v5p")
    assert (compiled[columns].max() > 0).all()
    ops = priced_ops(text.replace(WINDOW, odd), "v5p")
    assert (ops[columns] == 0).all().all()
    assert (ops["t_expected_s"] >= ops["t_compute_s"]).all()
