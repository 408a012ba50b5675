"""Work counts of ops whose work is not the size of the buffer they touch, on real compiled TPU HLO.

The fixtures (``fixtures/inplace/generate.py``, compile-only for v5e, v5p, v6e and 7x) are a KV-cache
update of a decode step (a dynamic-update-slice, fused with a convert, as a scatter, in a loop over
layers), an embedding gradient and a sparse update (scatter-add), scanned weights (a dynamic-slice
of a stacked parameter in a while body), matmuls with fused elementwise prologues, sorts, top-k and
cumulative sums, and a whole decode step. The oracles are the shapes in the HLO text (the update's
bytes, one layer's bytes) and XLA:TPU's own ``estimated_cycles`` of each op.
"""

from __future__ import annotations

import gzip
import math
import warnings
from functools import cache
from pathlib import Path

import pandas as pd
import pytest

from hlo_roofline import analyze_hlo
from hlo_roofline.cost.base import CostContext
from hlo_roofline.cost.inplace import in_place
from hlo_roofline.cost.linalg import matmul_geometry
from hlo_roofline.hlo import parse
from hlo_roofline.judge import verdict

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "inplace"
CHIPS = ("v5e", "v5p", "v6e", "7x")
# The decode step's KV cache (fixtures/inplace/generate.py): batch, length, kv heads, head dim.
B, T, H, D = 8, 4096, 8, 128
BF16 = 2


def _text(name: str) -> str:
    path = FIXTURES / f"{name}.hlo.txt"
    if not path.exists():
        return gzip.decompress(path.with_suffix(".txt.gz").read_bytes()).decode()
    return path.read_text()


@cache
def _report(name: str, chip: str) -> pd.DataFrame:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = analyze_hlo(_text(f"{name}.{chip}"))
    ops, _ = verdict.classify(report.model_frame().assign(prefetch_for=""), chip)
    return ops


def _instr(module, name: str):
    return next(i for c in module.computations.values() for i in c.instructions if i.name == name)


def _row(ops: pd.DataFrame, opcode: str, contains: str) -> pd.Series:
    rows = ops[(ops["opcode"] == opcode) & ops["fused_ops"].str.contains(contains, regex=False)]
    assert len(rows) == 1, rows[["name", "fused_ops"]]
    return rows.iloc[0]


@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("program", ["kv_dus", "kv_dus_fused", "kv_scatter"])
def test_kv_cache_update_costs_the_update_not_the_cache(program, chip):
    """One position of a [B, T, H, D] cache written: bytes and vector elements are the update's
    (a few times [B, 1, H, D]), nowhere near the cache's, fused with a convert or as a scatter."""
    ops = _report(program, chip)
    update = B * H * D
    op = "scatter" if program == "kv_scatter" else "dynamic-update-slice"
    row = _row(ops, "fusion", op)
    assert row["vector_elements"] <= 4 * update
    assert row["bytes_accessed"] <= 6 * update * BF16 + 4096
    assert row["bytes_accessed"] >= 2 * update * BF16  # the update is read and written
    cache_bytes = B * T * H * D * BF16
    assert row["bytes_accessed"] < cache_bytes / 100
    if not math.isnan(row["xla_estimate_s"]):
        assert 0.5 <= row["t_expected_s"] / row["xla_estimate_s"] <= 1.25


@pytest.mark.parametrize("chip", CHIPS)
def test_in_place_detection_on_compiled_fusions(chip):
    """Every fusion XLA compiled around a dynamic-update-slice or scatter of a donated buffer is
    found in place, its buffer the fusion operand that is the donated parameter (or the loop
    carry), and its update the [B, 1, H, D] slice."""
    for program in ("kv_dus", "kv_dus_fused", "kv_scatter", "kv_layers_carry"):
        module = parse(_text(f"{program}.{chip}"))
        fusions = [
            i for c in module.computations.values() if not c.is_fusion for i in c.instructions
            if i.opcode == "fusion" and any(
                j.opcode in ("dynamic-update-slice", "scatter") for j in i.called[0].instructions
            )
        ]  # fmt: skip
        assert fusions, program
        for fusion in fusions:
            aliases = in_place(fusion)
            assert set(aliases) == {0}, (program, fusion.name)
            buffer = fusion.operands[aliases[0].operand]
            assert buffer.shape.elements in (B * T * H * D, 4 * B * T * H * D)
            assert aliases[0].update_elements == B * H * D


