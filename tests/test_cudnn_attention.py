"""cuDNN's fused flash attention (``__cudnn$fmhaSoftmax``, ``__cudnn$fmhaSoftmaxBackward``: what
``jax.nn.dot_product_attention(implementation="cudnn")`` and MaxText's ``cudnn_flash_jax`` emit),
compiled for one H100 (fixtures/cudnn_attention/generate.py), priced from its shapes and its
backend_config's mask. Oracles: the pairs its mask keeps counted here on the explicit mask; the
same attention through XLA (``implementation="xla"``), whose matmuls are the products the kernel
runs; the chip database's tensor-core peak."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from conftest import FIXTURES

from hlo_roofline import analyze_hlo, chips
from hlo_roofline.cost import walk
from hlo_roofline.hlo import parse

HERE = FIXTURES / "cudnn_attention"
CASES = json.loads((HERE / "cases.json").read_text())
CUDNN = sorted(n for n, c in CASES.items() if c["implementation"] == "cudnn")


def text(case: str) -> str:
    with gzip.open(HERE / f"{case}.hlo.txt.gz", "rt") as f:
        return f.read()


def fmha(case: str) -> list:
    """(instruction, cost) of each cuDNN attention call, in program order."""
    return [
        (op.instr, op.cost)
        for op in walk(parse(text(case)), "roofline")
        if op.instr.attrs.get("custom_call_target", "").strip('"').startswith("__cudnn$fmha")
    ]


def kept_pairs(c: dict) -> int:
    """The (query, key) pairs the case's mask keeps, counted on the mask itself: causal keeps
    key j ≤ query i, a window of w also j > i − w."""
    i, j = np.meshgrid(np.arange(c["s"]), np.arange(c["s"]), indexing="ij")
    keep = np.ones_like(i, dtype=bool)
    if c["causal"]:
        keep &= j <= i
    if c["window"]:
        keep &= j > i - c["window"]
    return c["b"] * c["h"] * int(keep.sum())


def matmul_flops(case: str) -> float:
    """2·M·N·K of every matmul in a program (XLA's own count of a dot)."""
    ops = analyze_hlo(text(case)).model_frame()
    dots = ops["mm_k"] > 0
    sizes = ops["count"] * ops["mm_batch"] * ops["mm_m"] * ops["mm_n"] * ops["mm_k"]
    return 2 * float(sizes[dots].sum())


@pytest.mark.parametrize("case", CUDNN)
def test_flops_are_the_products_over_the_pairs_the_mask_keeps(case):
    """Forward: q·kᵀ and p·v, 4·D a kept pair; backward: those recomputed scores and the four
    gradient products, 10·D (2.5× the forward); one exp a kept pair in each."""
    c = CASES[case]
    found = fmha(case)
    assert [i.attrs["custom_call_target"].strip('"') for i, _ in found] == (
        ["__cudnn$fmhaSoftmax", "__cudnn$fmhaSoftmaxBackward"] if c["backward"]
        else ["__cudnn$fmhaSoftmax"]
    )  # fmt: skip
    pairs = kept_pairs(c)
    for (instr, cost), per_pair in zip(found, (4, 10), strict=False):
        assert not cost.unknown
        assert cost.mxu_flops == per_pair * c["d"] * pairs, instr.name
        assert cost.transcendentals == pairs
        assert cost.mxu_flops <= cost.flops <= cost.mxu_flops * 1.01  # + rowsum(dO·O) backward
        assert cost.bytes_accessed > 0
        assert ("causal mask:" in "; ".join(cost.notes)) == c["causal"]


@pytest.mark.parametrize(
    ("cudnn", "xla"),
    [("cudnn_fwd_b2s1024h8d128", "xla_fwd_b2s1024h8d128"),
     ("cudnn_bwd_b2s1024h8d128", "xla_bwd_b2s1024h8d128")],
)  # fmt: skip
def test_kernel_does_the_matmuls_xla_does_for_the_same_attention(cudnn, xla):
    """The forward kernel's FLOPs are XLA's forward's matmuls; the backward kernel's are XLA's
    gradient program's (which, returning only dq, dk, dv, computes q·kᵀ again and the four
    gradient products, as the kernel does)."""
    kernel = fmha(cudnn)[-1][1]
    assert kernel.mxu_flops == matmul_flops(xla)


def test_backward_is_two_and_a_half_forwards():
    (_, fwd), (_, bwd) = fmha("cudnn_bwd_b1s2048h4d64_causal")
    assert bwd.mxu_flops / fwd.mxu_flops == 2.5


def test_grouped_kv_heads_count_the_query_heads():
    """With 2 kv heads for 8 query heads every query head still meets every key it may see."""
    c = CASES["cudnn_bwd_b2s1024h8kv2d128_gqa_causal"]
    assert c["hkv"] < c["h"]
    (_, fwd), _ = fmha("cudnn_bwd_b2s1024h8kv2d128_gqa_causal")
    assert fwd.mxu_flops == 4 * c["d"] * kept_pairs(c)


def test_xla_model_reports_it_as_unknown():
    module = parse(text("cudnn_fwd_b2s1024h8d128"))
    ops = [op for op in walk(module, "xla") if op.instr.opcode == "custom-call"]
    assert ops and all(op.cost.unknown for op in ops)


def test_judged_at_the_tensor_cores_peak():
    """On an H100 the kernel's products run at the bf16 tensor-core peak (the chip database's),
    not the CUDA cores' rate."""
    report = analyze_hlo(text("cudnn_bwd_b1s2048h4d64_causal"), chip="h100-sxm")
    rows = report.model_frame()[report.model_frame()["kernel_mxu_flops"] > 0]
    assert len(rows) == 2
    peak = chips.get("h100-sxm").per_device().peak_flops("bf16")
    for op in rows.itertuples():
        assert op.compute_unit == "mxu"
        assert op.t_compute_s == pytest.approx(op.kernel_mxu_flops / peak, rel=1e-6)
