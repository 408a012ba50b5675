"""XLA:TPU's matmul pipeline: the counts it reads (a result's pass through the vector unit, a
tiled matmul's operand rereads) on real compiled programs, and the time it holds a matmul
row to, against analytic counts from the shapes in the HLO text."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
from tpu_oracle import priced_ops

from hlo_roofline import chips
from hlo_roofline.cost.tpu.units import result_pass
from hlo_roofline.hlo.parser import parse_shape

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "fixtures" / "tpu_programs"


@pytest.mark.parametrize(
    ("shape", "words"),
    [("f32[8,128]", 512), ("bf16[8,128]", 512), ("s8[8,128]", 256), ("s32[4,4]", 8)],
)
def test_a_result_passes_two_elements_to_a_word_at_most(shape, words):
    """f32 and bf16 results alike: two elements to a 32-bit word; narrower ones pack tighter."""
    assert result_pass(parse_shape(shape)) == words


def _ops(program: str, chip: str):
    """The program's ops priced for ``chip``, each at its own operands' placement (tpu_oracle)."""
    text = gzip.decompress((PROGRAMS / f"{program}.{chip}.hlo.txt.gz").read_bytes()).decode()
    return priced_ops(text, chip)


@pytest.mark.parametrize("chip", ["v5e", "7x"])
def test_attention_scores_pass_at_half_their_f32_elements(chip):
    """The prefill's causal score fusion writes f32 scores [8, 4, 8192, 8192]: its vector pass is
    half their elements (the largest result, two to a word), not one word each."""
    ops = _ops("llama_prefill", chip)
    scores = ops[(ops["mm_k"] == 128) & (ops["mm_n"] == 8192)].iloc[0]
    assert scores["vector_elements"] == 8 * 4 * 8192 * 8192 / 2


def test_a_memory_bound_matmul_takes_its_bytes_at_the_matmul_stream():
    """The decode step's LM head (x[32,4096] · w[4096,128256]): its time is its HBM bytes at the
    chip's matmul stream, not at the published bandwidth (with x's tile read again for each
    tile of w: at most x's bytes per step of the tiling loop); its bound and ridge stay the
    book's."""
    for chip in ("v5e", "v5p", "v6e", "7x"):
        ops = _ops("llama_decode", chip)
        head = ops[ops["mm_n"] == 128256].iloc[0]
        device = chips.get(chip).per_device()
        assert 0 <= head["tile_reread_bytes"] <= 32 * 4096 * 2 * head["tile_steps"]
        hbm = head["bytes_accessed"] - head["vmem_bytes"] + head["tile_reread_bytes"]
        vmem = head["vmem_bytes"] / device.vmem_bandwidth
        stream = hbm / device.calibration.matmul_stream_bandwidth + vmem
        assert head["bound"] == "memory" and head["t_expected_s"] == pytest.approx(stream)
        own = head["bytes_accessed"] - head["vmem_bytes"]  # the memory roof: no reread
        assert head["t_memory_s"] == pytest.approx(own / device.hbm_bandwidth + vmem)
        assert head["critical_intensity"] == pytest.approx(
            device.peak("bf16") * head["t_memory_s"] / head["bytes_accessed"]
        )


def test_the_book_profile_has_no_stream():
    assert chips.get("v5e", profile="book").calibration.matmul_stream_bandwidth is None
    assert np.isclose(chips.get("7x").per_device().calibration.matmul_stream_bandwidth, 5.99e12 / 2)


ESTIMATES = ROOT / "fixtures" / "tpu_estimates"


