"""cost_model="roofline": where it departs from XLA, checked against XLA's own numbers and facts
fixed by the program (a scan's length, the number of devices, XLA's known_trip_count)."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest
from conftest import FIXTURES, HAND_WRITTEN_HLO, load_fixture
from hypothesis import given, settings
from hypothesis import strategies as st

from hlo_roofline import analyze_hlo
from hlo_roofline.cost import rows, walk
from hlo_roofline.hlo import parse

pytestmark = HAND_WRITTEN_HLO  # hand-written modules: not scheduled, no fusions

TARGETS = ("cpu", "h100", "tpu_v5e", "tpu_v5p")


def fixture(program: str, target: str):
    return load_fixture(FIXTURES / program / f"{target}.xla.json")


def xla_per_computation(oracle: dict, computation: str, key: str = "flops") -> float:
    return sum(e[key] for e in oracle["per_instruction"] if e["computation"] == computation)


def shape_bytes(shape) -> int:
    """Array bytes computed independently of the code under test (numpy item sizes)."""
    itemsize = {"bf16": 2, "f16": 2, "f32": 4, "s32": 4, "u32": 4, "s8": 1, "pred": 1}
    return sum(math.prod(leaf.dims) * itemsize[leaf.dtype] for leaf in shape.leaves())


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(("program", "trips"), [("scan10", 10), ("fori_loop", 7)])
def test_loop_body_counted_once_per_iteration(program, trips, target):
    text, oracle = fixture(program, target)
    module = parse(text)
    (loop,) = [i for i in module.instructions() if i.opcode == "while"]
    body = loop.attrs["body"].lstrip("%")
    cond = loop.attrs["condition"].lstrip("%")
    report = analyze_hlo(text)
    # XLA counts body and condition once; a loop of n trips runs the body n times, the test n + 1.
    expected = (
        oracle["xla_totals"]["flops"]
        + (trips - 1) * xla_per_computation(oracle, body)
        + trips * xla_per_computation(oracle, cond)
    )
    assert report.summary["flops"] == pytest.approx(expected, rel=1e-6)
    assert set(report.ops[report.ops.computation == body]["count"]) == {trips}
    assert not report.summary["lower_bound"]


@pytest.mark.parametrize("program", ["scan10", "fori_loop"])
def test_inferred_trip_count_matches_xla_known_trip_count(program):
    """libtpu does not annotate loops; the count we infer equals the one XLA proved on CPU."""
    cpu_text, _ = fixture(program, "cpu")
    known = int(re.search(r'"known_trip_count":\{"n":"(\d+)"\}', cpu_text).group(1))
    for target in ("tpu_v5e", "tpu_v5p"):
        text, _ = fixture(program, target)
        assert "known_trip_count" not in text
        report = analyze_hlo(text)
        body_counts = set(report.ops["count"]) - {1, known + 1}
        assert body_counts == {known}
        assert "trip count inferred from the loop's counter" in report.summary["notes"]


@pytest.mark.parametrize("target", TARGETS)
def test_unknown_trip_count_is_a_flagged_lower_bound(target):
    text, oracle = fixture("while_dynamic", target)
    report = analyze_hlo(text)
    assert report.summary["lower_bound"]
    assert report.summary["flops"] == pytest.approx(oracle["xla_totals"]["flops"], rel=1e-6)
    short = report.ops[report.ops["lower_bound"]]  # the flag on the loop's rows, said in words
    assert len(short) and (short["count"] == 1).all()
    assert (short["computation"] != report.ops["computation"].iloc[-1]).all()
    assert short["note"].str.contains("unknown trip count", regex=False).all()


def test_async_pairs_counted_once():
    """An async start/done pair moves its data once; XLA charges the done again."""
    checked = 0
    for program in ("dp_train_step", "fsdp_train_step", "ppermute", "all_to_all"):
        text, oracle = fixture(program, "h100")
        xla = {e["name"]: e for e in oracle["per_instruction"] if "error" not in e}
        module = parse(text)
        report = analyze_hlo(module).ops.set_index("name")
        for instr in module.entry.instructions:
            if instr.opcode.endswith("-done"):
                assert report.loc[instr.name, "bytes_accessed"] == 0, instr.name
                assert xla[instr.name]["bytes accessed"] > 0
            if instr.opcode in ("all-reduce-start", "all-gather-start"):
                operands = sum(shape_bytes(op.shape) for op in instr.operands)
                echo = operands if instr.opcode == "all-gather-start" else 0
                want = xla[instr.name]["bytes accessed"] - echo
                assert report.loc[instr.name, "bytes_accessed"] == want, instr.name
                checked += 1
    assert checked >= 4


def _dot_flops_from_xla(oracle: dict, opcode: str) -> float:
    return sum(e["flops"] for e in oracle["per_instruction"] if e.get("opcode") == opcode)


@pytest.mark.parametrize("program", ["mlp_f32", "mlp_bf16"])
def test_cublas_gemm_priced_like_xla_prices_the_dot(program):
    """XLA prices a cuBLAS call at -1; we count 2·M·N·K·batch, as XLA does for the same dots."""
    text, oracle = fixture(program, "h100_cublas")
    assert all(
        e["flops"] == -1 for e in oracle["per_instruction"] if e.get("opcode") == "custom-call"
    )
    report = analyze_hlo(text)
    gemms = report.ops[report.ops.opcode == "custom-call"]
    assert len(gemms) >= 3 and not gemms.unknown.any()
    _, cpu_oracle = fixture(program, "cpu")
    assert gemms.flops.sum() == pytest.approx(_dot_flops_from_xla(cpu_oracle, "dot"), rel=1e-9)


def test_cudnn_convolutions_priced_like_xla_prices_the_convolutions():
    text, _ = fixture("convnet", "h100")
    report = analyze_hlo(text)
    convs = report.ops[report.ops.opcode == "custom-call"]
    assert len(convs) >= 3 and not convs.unknown.any()
    _, cpu_oracle = fixture("convnet", "cpu")
    cpu_convs = _dot_flops_from_xla(cpu_oracle, "convolution")
    assert convs.flops.sum() == pytest.approx(cpu_convs, rel=1e-9)


# A stride-2 3×3 "SAME" convolution, x f32[2,8,7,3] ⊛ w -> dy f32[2,4,4,4], and its gradients as
# XLA's H100 compiler emits them (trimmed from a compile-only build). The height pads 0_1, which
# cuDNN cannot take (symmetric padding only): x gets an explicit zero row (forward, backward-filter)
# and the backward-input result an extra row that is sliced off. The width pads 1_1 and stays in
# the window. The window and dim_labels of all three describe the forward convolution.
CUDNN_STRIDED_CONV = """HloModule strided_conv_gradients

