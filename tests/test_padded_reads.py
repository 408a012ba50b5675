"""A window sliced out of a padded fusion operand reads only that window.

XLA:TPU's collective matmuls (MaxText's tensor-parallel layers, fixtures/published/v5p_32b) pad a
layer's activations by one row of −inf and slice a 512-column chunk of them per ring step, inside
the matmul fusion: the fusion reads the chunk, not the 805 MB operand. The oracles: bytes counted
by hand from the shapes, and XLA:TPU's own ``estimated_cycles`` of the fusions.
"""

from __future__ import annotations

import gzip

import pytest
from conftest import FIXTURES
from tpu_oracle import BAND

from hlo_roofline import analyze_hlo

HLO = """HloModule padded, is_scheduled=true

%inner (p0: bf16[4,1,8192], i: s32[]) -> bf16[4,2,512] {
  %p0 = bf16[4,1,8192]{2,1,0} parameter(0)
  %ninf = bf16[] constant(-inf)
  %pad = bf16[4,2,8192]{2,1,0} pad(%p0, %ninf), padding=0_0x0_1x0_0
  %zero = s32[] constant(0)
  %i = s32[] parameter(1)
  ROOT %chunk = bf16[4,2,512]{2,1,0} dynamic-slice(%pad, %zero, %zero, %i), dynamic_slice_sizes={4,2,512}
}

%outer (x: bf16[4,1,8192], w: bf16[512,256], i: s32[]) -> bf16[8,256] {
  %x = bf16[4,1,8192]{2,1,0} parameter(0)
  %i = s32[] parameter(2)
  %sliced = bf16[4,2,512]{2,1,0} fusion(%x, %i), kind=kLoop, calls=%inner
  %flat = bf16[8,512]{1,0} bitcast(%sliced)
  %w = bf16[512,256]{1,0} parameter(1)
  ROOT %dot = bf16[8,256]{1,0} dot(%flat, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY %main (x: bf16[4,1,8192], w: bf16[512,256], i: s32[]) -> bf16[8,256] {
  %x = bf16[4,1,8192]{2,1,0} parameter(0)
  %w = bf16[512,256]{1,0} parameter(1)
  %i = s32[] parameter(2)
  ROOT %f = bf16[8,256]{1,0} fusion(%x, %w, %i), kind=kOutput, calls=%outer
}
"""


def test_a_slice_of_a_padded_operand_reads_the_slice():
    row = analyze_hlo(HLO).ops.set_index("name").loc["f"]
    window = 4 * 1 * 512 * 2  # the chunk of x the slice takes (its padded row is the constant)
    expected = window + 512 * 256 * 2 + 8 * 256 * 2 + 4  # + w, the result and the index
    assert row["bytes_accessed"] == pytest.approx(expected)
    assert row["bytes_accessed"] < expected - window + 4 * 8192 * 2  # less than with all of x


def test_collective_matmul_chunks_of_a_padded_operand_are_priced_within_the_band():
    """The v5p_32b fusions that slice a ring step's chunk out of the padded activations were
    1.34x XLA's estimate while the whole operand was charged (above the band: the roofline must
    stay a lower bound)."""
    text = gzip.decompress((FIXTURES / "published" / "v5p_32b.hlo.txt.gz").read_bytes()).decode()
    ops = analyze_hlo(text, chip="v5p").ops.set_index("name")
    chunks = ops.loc[[f"fusion.{n}" for n in (702, 703, 708, 709, 714, 715)]]
    ratio = chunks["t_expected_s"] / chunks["xla_estimate_s"]
    assert ratio.between(*BAND).all() and (ratio <= 1.0).all(), ratio