@pytest.mark.parametrize("chip", ["v5e", "v5p", "v6e", "7x"])
def test_a_fused_chain_is_not_charged_beyond_xla(chip):
    """The fitting set's MLP training step: its matmul fusions that compute an elementwise chain
    beside the product (the backward's subtract and multiply) stay at or below XLA's estimate.
    XLA:TPU prices the result-sized arrays, not the chain: an MXU-then-one-pass-over-the-result
    rule put v5e's three at 1.11-1.16x and v5p's two at 1.03-1.08x."""
    ops = priced_ops((ESTIMATES / f"mlp_step.{chip}.hlo.txt").read_text(), chip)
    chained = ops[(ops["mm_k"] > 0) & ops["xla_estimate_s"].notna()
                  & ops["fused_ops"].str.contains("subtract")]  # fmt: skip
    assert len(chained) >= 1, chip
    ratio = chained["t_expected_s"] / chained["xla_estimate_s"]
    assert (ratio <= 1.0).all(), dict(zip(chained["name"], ratio, strict=True))


_MATMUL_PAIR = (ESTIMATES / "matmul_pair_b4096.7x.hlo.txt").read_text()
_WINDOWS = (
    '"kernel_window_bounds":["512","8"],"output_window_bounds":["64","8"],'
    '"input_window_bounds":["64","32"]'
)
_BOUNDS = '"iteration_bounds":["4","8","1"]'


def _matmuls(text: str, chip: str):
    ops = priced_ops(text, chip)
    return ops[ops["mm_k"] > 0].set_index("name")


@pytest.mark.parametrize(("program", "rows"), [("matmul_pair_b4096", 4096), ("matmul_b8192", 8192)])
def test_a_tiled_matmul_rereads_the_operand_its_inner_loop_moves_over(program, rows):
    """x[rows,4096] @ w[4096,4096] on 7x, both in HBM: XLA's window_config tiles x into
    512-row windows (K whole) and w into 4 windows of 1024 columns, and loops w's 4 tiles
    outermost (iteration_bounds [4, rows/512, 1]): x is read once per tile of w, three times
    more than once; w once. On v6e, x sits in VMEM (S(1)): no HBM reread."""
    text = (ESTIMATES / f"{program}.7x.hlo.txt").read_text()
    matmul = _matmuls(text, "7x").iloc[0]
    assert matmul["tile_reread_bytes"] == 3 * rows * 4096 * 2
    on_v6e = _matmuls((ESTIMATES / f"{program}.v6e.hlo.txt").read_text(), "v6e")
    assert (on_v6e["tile_reread_bytes"] == 0).all()


def test_a_split_k_innermost_rereads_both_operands():
    """The same product with K split into 2 windows of 2048, looped innermost (bounds [4, 8, 2]):
    each of the 64 steps reads a new window of both operands, so x (8 × 2 windows of 2 MiB) is
    read 4 times in all and w (2 × 4 windows of 4 MiB) 8 times: 3 and 7 rereads of 32 MiB."""
    split = (
        '"kernel_window_bounds":["256","8"],"output_window_bounds":["64","8"],'
        '"input_window_bounds":["64","16"]'
    )
    assert _MATMUL_PAIR.count(_WINDOWS) == 2 and _MATMUL_PAIR.count(_BOUNDS) == 2
    text = _MATMUL_PAIR.replace(_WINDOWS, split).replace(_BOUNDS, '"iteration_bounds":["4","8","2"]')
    matmuls = _matmuls(text, "7x")
    assert (matmuls["tile_steps"] == 64).all()
    assert (matmuls["tile_reread_bytes"] == (3 + 7) * 4096 * 4096 * 2).all()


def test_rereads_are_streamed_with_the_operands_and_leave_the_roof_alone():
    """The rereads join the row's HBM bytes at the matmul stream (a floor on its time), not its
    bytes, intensity or memory roof; the book's profile has no stream and no rereads."""
    matmul = _matmuls(_MATMUL_PAIR, "7x").iloc[0]
    device = chips.get("7x").per_device()
    streamed = matmul["bytes_accessed"] - matmul["vmem_bytes"] + matmul["tile_reread_bytes"]
    assert matmul["t_expected_s"] >= streamed / device.calibration.matmul_stream_bandwidth
    assert matmul["t_memory_s"] == pytest.approx(matmul["bytes_accessed"] / device.hbm_bandwidth)