%fused_pad (param_0: f32[2,8,7,3]) -> f32[2,9,7,3] {
  %param_0 = f32[2,8,7,3]{3,2,1,0} parameter(0)
  %constant_2 = f32[] constant(0)
  ROOT %pad.2 = f32[2,9,7,3]{3,2,1,0} pad(%param_0, %constant_2), padding=0_0x0_1x0_0x0_0
}

%wrapped_slice_computation (param_0.2: f32[2,9,7,3]) -> f32[2,8,7,3] {
  %param_0.2 = f32[2,9,7,3]{3,2,1,0} parameter(0)
  ROOT %slice.2 = f32[2,8,7,3]{3,2,1,0} slice(%param_0.2), slice={[0:2], [0:8], [0:7], [0:3]}
}

ENTRY %main (x: f32[2,8,7,3], w: f32[4,3,3,3], dy: f32[2,4,4,4]) -> (f32[2,4,4,4], f32[2,8,7,3], f32[4,3,3,3]) {
  %x = f32[2,8,7,3]{3,2,1,0} parameter(0)
  %w = f32[4,3,3,3]{3,2,1,0} parameter(1)
  %dy = f32[2,4,4,4]{3,2,1,0} parameter(2)
  %x.padded = f32[2,9,7,3]{3,2,1,0} fusion(%x), kind=kLoop, calls=%fused_pad
  %cudnn-conv = (f32[2,4,4,4]{3,2,1,0}, u8[0]{0}) custom-call(%x.padded, %w), window={size=3x3 stride=2x2 pad=0_0x1_1}, dim_labels=b01f_o01i->b01f, custom_call_target="__cudnn$convForward"
  %y = f32[2,4,4,4]{3,2,1,0} get-tuple-element(%cudnn-conv), index=0
  %cudnn-conv-bw-input = (f32[2,9,7,3]{3,2,1,0}, u8[0]{0}) custom-call(%dy, %w), window={size=3x3 stride=2x2 pad=0_0x1_1}, dim_labels=b01f_o01i->b01f, custom_call_target="__cudnn$convBackwardInput"
  %dx.padded = f32[2,9,7,3]{3,2,1,0} get-tuple-element(%cudnn-conv-bw-input), index=0
  %dx = f32[2,8,7,3]{3,2,1,0} fusion(%dx.padded), kind=kLoop, calls=%wrapped_slice_computation
  %cudnn-conv-bw-filter = (f32[4,3,3,3]{3,2,1,0}, u8[0]{0}) custom-call(%x.padded, %dy), window={size=3x3 stride=2x2 pad=0_0x1_1}, dim_labels=b01f_o01i->b01f, custom_call_target="__cudnn$convBackwardFilter"
  %dw = f32[4,3,3,3]{3,2,1,0} get-tuple-element(%cudnn-conv-bw-filter), index=0
  ROOT %out = (f32[2,4,4,4]{3,2,1,0}, f32[2,8,7,3]{3,2,1,0}, f32[4,3,3,3]{3,2,1,0}) tuple(%y, %dx, %dw)
}
"""

# The native convolutions the CPU compiler emits for the same three (its optimized HLO): the
# padding stays in the window, the input gradient dilates dy (lhs_dilate), the weight gradient
# dilates the kernel dy (rhs_dilate).
NATIVE_STRIDED_CONV = {
    "cudnn-conv": (
        "f32[2,8,7,3], f32[3,3,3,4]",
        "f32[2,4,4,4]",
        "window={size=3x3 stride=2x2 pad=0_1x1_1}",
    ),
    "cudnn-conv-bw-input": (
        "f32[2,4,4,4], f32[3,3,4,3]",
        "f32[2,8,7,3]",
        "window={size=3x3 pad=2_1x1_1 lhs_dilate=2x2}",
    ),
    "cudnn-conv-bw-filter": (
        "f32[3,8,7,2], f32[4,4,2,4]",
        "f32[3,3,3,4]",
        "window={size=4x4 pad=0_1x1_1 rhs_dilate=2x2}",
    ),
}


def _xla_convolution_flops(operands: str, result: str, window: str) -> float:
    """XLA's own cost analysis (CPU client) of one native convolution."""
    import jax
    from jaxlib import _hlo, _jax

    lhs, rhs = operands.split(", ")
    text = f"""HloModule native
ENTRY %e (lhs: {lhs}, rhs: {rhs}) -> {result} {{
  %lhs = {lhs} parameter(0)
  %rhs = {rhs} parameter(1)
  ROOT %conv = {result} convolution(%lhs, %rhs), {window}, dim_labels=b01f_01io->b01f
}}
"""
    client = jax.devices("cpu")[0].client
    return _jax.hlo_module_cost_analysis(client, _hlo.hlo_module_from_text(text))["flops"]