def test_in_place_through_bitcasts_tuples_and_nested_fusions():
    """A tuple root whose element is a bitcast of a dynamic-update-slice of a bitcast parameter,
    and a scatter inside a nested fusion, are in place; a DUS into a buffer made inside the
    fusion (a broadcast) is not."""
    module = parse(
        """HloModule m
inner {
  a = f32[64,16]{1,0} parameter(0)
  i = s32[4,1]{1,0} parameter(1)
  u = f32[4,16]{1,0} parameter(2)
  ROOT s = f32[64,16]{1,0} scatter(a, i, u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
}
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT z = f32[] add(x, y)
}
outer {
  p0 = f32[8,128,16]{2,1,0} parameter(0)
  p1 = f32[8,1,16]{2,1,0} parameter(1)
  p2 = s32[] parameter(2)
  b = f32[1024,16]{1,0} bitcast(p0)
  v = f32[8,128,16]{2,1,0} bitcast(b)
  z = s32[] constant(0)
  d = f32[8,128,16]{2,1,0} dynamic-update-slice(v, p1, z, p2, z)
  c = f32[] constant(0)
  fresh = f32[8,128,16]{2,1,0} broadcast(c), dimensions={}
  e = f32[8,128,16]{2,1,0} dynamic-update-slice(fresh, p1, z, p2, z)
  ROOT t = (f32[8,128,16]{2,1,0}, f32[8,128,16]{2,1,0}) tuple(d, e)
}
nest {
  q0 = f32[64,16]{1,0} parameter(0)
  q1 = s32[4,1]{1,0} parameter(1)
  q2 = f32[4,16]{1,0} parameter(2)
  ROOT f = f32[64,16]{1,0} fusion(q0, q1, q2), kind=kCustom, calls=inner
}
ENTRY e {
  cache = f32[8,128,16]{2,1,0} parameter(0)
  new = f32[8,1,16]{2,1,0} parameter(1)
  pos = s32[] parameter(2)
  table = f32[64,16]{1,0} parameter(3)
  idx = s32[4,1]{1,0} parameter(4)
  upd = f32[4,16]{1,0} parameter(5)
  two = (f32[8,128,16]{2,1,0}, f32[8,128,16]{2,1,0}) fusion(cache, new, pos), kind=kLoop, calls=outer
  sc = f32[64,16]{1,0} fusion(table, idx, upd), kind=kCustom, calls=nest
  ROOT r = ((f32[8,128,16]{2,1,0}, f32[8,128,16]{2,1,0}), f32[64,16]{1,0}) tuple(two, sc)
}
"""
    )
    two, scattered = _instr(module, "two"), _instr(module, "sc")
    aliases = in_place(two)
    assert set(aliases) == {0} and aliases[0].operand == 0 and aliases[0].update_elements == 8 * 16
    nested = in_place(scattered)
    assert set(nested) == {0} and nested[0].operand == 0 and nested[0].combines
    ctx = CostContext(module)
    # Written: the update (element 0) and the whole fresh buffer (element 1); read: the update
    # (twice: both DUS read p1, one read a parameter), the index, never the cache.
    assert ctx.cost(two).bytes_accessed == 8 * 16 * 4 + 8 * 128 * 16 * 4 + 8 * 16 * 4 + 4
    # The scatter: updates written, the rows they combine into read, the updates and indices read.
    assert ctx.cost(scattered).bytes_accessed == 3 * 4 * 16 * 4 + 4 * 4
    # XLA's own model is unchanged: it follows neither the bitcasts nor the nested scatter.
    xla = CostContext(module, model="xla")
    assert xla.cost(scattered).bytes_accessed > ctx.cost(scattered).bytes_accessed


@pytest.mark.parametrize("chip", CHIPS)
def test_scatter_add_moves_the_updated_rows(chip):
    """An in-place sparse update of a [32768, 2048] f32 table by 8192 rows: the updates read,
    the rows they land on read and written, and the indices (3·updates + indices), not the table
    (the scatter runs as a kCustom fusion, on 7x with a nested sorting gather)."""
    ops = _report("embed_update", chip)
    rows = ops[ops["fused_ops"].str.contains("scatter") | ops["name"].str.contains("scatter")]
    row = rows.sort_values("bytes_accessed").iloc[-1]
    updates = 8192 * 2048 * 4
    assert row["bytes_accessed"] <= 3 * updates + 8 * 8192 * 4
    assert row["vector_elements"] <= 8192 * 2048 + 8192


