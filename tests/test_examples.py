"""Every example workload analyzes, compile-only, on every target it lists, and says what it should.

A TPU compile of a training step takes one to three minutes on a 2-core machine, so the optimized HLO
is cached (``hlo_roofline.cache``: keyed by the lowered program, the target and the
compiler versions; a file lock stops two xdist workers compiling the same program). By default the
cache is ``make demo``'s, ``~/.cache/hlo_roofline/hlo``, so only new or changed programs compile.
``HLO_ROOFLINE_TEST_HLO_CACHE=session`` compiles everything afresh into a per-session directory;
any other value names the directory. ``tests/test_demo.py`` compiles the GPT step for v5e and H100
through the same cache, so the GPT cases run last here. Not marked slow: every example must compile on the oldest supported
JAX too, so both environments of `make test` run these.
"""

from __future__ import annotations

import math

import jax
import pytest
from conftest import shared_cache_dir

from hlo_roofline import chips, targets
from hlo_roofline.examples import (
    EXAMPLES,
    analyze_example,
    convnet,
    gpt,
    gpt_sharded,
    moe,
)

# The GPT step last: test_demo.py (another worker) is compiling it meanwhile.
ORDER = ("gpt_sharded", "moe", "convnet", "gpt")
CASES = [(name, target) for name in ORDER for target in EXAMPLES[name].targets]


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory):
    """``analyzed(name, target)`` → that example's report, analyzed once per module."""
    cache = shared_cache_dir(tmp_path_factory)
    reports = {}

    def get(name: str, target: str):
        if (name, target) not in reports:
            reports[name, target] = analyze_example(name, target, cache_dir=cache)
        return reports[name, target]

    return get


def test_examples_follow_the_cli_convention():
    """``hlo-roofline analyze FILE.py:NAME`` loads every example; the args allocate nothing."""
    from hlo_roofline.cli import load_entry

    for example in EXAMPLES.values():
        step, args, jit_kwargs = load_entry(example.entry)
        assert callable(step) and isinstance(jit_kwargs, dict)
        leaves = jax.tree.leaves(args)
        assert leaves and all(isinstance(x, jax.ShapeDtypeStruct) for x in leaves), example.name
        assert example.target in example.targets


@pytest.mark.parametrize(("name", "target"), CASES, ids=[f"{n}-{t}" for n, t in CASES])
def test_example_analyzes(analyzed, name, target):
    report = analyzed(name, target)
    spec = targets.parse_target(target)
    s = report.summary
    assert s["compiled_for"] == spec.spec
    assert s["chip"] == chips.get(spec.chip).key
    assert s["coverage"] == 1.0, s["unknown_ops"]
    assert s["flops"] > 0 and s["step_time_upper_s"] >= s["step_time_serial_s"] > 0
    assert (report.ops["mm_k"] > 0).any(), "no matmul or convolution found"
    assert set(report.ops["bound"]) <= {"compute", "memory", "communication", "none"}


@pytest.mark.parametrize("target", gpt.TARGETS)
def test_gpt_flops_are_the_models(analyzed, target):
    """The step's FLOPs are the model's matmul FLOPs (3 × forward) plus a little elementwise work."""
    flops = analyzed("gpt", target).summary["flops"]
    expected = gpt.train_flops(gpt.CONFIG, gpt.CONFIG.batch)
    assert 1.0 <= flops / expected < 1.02


@pytest.mark.parametrize("target", gpt.TARGETS)
def test_gpt_matmuls_carry_their_scope(analyzed, target):
    """Each named scope of the model shows up in the op_name of its matmuls."""
    ops = analyzed("gpt", target).ops
    matmul_names = " ".join(ops.loc[ops["mm_k"] > 0, "op_name"])
    for scope in ("attention/qkv", "attention/scores", "attention/context", "attention/out",
                  "mlp/up", "mlp/down", "logits"):  # fmt: skip
        assert scope in matmul_names, scope


@pytest.mark.parametrize("target", gpt_sharded.TARGETS)
def test_gpt_sharded_is_split_over_64_devices(analyzed, target):
    """Per-device FLOPs are 1/64 of the global step's; collectives run over both mesh axes."""
    report = analyzed("gpt_sharded", target)
    data, model = gpt_sharded.MESH_SHAPES[target]
    assert data * model == len(targets.devices(target)) == 64
    expected = gpt.train_flops(gpt_sharded.CONFIG, gpt_sharded.CONFIG.batch * data) / 64
    assert 1.0 <= report.summary["flops"] / expected < 1.03
    collectives = report.ops[report.ops["collective"] != ""]
    reduced = collectives[collectives["collective"] == "all-reduce"]
    assert {model, data} <= set(reduced["group_size"]), set(reduced["group_size"])
    assert report.summary["time_share"]["communication"] > 0.05
    assert (collectives["t_comm_s"] > 0).all()