@pytest.mark.parametrize("call", list(NATIVE_STRIDED_CONV))
def test_cudnn_strided_convolution_priced_like_xla_prices_the_native_one(call):
    """Zero padding handed to cuDNN and results computed only to be sliced off are no work: each
    direction counts what XLA counts for the native convolution it was rewritten from."""
    expected = _xla_convolution_flops(*NATIVE_STRIDED_CONV[call])
    row = analyze_hlo(CUDNN_STRIDED_CONV).ops.set_index("name").loc[call]
    assert not row.unknown
    assert row.flops == expected
    # All three visit the same (input, filter, output) triples: 11 of the 12 height and 10 of the
    # 12 width (output, tap) pairs hit data. Counting cuDNN's extra zero row would give 12 × 10.
    assert expected == 2 * 2 * 3 * 4 * 11 * 10


def unpadded_roofline(module) -> pd.DataFrame:
    ops = walk(module, "roofline", pad_to_tiles=False)
    return pd.DataFrame(rows(module, ops)).set_index("name")


def _group(oracle: dict) -> int:
    return oracle["num_devices"]


@pytest.mark.parametrize("target", TARGETS)
def test_all_reduce_sends_twice_its_bytes_times_n_minus_1_over_n(target):
    text, oracle = fixture("dp_train_step", target)
    n = _group(oracle)
    module = parse(text)
    # sizes as plain XLA counts them (the roofline report pads TPU arrays to their tiles)
    report = unpadded_roofline(module)
    reduces = [i for i in module.instructions() if i.opcode in ("all-reduce", "all-reduce-start")]
    assert reduces
    for instr in reduces:
        payload = sum(shape_bytes(op.shape) for op in instr.operands)
        assert report.loc[instr.name, "comm_bytes"] == pytest.approx(2 * payload * (n - 1) / n)


