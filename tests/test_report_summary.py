"""The summary's step bounds, model-FLOPs MFU and rematerialized share, on real compiled programs.

Oracles: the bounds' order (least ≤ as scheduled ≤ Σ per-op ≤ no overlap) on every committed
fixture; on an 8×H100 FSDP step with async all-gathers, the least step is the larger of the
interconnect's work and the compute stream's, read off the rows; MFU against the chip database's
bf16 peak; the recomputed FLOPs of ``jax.checkpoint`` against 2·B·D·F per matmul counted here.
"""

from __future__ import annotations

import json
import warnings

import jax
import jax.numpy as jnp
import pytest
from click.testing import CliRunner
from conftest import FIXTURES, SLOW

import hlo_roofline as hr
from hlo_roofline import chips, cli

CHIP_OF = {"tpu_v5e": "v5e", "tpu_v5p": "v5p", "h100": "h100", "h100_cublas": "h100",
           "cpu": "v5e"}  # fmt: skip


def _fixtures():
    for path in sorted(FIXTURES.glob("*/*.hlo.txt")):
        chip = CHIP_OF.get(path.name.removesuffix(".hlo.txt"))
        if chip is not None:
            yield path, chip


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def test_the_step_bounds_are_in_order_on_every_fixture():
    """≥ (perfect overlap) never above as scheduled; as scheduled never above the ops one after
    another (Σ t_roofline) nor that above no overlap at all."""
    checked = 0
    for path, chip in _fixtures():
        s = _quiet(hr.analyze_hlo, path, chip=chip).summary
        where = f"{path.relative_to(FIXTURES)} on {chip}: {s}"
        tol = 1e-12 + 1e-9 * s["step_time_upper_s"]
        assert s["step_bound_s"] <= s["step_expected_s"] + tol, where
        assert s["step_time_min_s"] <= s["step_expected_s"] + tol, where
        assert s["step_expected_s"] <= s["step_time_serial_s"] + tol, where
        assert s["step_time_serial_s"] <= s["step_time_upper_s"] + tol, where
        checked += 1
    assert checked > 40


def test_async_collectives_overlap_below_the_per_op_sum():
    """fsdp_train_step on 8×H100: XLA:GPU's async all-gathers and reduce-scatters run beside the
    matmuls, so the step as scheduled is below Σ t_roofline (the old "≥" line printed above it).
    The least step is the larger of the interconnect's work (every collective, one at a time) and
    the compute stream's (every row but the async starts); as scheduled sits between it and Σ."""
    report = _quiet(hr.analyze_hlo, FIXTURES / "fsdp_train_step" / "h100.hlo.txt", chip="h100")
    s, ops = report.summary, report.ops
    starts = ops["opcode"].str.endswith("-start")
    assert starts.any() and (ops.loc[starts, "collective"] != "").all()
    links = ops.loc[ops["collective"] != "", "t_expected_s"].sum()
    stream = ops.loc[~starts, "t_expected_s"].sum()
    assert s["step_time_min_s"] == pytest.approx(max(links, stream))
    assert s["step_time_min_s"] <= s["step_expected_s"] < s["step_time_serial_s"]
    # the MFU bound is against the step's bound, so the step as scheduled cannot beat it
    # f32 matmuls at JAX's default precision run on the TF32 tensor cores
    peak = chips.get("h100").per_device().peak_flops("tf32")
    assert s["mfu_dtype"] == "f32"
    assert s["mfu_upper_bound"] == pytest.approx(s["flops"] / (peak * s["step_bound_s"]))
    assert s["mfu_expected"] == pytest.approx(s["flops"] / (peak * s["step_expected_s"]))
    assert s["flops"] / (peak * s["step_expected_s"]) <= s["mfu_upper_bound"]