@pytest.mark.parametrize("chip", CHIPS)
def test_scanned_weight_slice_reads_one_layer(chip):
    """A scan over a stacked [8, 2048, 2048] weight: each iteration's matmul reads one layer
    (on 7x through a relayout XLA fuses before the slice), never the stack."""
    ops = _report("scanned_weights", chip)
    matmul = ops[(ops["mm_k"] > 0)].iloc[0]
    layer = 2048 * 2048 * BF16
    per_step = matmul["bytes_accessed"] / matmul["count"]
    assert layer <= per_step <= layer + 3 * 256 * 2048 * BF16


@pytest.mark.parametrize("chip", CHIPS)
def test_decode_step_weights_read_per_layer(chip):
    """The decode step's matmuls inside its scan over 4 layers each read one layer's weight, and
    the step as a whole is within 0.5-1.25× of XLA:TPU's sum over the ops it estimated."""
    ops = _report("decode_step", chip)
    d, f = 2048, 5632
    for n in (f,):
        rows = ops[(ops["mm_n"] == n) & (ops["mm_k"] == d) & (ops["count"] == 4)]
        assert len(rows), chip
        assert (rows["bytes_accessed"] / 4 <= 2 * d * n * BF16 + 2e6).all()
    estimated = ops[ops["xla_estimate_s"].notna()]
    ratio = estimated["t_expected_s"].sum() / estimated["xla_estimate_s"].sum()
    assert 0.5 <= ratio <= 1.25, ratio


def test_projection_to_heads_has_its_heads_in_n():
    """``btd,dnh->btnh`` as XLA:TPU lowers it: a convolution whose spatial dim of heads the lhs
    does not span. Its matmul is [B·T, D] @ [D, N·H]: N = heads × head_dim, not head_dim."""
    module = parse(
        """HloModule m
ENTRY e {
  a = bf16[4,2048,2048,1]{3,2,1,0} parameter(0)
  b = bf16[2048,16,128,1]{3,2,1,0} parameter(1)
  ROOT c = bf16[4,2048,16,128]{3,1,2,0} convolution(a, b), window={size=1x16 pad=0_0x15_15 rhs_reversal=0x1}, dim_labels=0bf1_i1o0->0b1f
}
"""
    )
    batch, m, n, k = matmul_geometry(module.entry.root)
    assert (batch, m, n, k) == (1, 4 * 2048, 16 * 128, 2048)
    flops = CostContext(module).cost(module.entry.root).flops
    assert flops == 2 * batch * m * n * k


@pytest.mark.parametrize("chip", CHIPS)
def test_attention_batched_dots_keep_heads_as_batch(chip):
    """Attention's score and PV dots (heads on both operands) stay batched over batch × heads with
    M, N, K from the sequence and head sizes."""
    ops = _report("attention", chip)
    geometries = {tuple(r) for r in ops.loc[ops["mm_k"] > 0, ["mm_batch", "mm_m", "mm_n", "mm_k"]]
                  .itertuples(index=False)}  # fmt: skip
    for g in geometries:
        assert g[0] == 4 * 16 and sorted(g[1:]) == [128, 2048, 2048], g


@pytest.mark.parametrize("chip", CHIPS)
def test_fused_prologue_is_vector_work(chip):
    """Softmax backward fused into the matmul that consumes it: the computed operand
    [4, 8, 1024, 1024] passes the vector unit (more than the matmul's result alone), and the op
    is within 0.5-1.25× of XLA's estimate."""
    ops = _report("softmax_backward", chip)
    row = ops[ops["mm_k"] > 0].iloc[0]
    result_words = 4 * 1024 * 8 * 128 / 2
    assert row["vector_elements"] > result_words
    assert row["vector_elements"] <= 4 * 8 * 1024 * 1024 / 2
    assert 0.5 <= row["t_expected_s"] / row["xla_estimate_s"] <= 1.25