def test_gpt_sharded_exposed_communication(analyzed):
    """docs/method.md: on v5p the all-reduces are synchronous in the HLO (all exposed), the model
    axis is one wrapping torus axis and the data axis the other two; on 8 H100 nodes the collectives
    are asynchronous, the in-node ones partly hidden, the cross-node gradient all-reduces not.
    How much of the in-node ones hides depends on the XLA version (jaxlib 0.10: most of them;
    jaxlib 0.12 makes two synchronous and waits on another at once): both hide more of them than
    of the cross-node ones."""
    tpu = analyzed("gpt_sharded", "v5p:4x4x4").summary
    assert tpu["topology"]["dims"] == [4, 4, 4] and all(tpu["topology"]["wraps"])
    assert tpu["exposed_comm_s"] == pytest.approx(tpu["comm_time_s"])
    assert 0.2 < tpu["exposed_comm_share"] < 0.5
    gpu = analyzed("gpt_sharded", "h100:8x1x8")
    ops = gpu.ops[gpu.ops["collective"] == "all-reduce"]
    in_node = ops[ops["replica_group"] == "0-7 of 64"]
    across = ops[ops["replica_group"] == "0-56:8 of 64"]
    assert len(in_node) and len(across) and len(in_node) + len(across) == len(ops)
    exposed_in_node = in_node["t_exposed_s"].sum() / in_node["t_expected_s"].sum()
    exposed_across = across["t_exposed_s"].sum() / across["t_expected_s"].sum()
    assert exposed_in_node < 0.9 and exposed_across > 0.5
    assert exposed_in_node < exposed_across
    s = gpu.summary
    assert 0 < s["exposed_comm_s"] < s["comm_time_s"]
    assert s["step_expected_s"] < s["step_time_serial_s"]  # overlap between ops credited


@pytest.mark.parametrize("target", moe.TARGETS)
def test_moe_exchanges_tokens_with_all_to_all(analyzed, target):
    """Dispatch and combine forward, and back again for the gradients: all-to-alls over every device."""
    report = analyzed("moe", target)
    devices = len(targets.devices(target))
    exchanges = report.ops[report.ops["collective"] == "all-to-all"]
    assert len(exchanges) >= 3  # XLA on TPU merges one of the four
    assert set(exchanges["group_size"]) == {devices}
    assert (exchanges["t_comm_s"] > 0).all() and (exchanges["comm_bytes"] > 0).all()
    dispatch = exchanges["op_name"].str.contains("dispatch", regex=False)
    combine = exchanges["op_name"].str.contains("combine", regex=False)
    assert dispatch.any() and combine.any()


@pytest.mark.parametrize("target", convnet.TARGETS)
def test_convnet_flops_are_its_convolutions(analyzed, target):
    """Convolution FLOPs as XLA counts them (padding taps excluded) plus batch-norm arithmetic.

    On H100 the convolutions are cuDNN calls handed explicitly zero-padded (and, for the backward
    passes, dilated) operands, some with result rows sliced off: still the same count."""
    flops = analyzed("convnet", target).summary["flops"]
    expected = convnet.train_flops(convnet.CONFIG)
    assert 1.0 <= flops / expected < 1.06


def test_convnet_cudnn_calls_count_exactly_its_convolutions(analyzed):
    """On H100 every convolution is a cuDNN call, its padding split between the window and
    explicit zero pads and slices (cuDNN pads symmetrically), the backward passes run with their
    dilation made explicit; together the calls count exactly what XLA counts for the native
    convolutions (the CPU compile of the step gives the same number)."""
    ops = analyzed("convnet", "h100").ops
    calls = ops[ops["opcode"] == "custom-call"]
    # 12 convolutions: 12 forward, 12 weight-gradient and 11 input-gradient calls (not the images')
    assert len(calls) == 35 and calls["name"].str.startswith("cudnn").all()
    head = 3 * 2 * convnet.CONFIG.batch * math.prod(convnet.param_shapes(convnet.CONFIG)["head"])
    assert calls["flops"].sum() == convnet.train_flops(convnet.CONFIG) - head


@pytest.mark.parametrize("name", ["gpt", "convnet", "moe"])
def test_same_program_same_flops_on_both_compilers(analyzed, name):
    """TPU and GPU compilers fuse differently but must agree on the arithmetic (within 1%).

    The MoE layer runs on 4 devices for v5e and 8 for H100, but its per-device FLOPs barely depend
    on the device count: experts × capacity is fixed by the tokens per device.
    """
    tpu, gpu = (analyzed(name, t).summary["flops"] for t in EXAMPLES[name].targets)
    assert abs(tpu - gpu) / gpu < 0.01