def test_fsdp_collectives_follow_group_size():
    text, oracle = fixture("fsdp_train_step", "h100")
    n = _group(oracle)
    module = parse(text)
    report = analyze_hlo(module).ops.set_index("name")
    seen = set()
    for instr in module.entry.instructions:
        comm = report.loc[instr.name, "comm_bytes"] if instr.name in report.index else None
        if instr.opcode == "all-gather-start":
            gathered = instr.shape.tuple_shapes[1]
            assert comm == pytest.approx(shape_bytes(gathered) * (n - 1) / n)
        elif instr.opcode in ("reduce-scatter-start", "all-to-all-start"):
            sent = sum(shape_bytes(op.shape) for op in instr.operands)
            assert comm == pytest.approx(sent * (n - 1) / n)
        else:
            continue
        seen.add(instr.opcode)
    assert seen == {"all-gather-start", "reduce-scatter-start", "all-to-all-start"}


@pytest.mark.parametrize("target", TARGETS)
def test_permute_sends_its_whole_buffer(target):
    text, _ = fixture("ppermute", target)
    module = parse(text)
    report = unpadded_roofline(module)
    (permute,) = [
        i
        for i in module.instructions()
        if i.opcode.startswith("collective-permute") and not i.opcode.endswith("done")
    ]
    assert report.loc[permute.name, "comm_bytes"] == shape_bytes(permute.operands[0].shape)


@pytest.mark.parametrize(
    ("groups", "n"),
    [
        ("replica_groups={{0,1,2,3},{4,5,6,7}}", 4),
        ("replica_groups=[2,4]<=[8]", 4),
        ("replica_groups=[4,2]<=[2,4]T(1,0)", 2),
        ("replica_groups=mesh['x'=2,'y'=4] {'y'}", 4),
        ("replica_groups=mesh['x'=2,'y'=4] {'x','y'}", 8),
    ],
)
def test_replica_group_forms(groups, n):
    text = f"""HloModule m, num_partitions=8

%sum (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}}

ENTRY %e (p: f32[1024]) -> f32[1024] {{
  %p = f32[1024]{{0}} parameter(0)
  ROOT %r = f32[1024]{{0}} all-reduce(%p), channel_id=1, {groups}, use_global_device_ids=true, to_apply=%sum
}}
"""
    row = analyze_hlo(text).ops.set_index("name").loc["r"]
    assert row.comm_bytes == pytest.approx(2 * 4096 * (n - 1) / n)
    assert row.flops == pytest.approx(1024 * (n - 1) / n)