def test_sort_and_topk_count_comparison_passes():
    """A sort of rows of 4096 keys: ceil(log2 4096) = 12 passes over its keys (the n·log2 n
    comparison bound); a top-64 of rows of 32768: log2 64 = 6 passes."""
    sort = _report("sort", "v5e")
    row = sort[sort["opcode"] == "sort"].iloc[0]
    assert row["vector_elements"] == 256 * 4096 * 12
    topk = _report("topk", "v5e")
    row = topk[topk["opcode"] == "custom-call"].iloc[0]
    assert row["vector_elements"] == 64 * 32768 * 6


@pytest.mark.parametrize("chip", CHIPS)
def test_cumulative_sum_is_a_scan(chip):
    """jnp.cumsum over rows of 4096: XLA:TPU writes it as reduce-windows of n with n − 1 of
    padding; the roofline model counts ceil(log2 n) additions per element (a parallel prefix),
    XLA's model the window's n − 1."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        roofline = analyze_hlo(_text(f"cumsum.{chip}")).model_frame()
        xla = analyze_hlo(_text(f"cumsum.{chip}"), cost_model="xla").model_frame()
    windows = roofline["fused_ops"].str.contains("reduce-window") | (
        roofline["opcode"] == "reduce-window"
    )
    assert windows.any()
    assert roofline.loc[windows, "flops"].sum() * 10 < xla.loc[windows, "flops"].sum()
    # Elements 256 × 4096 in all; each passes at most log2(4096) = 12 scan steps in all levels.
    assert roofline.loc[windows, "flops"].sum() <= 256 * 4096 * 12


@pytest.mark.parametrize("chip", CHIPS)
def test_compiled_head_projections_have_real_n(chip):
    """``btd,dnh->btnh`` and ``btnh,nhd->btd`` compiled for the chip: both matmuls are
    [8192, 2048] @ [2048, 2048] (heads × head_dim = 2048 on N or K, never N = head_dim), and the
    projection to heads is not charged MXU padding XLA does not charge (within 0.5-1.25×)."""
    ops = _report("head_projections", chip)
    matmuls = ops[ops["mm_k"] > 0]
    assert len(matmuls) == 2
    for row in matmuls.itertuples():
        assert (row.mm_batch, row.mm_m, row.mm_n, row.mm_k) == (1, 4 * 2048, 2048, 2048)
    assert (matmuls["t_expected_s"] <= 1.25 * matmuls["xla_estimate_s"]).all()
    assert (matmuls["t_expected_s"] >= 0.5 * matmuls["xla_estimate_s"]).any()


@pytest.mark.parametrize("chip", CHIPS)
def test_sliced_operand_passes_its_slices(chip):
    """``silu(h[:, :n]) * h[:, n:]`` of h = [4096, 8192]: the loop runs over one half's
    elements (4096 × 4096), not h's, and is not above XLA's estimate."""
    ops = _report("glu_split", chip)
    row = ops[ops["fused_ops"].str.contains("slice") & (ops["mm_k"] == 0)].iloc[0]
    assert row["vector_elements"] == 4096 * 4096
    assert row["t_expected_s"] <= 1.25 * row["xla_estimate_s"]


@pytest.mark.parametrize("chip", ["v5e", "7x"])
def test_decode_step_multi_output_cache_update_is_in_place(chip):
    """The decode step's scan writes each layer's K and V caches back into the stacked output:
    fusions whose tuple root holds dynamic-update-slices, each in place on its own operand."""
    module = parse(_text(f"decode_step.{chip}"))
    fusions = [
        i for c in module.computations.values() if not c.is_fusion for i in c.instructions
        if i.opcode == "fusion" and any(
            j.opcode == "dynamic-update-slice" for j in i.called[0].instructions
        )
    ]  # fmt: skip
    found = {i.name: in_place(i) for i in fusions}
    assert all(found.values()), found
    layer = B * T * H * D
    for fusion in fusions:
        for index, alias in found[fusion.name].items():
            buffer = fusion.operands[alias.operand].shape
            assert buffer.elements == 4 * layer  # the stacked [L, B, T, H, D] cache
            assert alias.update_elements in (layer, B * H * D)
            assert fusion.shape.leaves()[index].elements == buffer.elements
