"""JAX's attention kernels (Pallas TPU flash, splash, paged and ragged paged attention; the Pallas
Triton ``mha`` on NVIDIA), compiled for real (fixtures/attention_kernels/generate.py), priced from
their shapes and compared with the analytic attention count of the shapes each case was built with
(cases.json), computed here: 4·D FLOPs a (query, key) pair forward, 6·D for a dq kernel, 8·D for a
dkv kernel, 10·D fused, 14·D for Triton's mha_backward (both loops); decode 4·D a (query head,
position) pair over the longest context the page table allows."""

from __future__ import annotations

import gzip
import json
import re

import pytest
from conftest import FIXTURES, SLOW

from hlo_roofline.cost import walk
from hlo_roofline.cost.attention_kernels import price, recognise
from hlo_roofline.cost.base import CostContext
from hlo_roofline.hlo import HloParseError, parse

HERE = FIXTURES / "attention_kernels"
CASES = json.loads((HERE / "cases.json").read_text())
KERNEL_TARGETS = ("tpu_custom_call", "__gpu$xla.gpu.triton")


def load(case: str):
    return parse_text(gzip.open(HERE / f"{case}.hlo.txt.gz", "rt").read())


def parse_text(text: str):
    """The module. Splash attention's kernel_metadata attribute holds raw newlines, which the
    parser may not take yet: then the continuation lines are joined onto their instruction."""
    try:
        return parse(text)
    except HloParseError:
        assert re.search(r"kernel_metadata=\{\n", text), "fails to parse for another reason"
        lines: list[str] = []
        for line in text.splitlines():
            if lines and lines[-1].startswith("  ") and line[:1] not in ("", " ") and line != "}":
                lines[-1] += " " + line
            else:
                lines.append(line)
        return parse("\n".join(lines))


def kernels(module) -> list:
    """(instruction, cost) of each kernel custom call, in program order."""
    return [
        (op.instr, op.cost)
        for op in walk(module, "roofline")
        if op.instr.opcode == "custom-call"
        and op.instr.attrs.get("custom_call_target", "").strip('"') in KERNEL_TARGETS
    ]


BLOCK = 128  # splash attention's default block sizes, which its cases run with


def kept_blocks(s: int, block: int, window: int) -> int:
    """The blocks of ``block × block`` (query, key) pairs of one head that hold a pair its mask
    keeps: key j ≤ query i (causal), and j ≥ i − window where there is a window."""
    kept = 0
    for rows in range(0, s, block):
        for columns in range(0, s, block):
            seen = columns <= rows + block - 1  # some key at or before some query
            near = not window or columns + block - 1 + window >= rows
            kept += seen and near
    return kept