def test_pallas_kernel_cost_estimate_is_used_and_opaque_kernel_is_flagged():
    text, _ = fixture("pallas_tpu_cost", "tpu_v5e")
    declared = re.search(r'cost_estimate[^{]*\{[^}]*"flops":"?(\d+)', text.replace('\\"', '"'))
    report = analyze_hlo(text)
    kernel = report.ops[report.ops.opcode == "custom-call"]
    assert not kernel.unknown.any() and report.summary["coverage"] == 1.0
    assert declared, "the fixture's kernel carries a cost_estimate"
    assert kernel.flops.sum() == float(declared.group(1))
    opaque = analyze_hlo(fixture("pallas_tpu", "tpu_v5e")[0])
    assert opaque.summary["coverage"] < 1.0
    assert opaque.summary["unknown_ops"]
    row = opaque.ops[opaque.ops.unknown].iloc[0]
    assert row.flops == 0 and row.bytes_accessed > 0 and "opaque" in row.note
    assert np.isfinite(opaque.summary["bytes_accessed"])


@pytest.mark.parametrize("target", TARGETS)
def test_conditional_counts_the_branch_with_the_most_work(target):
    """XLA takes a per-quantity max over branches; we count one whole branch, the heaviest by XLA's
    own per-instruction numbers, and list the others with count 0."""
    text, oracle = fixture("cond_switch", target)
    module = parse(text)
    conditionals = [i for i in module.instructions() if i.opcode == "conditional"]
    assert conditionals
    report = unpadded_roofline(module)
    for cond in conditionals:
        branches = [c.name for c in cond.called]

        def work(comp):
            return sum(
                xla_per_computation(oracle, comp, key)
                for key in ("flops", "transcendentals", "bytes accessed")
            )

        heaviest = max(branches, key=work)
        for branch in branches:
            counts = set(report[report.computation == branch]["count"])
            assert counts == ({1.0} if branch == heaviest else {0.0}), (branch, heaviest)
        counted = report[report.computation == heaviest]
        assert counted.flops.sum() == pytest.approx(xla_per_computation(oracle, heaviest))


@pytest.mark.parametrize("cost_model", ["roofline", "xla"])
def test_unknown_opcode_is_a_flagged_row_not_a_crash(cost_model):
    text = """HloModule m
ENTRY %e (p: f32[1024]) -> f32[1024] {
  %p = f32[1024]{0} parameter(0)
  %n = f32[1024]{0} negate(%p)
  ROOT %x = f32[1024]{0} frobnicate(%n), some_attr={1,2}
}
"""
    report = analyze_hlo(text, cost_model=cost_model)
    row = report.ops.set_index("name").loc["x"]
    assert row.unknown and "no cost rule for opcode 'frobnicate'" in row.note
    assert row.flops == 0
    assert report.summary["unknown_ops"] == ["x"]
    assert report.summary["coverage"] == pytest.approx(0.5)
    classified = report.classify("v5e").ops.set_index("name")
    assert classified.loc["x", "bound"] == "unknown" and classified.loc["n", "bound"] == "memory"


def _conv_1d(n: int, size: int, stride: int, low: int, high: int, lhs: int, rhs: int) -> str:
    """A 1-D convolution whose output size follows from its window (XLA's shape inference)."""
    padded = (n - 1) * lhs + 1 + low + high
    window = (size - 1) * rhs + 1
    out = (padded - window) // stride + 1 if padded >= window else 0
    return f"""HloModule m

ENTRY %e (x: f32[2,{n},3], k: f32[{size},3,5]) -> f32[2,{out},5] {{
  %x = f32[2,{n},3]{{2,1,0}} parameter(0)
  %k = f32[{size},3,5]{{2,1,0}} parameter(1)
  ROOT %c = f32[2,{out},5]{{2,1,0}} convolution(%x, %k), window={{size={size} stride={stride} \
pad={low}_{high} lhs_dilate={lhs} rhs_dilate={rhs}}}, dim_labels=b0f_0io->b0f
}}
"""