def test_the_summary_text_puts_the_bounds_in_order():
    result = CliRunner().invoke(
        cli.main, ["hlo", str(FIXTURES / "fsdp_train_step" / "h100.hlo.txt"), "--chip", "h100"]
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    step = next(line for line in lines if line.startswith("step time: ≥"))
    scheduled = next(line for line in lines if line.startswith("step time expected, as scheduled"))
    serial = next(line for line in lines if line.startswith("ops one after another"))
    assert lines.index(step) < lines.index(scheduled) < lines.index(serial)


# -- model FLOPs -----------------------------------------------------------------------------------

B, D, F, L = 128, 256, 512, 2


def _mlp(params, x):
    for w1, w2 in params:
        x = jnp.sin(jnp.sin(x @ w1) @ w2)  # sin' needs its input: every matmul is a residual
    return x


def _loss(params, x, remat: bool):
    return jnp.sum((jax.checkpoint(_mlp) if remat else _mlp)(params, x))


def _inputs():
    dt = jnp.bfloat16
    params = [(jax.ShapeDtypeStruct((D, F), dt), jax.ShapeDtypeStruct((F, D), dt))] * L
    return params, jax.ShapeDtypeStruct((B, D), dt)


def _train_step(remat: bool):
    return jax.value_and_grad(lambda p, x: _loss(p, x, remat))


MATMUL = 2 * B * D * F  # one layer's matmul, either of its two
# forward 2L matmuls, backward 2L − 1 for the weights' and inputs' gradients each (no dx of x)
MODEL_FLOPS = 3 * 2 * L * MATMUL - MATMUL


@pytest.fixture(scope="module")
def trained():
    """The step compiled compile-only for v5e, with and without full remat."""
    params, x = _inputs()
    return {
        remat: _quiet(hr.analyze, _train_step(remat), params, x, target="v5e", cache=False)
        for remat in (False, True)
    }


@SLOW  # compiles a training step for v5e, twice
def test_model_flops_mfu_against_the_bf16_peak(trained):
    report = trained[False]
    s = report.classify("v5e", model_flops=MODEL_FLOPS).summary
    peak = chips.get("v5e").per_device().peak_flops("bf16")
    assert s["model_flops"] == MODEL_FLOPS
    assert s["mfu_model"] == pytest.approx(MODEL_FLOPS / (s["step_expected_s"] * peak))
    # the HLO runs the model's matmuls plus elementwise work (sin, the sum): a little above 1
    assert 1.0 <= s["hlo_flops_per_model_flop"] < 1.05
    assert s["hlo_flops_per_model_flop"] == pytest.approx(s["flops"] / MODEL_FLOPS)
    # the count stays with the report: judged again, on another chip, it is still there
    again = report.classify("v5e", model_flops=MODEL_FLOPS).classify("v5p").summary
    v5p = chips.get("v5p").per_device().peak_flops("bf16")
    assert again["mfu_model"] == pytest.approx(
        MODEL_FLOPS / (again["step_expected_s"] * v5p)
    )
    assert report.summary["model_flops"] is None and report.summary["mfu_model"] is None


def test_model_flops_through_analyze_and_the_cli(tmp_path):
    """``analyze(..., model_flops=)``, ``analyze_hlo(..., model_flops=)`` and ``--model-flops``
    give the same summary keys; a bad count is a one-line error."""
    path = FIXTURES / "mlp_bf16" / "tpu_v5e.hlo.txt"
    api = _quiet(hr.analyze_hlo, path, chip="v5e", model_flops=1e8).summary
    unjudged = _quiet(hr.analyze_hlo, path, model_flops=1e8)
    assert unjudged.summary["model_flops"] == 1e8 and unjudged.chip is None
    assert unjudged.classify("v5e").summary["mfu_model"] == pytest.approx(api["mfu_model"])
    result = CliRunner().invoke(
        cli.main,
        ["hlo", str(path), "--chip", "v5e", "--model-flops", "1e8", "--json", str(tmp_path / "r.json")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    written = json.loads((tmp_path / "r.json").read_text())["summary"]
    assert written["mfu_model"] == pytest.approx(api["mfu_model"])
    assert "MFU (model FLOPs 1e+08)" in result.output
    bad = CliRunner().invoke(cli.main, ["hlo", str(path), "--model-flops", "0"])
    assert bad.exit_code == 2 and "--model-flops" in bad.output and "Traceback" not in bad.output
    with pytest.raises(ValueError, match="model_flops"):
        unjudged.with_model_flops(-1.0)


def test_analyze_takes_model_flops():
    params, x = _inputs()
    report = _quiet(
        hr.analyze, _train_step(False), params, x, chip="v5e", target="local",
        model_flops=MODEL_FLOPS,
    )  # fmt: skip
    assert report.summary["model_flops"] == MODEL_FLOPS and report.summary["mfu_model"] > 0


# -- rematerialization -----------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["local", "v5e"])
def test_remat_recomputes_every_forward_matmul(target, trained):
    """Full remat of an L-layer MLP. Two oracles: what the remat program runs beyond the same
    step without remat (its FLOPs less the other's: the recomputation, whichever ops XLA kept),
    and the forward matmuls, 2L of 2·B·D·F counted here. XLA:TPU recomputes every one of them
    (each fused with its sin: a few FLOPs per element besides); XLA:CPU may keep one (jaxlib
    0.10.2 does), never more than the forward. Without remat nothing is recomputed."""
    params, x = _inputs()
    if target == "local":
        runs = {
            remat: _quiet(hr.analyze, _train_step(remat), params, x, chip="v5e",
                          target="local", cache=False)
            for remat in (False, True)
        }  # fmt: skip
    else:
        runs = trained
    forward_matmuls = 2 * L * MATMUL
    elementwise = 8 * L * B * (D + F)  # at most 8 FLOPs per activation element fused in
    s, none = runs[True].summary, runs[False].summary
    extra = s["flops"] - none["flops"]  # what remat adds to the step
    assert s["remat_flops"] == pytest.approx(extra, abs=elementwise)
    assert MATMUL <= s["remat_flops"] <= forward_matmuls + elementwise
    if target == "v5e":
        assert forward_matmuls <= s["remat_flops"]
    forward = runs[True].ops
    forward = forward[(forward["mm_k"] > 0) & ~forward["op_name"].str.contains("transpose")]
    assert forward_matmuls <= forward["flops"].sum() <= forward_matmuls + elementwise
    assert s["remat_flops_share"] == pytest.approx(s["remat_flops"] / s["flops"])
    assert 0 < s["remat_time_s"] < s["step_time_serial_s"]
    assert s["remat_time_share"] == pytest.approx(s["remat_time_s"] / s["step_time_serial_s"])
    assert none["remat_flops"] == none["remat_time_s"] == none["remat_flops_share"] == 0