def pairs(c: dict) -> int:
    """(query, key) pairs of one attention: batch × heads × Sq × Skv; for splash attention whose
    block mask is printed (``printed``), those of the blocks its mask keeps (a partial block is
    computed whole); with a local window and the mask elided, those of the blocks its grid visits:
    each block row of queries reaches back window/BLOCK blocks and its own."""
    if c.get("printed"):
        block = c.get("block") or BLOCK
        windows = c.get("windows") or [c.get("window", 0)] * c["h"]
        per_head = [kept_blocks(c["s"], block, windows[i % len(windows)]) for i in range(c["h"])]
        return (c.get("b") or 1) * sum(per_head) * block * block
    if c.get("window"):
        return c["h"] * (c["s"] // BLOCK) * (c["window"] // BLOCK + 1) * BLOCK * BLOCK
    return (c.get("b") or 1) * c["h"] * c["s"] * c["s"]


def expected(c: dict) -> list[float]:
    """The analytic FLOPs of each kernel the case compiles, in program order."""
    d = c["d"]
    if c["kernel"] == "paged":  # known lengths (capped by the page table), else the page table's
        context = c["per_seq"] * c["page"]
        positions = sum(min(n, context) for n in c.get("lengths") or [context] * c["b"])
        return [4 * c["hq"] * positions * d]
    if c["kernel"] == "triton_decode":  # every query head against every cached position
        return [4 * c["b"] * c["h"] * c["s"] * d]
    if c["kernel"] == "ragged":
        return [4 * c["tokens"] * c["hq"] * c["per_seq"] * c["page"] * d]
    fwd = 4 * d * pairs(c)
    if not c["backward"]:
        return [fwd]
    if c["kernel"] == "triton":  # forward, delta = rowsum(o·do), then one backward kernel
        return [fwd, 2 * c["b"] * c["s"] * c["h"] * d, 14 * d * pairs(c)]
    if c.get("fused"):
        return [fwd, 10 * d * pairs(c)]
    return [fwd, 8 * d * pairs(c), 6 * d * pairs(c)]  # forward, dkv, dq


# Flash attention's own estimate is XLA's count of its reference (jnp) attention: the 4·D matmul
# FLOPs of a pair plus a few elementwise ones (scale, mask, max, subtract, sum): at most 6 of 4·D.
SOFTMAX = 6 / 4


def declared(instr) -> float | None:
    found = re.search(r'"cost_estimate":\{"flops":"(\d+)"', instr.attrs.get("backend_config", ""))
    return float(found.group(1)) if found else None


@pytest.mark.parametrize("case", sorted(CASES))
def test_kernel_flops_match_the_analytic_attention_count(case):
    c = CASES[case]
    found = kernels(load(case))
    want = expected(c)
    assert len(found) == len(want), [i.name for i, _ in found]
    for (instr, cost), flops in zip(found, want, strict=True):
        assert not cost.unknown, instr.name
        own = declared(instr)
        if own is not None:  # the kernel's own estimate is what the row says
            assert cost.flops == own
            assert cost.flops == pytest.approx(flops, rel=SOFTMAX / c["d"])
            # its products on the matrix unit, the softmax's few elementwise FLOPs off it
            assert cost.mxu_flops == min(flops, own)
        else:
            assert cost.flops == flops, instr.name
            assert cost.bytes_accessed > 0
            unseen = c["kernel"] != "triton_decode" and not c.get("lengths")  # all in the text
            # a splash full mask is a broadcast scalar, printed; a causal or local one is elided
            # unless the case prints its constants
            full = c["kernel"] == "splash" and not (c.get("causal") or c.get("window"))
            full = full or bool(c.get("printed"))
            if unseen and not full and "attention" in "; ".join(cost.notes):  # (not delta)
                bound = "upper bound" in "; ".join(cost.notes)
                assert bound, "a mask or lengths the text does not show makes it an upper bound"
                assert cost.upper_bound, "and says so in its flag"
            elif full:
                assert not cost.upper_bound, "a mask read is no upper bound"


def test_shape_price_agrees_with_the_kernels_own_estimate():
    """Where Pallas flash attention declares a cost, the count from its shapes is within 1.5/D of
    it (its estimate adds its softmax's elementwise work; it does not halve for causal either)."""
    compared = 0
    for case in ("flash_fwd_b2h4s1024d128_causal", "flash_bwd_b1h8s512d64"):
        module = load(case)
        ctx = CostContext(module)
        for instr, _ in kernels(module):
            own = declared(instr)
            if own is None:
                continue
            kernel = recognise(instr, "tpu_custom_call")
            assert kernel is not None and kernel.phase == "fwd"
            d = instr.operands[0].shape.dims[-1]
            assert price(kernel, instr, ctx).flops == pytest.approx(own, rel=SOFTMAX / d)
            compared += 1
    assert compared == 2


def test_backward_is_three_and_a_half_forwards_split_and_two_and_a_half_fused():
    split = [cost.flops for _, cost in kernels(load("splash_bwd_h8s2048d64"))]
    fused = [cost.flops for _, cost in kernels(load("splash_fusedbwd_h2s512d128"))]
    assert sum(split[1:]) / split[0] == 3.5
    assert fused[1] / fused[0] == 2.5


def test_local_window_bound_against_splash_own_block_mask():
    """Splash attention's own mask processing says which blocks of a window-256 mask hold data
    (45 of the 48 its grid visits over 2048 positions): the row is an upper bound within 7 %."""
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask_info as mi

    c = CASES["splash_bwd_h2s2048d128_local256"]
    mask = sm.MultiHeadMask(
        [sm.LocalMask((c["s"], c["s"]), window_size=(c["window"], 0), offset=0)] * c["h"]
    )
    info, _ = mi.process_mask(mask, (BLOCK, BLOCK))
    per_mask_head = c["h"] // info.block_mask.shape[0]  # identical heads share one mask
    blocks = int((info.block_mask > 0).sum()) * per_mask_head
    exact = 4 * c["d"] * blocks * BLOCK * BLOCK
    ((_, forward), *_) = kernels(load("splash_bwd_h2s2048d128_local256"))
    assert exact <= forward.flops <= 1.07 * exact
    assert forward.flops < 0.2 * 4 * c["d"] * c["h"] * c["s"] ** 2  # not the full square


def test_unknown_kernel_stays_unknown():
    """A Pallas kernel it does not know (a matmul+exp) is never guessed."""
    module = parse((FIXTURES / "pallas_tpu" / "tpu_v5e.hlo.txt").read_text())
    ((instr, cost),) = kernels(module)
    assert recognise(instr, "tpu_custom_call") is None
    assert cost.unknown and cost.flops == 0


def test_xla_model_still_reports_kernels_as_unknown():
    module = load("flash_bwd_b1h8s512d64")
    ops = [op for op in walk(module, "xla") if op.instr.opcode == "custom-call"]
    assert ops and all(op.cost.unknown for op in ops)


def test_live_compile_matches_the_analytic_count():
    """One kernel compiled now (not from a fixture): splash attention, causal, at a shape no
    fixture has, compile-only for TPU v5p."""
    import jax
    import jax.numpy as jnp
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from hlo_roofline import targets

    h, s, d = 2, 512, 128
    mask = sm.MultiHeadMask([sm.CausalMask((s, s))] * h)
    kernel = sk.make_splash_mha(mask, head_shards=1, q_seq_shards=1)
    one = NamedSharding(Mesh(targets.devices("v5p:2x2x1")[:1], ("_",)), PartitionSpec())
    spec = jax.ShapeDtypeStruct((h, s, d), jnp.bfloat16, sharding=one)
    text = jax.jit(lambda q, k, v: kernel(q, k, v)).lower(spec, spec, spec).compile().as_text()
    ((instr, cost),) = kernels(parse_text(text))
    assert instr.name.startswith("splash_mha_fwd")
    assert cost.flops == 4 * h * s * s * d


def test_attention_kernels_run_on_the_matrix_unit_in_the_verdict():
    """A splash kernel's FLOPs are its QKᵀ and PV products: judged at the chip's bf16 MXU peak
    (the chip database's figure), not the vector unit's, so MaxText's step is not 20× too slow."""
    from hlo_roofline import analyze_hlo, chips

    with gzip.open(FIXTURES / "maxtext" / "default_v5p8.hlo.txt.gz", "rt") as f:
        report = analyze_hlo(f.read(), chip="v5p")
    kernels = report.model_frame()[report.model_frame()["kernel_mxu_flops"] > 0]
    assert len(kernels) >= 3 and set(kernels["name"].str.extract(r"(splash_mha_\w+?)_")[0]) >= {
        "splash_mha_fwd",
        "splash_mha_dq",
        "splash_mha_dkv",
    }
    peak = chips.get("v5p").per_device().peak_flops("bf16")
    for op in kernels.itertuples():
        assert op.kernel_mxu_flops == op.flops
        assert op.compute_unit == "mxu"
        assert op.t_compute_s == pytest.approx(op.kernel_mxu_flops / peak, rel=1e-9)


LOOP = """HloModule loop

%body (p: (s32[], s8[1,2,2])) -> (s32[], s8[1,2,2]) {
  %p = (s32[], s8[1,2,2]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  %mask = s8[1,2,2] get-tuple-element(%p), index=1
  %copy = s8[1,2,2] copy(%mask)
  %kept = s8[1,2,2] STATE
  ROOT %t = (s32[], s8[1,2,2]) tuple(%next, %kept)
}

%cond (q: (s32[], s8[1,2,2])) -> pred[] {
  %q = (s32[], s8[1,2,2]) parameter(0)
  %j = s32[] get-tuple-element(%q), index=0
  %n = s32[] constant(3)
  ROOT %lt = pred[] compare(%j, %n), direction=LT
}

ENTRY %main () -> (s32[], s8[1,2,2]) {
  %zero = s32[] constant(0)
  %blocks = s8[1,2,2] constant({ { { 1, 0 }, { 2, 1 } } })
  %init = (s32[], s8[1,2,2]) tuple(%zero, %blocks)
  %w = (s32[], s8[1,2,2]) while(%init), condition=%cond, body=%body
  %after = s8[1,2,2] get-tuple-element(%w), index=1
  %i = s32[] get-tuple-element(%w), index=0
  ROOT %out = (s32[], s8[1,2,2]) tuple(%i, %after)
}
"""


@pytest.mark.parametrize(
    ("state", "read"),
    [("copy(%mask)", [3]), ("negate(%mask)", None)],  # the blocks {1, 0, 2, 1}: 3 nonzero
    ids=["handed-on", "changed"],
)
def test_a_mask_in_loop_state_is_read_only_if_the_body_hands_it_on(state, read):
    """A constant carried in a while loop's state is the value inside the loop, and after it (a
    later loop's kernel reads it there), only if the body passes it on unchanged; one the body
    changes is not read (its values differ by iteration)."""
    from hlo_roofline.cost.attention_kernels import _nonzero_counts

    module = parse(LOOP.replace("STATE", state))
    ctx = CostContext(module)
    for name in ("copy", "after"):
        mask = next(i for i in module.instructions() if i.name == name)
        assert _nonzero_counts(mask, ctx) == read, name


@SLOW
@pytest.mark.filterwarnings("ignore::hlo_roofline.api.UnshardedProgramWarning")
def test_analyze_reads_a_splash_mask():
    """``hlo_roofline.analyze`` keeps the constants a Pallas kernel reads (``as_text()`` elides
    them): a causal splash attention is priced at the blocks its mask keeps."""
    import jax
    import jax.numpy as jnp
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm

    import hlo_roofline as hr

    h, s, d = 2, 1024, 128
    mask = sm.MultiHeadMask([sm.CausalMask((s, s))] * h)
    kernel = sk.make_splash_mha(mask, head_shards=1, q_seq_shards=1)
    q = jax.ShapeDtypeStruct((h, s, d), jnp.bfloat16)
    report = hr.analyze(kernel, q, q, q, target="v5e:2x2", cache=False)
    rows = report.model_frame()[report.model_frame()["name"].str.startswith("splash_mha_fwd")]
    assert len(rows) == 1
    assert rows["flops"].iloc[0] == 4 * d * h * kept_blocks(s, BLOCK, 0) * BLOCK * BLOCK


MAXTEXT = FIXTURES / "maxtext"
MAXTEXT_BLOCK = 512  # MaxText's default splash block sizes (sa_block_q, sa_block_kv, ...: 512)


@pytest.mark.parametrize("name", ["default_v5p8", "llama2_7b_v5e16", "mixtral_8x7b_v5p8"])
def test_maxtext_splash_is_priced_at_its_causal_blocks(name):
    """MaxText's own step (fixtures/maxtext, its constants printed): each splash kernel reads its
    block mask through the scanned layers' loop state (and the forward loop's result, in the
    backward loop), and is priced at the causal mask's blocks: 10 of 16 at 2048 positions in
    blocks of 512, per (batch row, head), times 4·D forward, 6·D dq, 8·D dkv."""
    config = json.loads((MAXTEXT / f"{name}.json").read_text())["config"]
    with gzip.open(MAXTEXT / f"{name}.hlo.txt.gz", "rt") as f:
        module = parse_text(f.read())
    found = [(i, c) for i, c in kernels(module) if i.name.startswith("splash")]
    assert len(found) == 4  # forward, its rematerialized copy, dq, dkv
    s, d = config["max_target_length"], config["head_dim"]
    for instr, cost in found:
        q = instr.operands[2].shape  # [batch, heads, S, D] of this device
        assert q.dims[-2:] == (s, d)
        rows_heads = q.elements // (s * d)
        pairs = rows_heads * kept_blocks(s, MAXTEXT_BLOCK, 0) * MAXTEXT_BLOCK**2
        phase = re.search(r"splash_mha_(fwd|dq|dkv)", instr.name).group(1)
        assert cost.flops == {"fwd": 4, "dq": 6, "dkv": 8}[phase] * d * pairs, instr.name
        assert not cost.upper_bound


SLICED = """HloModule sliced

ENTRY %main (i: s32[]) -> s8[1,2,2] {
  %i = s32[] parameter(0)
  %zero = s32[] constant(0)
  %all = s8[2,2,2] constant({ { { 1, 0 }, { 2, 1 } }, { { 2, 2 }, { 2, 2 } } })
  ROOT %one = s8[1,2,2] dynamic-slice(%all, %i, %zero, %zero), dynamic_slice_sizes={1,2,2}
}
"""


def test_a_shards_mask_taken_at_a_runtime_index_counts_every_shards():
    """A head-sharded splash takes its shard's mask out of every shard's at a runtime index: each
    window the slice may take is counted (the pricing takes the largest: an upper bound where they
    differ)."""
    from hlo_roofline.cost.attention_kernels import _nonzero_counts

    module = parse(SLICED)
    assert _nonzero_counts(module.entry.root, CostContext(module)) == [3, 4]