@settings(max_examples=150, deadline=None, database=None)
@given(
    n=st.integers(1, 12), size=st.integers(1, 6), stride=st.integers(1, 4),
    low=st.integers(-4, 6), high=st.integers(-4, 6), lhs=st.integers(1, 4), rhs=st.integers(1, 4),
)  # fmt: skip
def test_convolution_flops_match_xla_for_any_window(n, size, stride, low, high, lhs, rhs):
    """The closed form over taps (no loop over window positions) against XLA's own count, which
    walks every (tap, output) pair: strides, negative and positive padding, both dilations."""
    import jax
    from jaxlib import _hlo, _jax

    text = _conv_1d(n, size, stride, low, high, lhs, rhs)
    client = jax.devices("cpu")[0].client
    xla = _jax.hlo_module_cost_analysis(client, _hlo.hlo_module_from_text(text))
    assert analyze_hlo(text, cost_model="xla").summary["flops"] == xla.get("flops", 0.0)


def test_convolution_with_a_window_of_2_to_the_40_taps():
    """A window as wide as a 2^40-element input, half-padded on each side (it used to loop over
    the taps: one line of text hung the analysis). Output o (of 2^40) sees o + h taps for o < h
    and 3h − o after, h = 2^39: 3h² (tap, output) pairs in all."""
    h = 2**39
    report = analyze_hlo(_conv_1d(2 * h, 2 * h, 1, h, h - 1, 1, 1))
    (flops,) = report.ops.loc[report.ops.opcode == "convolution", "flops"]
    batch, in_features, out_features = 2, 3, 5
    assert flops == 2 * batch * in_features * out_features * 3 * h * h


def _sliding_window_module(reducer: str, size: int) -> str:
    """A row-wise sliding window of ``size`` over f32[8, 512], stride 1, centred (a local
    attention's row max)."""
    low = (size - 1) // 2
    return f"""HloModule sliding
%combine (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %c = f32[] {reducer}(%a, %b)
}}

ENTRY %e (x: f32[8,512]) -> f32[8,512] {{
  %x = f32[8,512] parameter(0)
  %init = f32[] constant(0)
  ROOT %window = f32[8,512] reduce-window(%x, %init), window={{size=1x{size} pad=0_0x{low}_{size - 1 - low}}}, to_apply=%combine
}}
"""


@pytest.mark.parametrize("size", [3, 8, 17, 32])
def test_a_sliding_max_is_doubled_windows(size):
    """A sliding max of n: XLA's model counts n − 1 compares per output (its own cost analysis,
    the base model's oracle); the roofline model ceil(log2 n), windows doubled (max is
    idempotent, so the last step's overlap is free). A sum keeps XLA's count: overlapping sums
    would count twice."""
    import jax
    from jaxlib import _hlo, _jax

    elements = 8 * 512
    text = _sliding_window_module("maximum", size)
    client = jax.devices("cpu")[0].client
    oracle = _jax.hlo_module_cost_analysis(client, _hlo.hlo_module_from_text(text))["flops"]
    assert analyze_hlo(text, cost_model="xla").ops.set_index("name").loc["window", "flops"] == oracle
    assert oracle == elements * (size - 1)
    roofline = analyze_hlo(text).ops.set_index("name").loc["window", "flops"]
    assert roofline == elements * math.ceil(math.log2(size))
    summed = analyze_hlo(_sliding_window_module("add", size)).ops.set_index("name")
    assert summed.loc["window", "flops"] == elements * (size - 1)
