"""Per-layer figures of scanned layers: a ``lax.scan`` over L layers is one while loop whose rows
carry × L; ``Report.loops()`` (and the summary's ``loops``) give its trip count and one iteration.

Oracles: L and the nesting from the program; one layer's matmul FLOPs, 2·(2·B·D·F), counted here;
and the same layer compiled alone (no loop) for its FLOPs and bytes.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import pytest
from click.testing import CliRunner
from conftest import FIXTURES

import hlo_roofline as hr
from hlo_roofline import cli

B, D, F, L = 128, 256, 512, 6
# at most 16 FLOPs per activation element besides the matmuls (XLA:CPU of jaxlib 0.10.2 prices
# the two tanh and the loop's slicing at about 9 per element)
ELEMENTWISE = 16 * B * (D + F)


def _layer(x, w):
    w1, w2 = w
    return jnp.tanh(jnp.tanh(x @ w1) @ w2)


def _stack(x, ws):
    return jax.lax.scan(lambda h, w: (_layer(h, w), None), x, ws)[0]


def _nested(x, ws):  # L_outer blocks of L // L_outer layers each: a scan in a scan
    blocks = jax.tree.map(lambda a: a.reshape(2, L // 2, *a.shape[1:]), ws)
    return jax.lax.scan(lambda h, block: (_stack(h, block), None), x, blocks)[0]


def _specs(layers: int):
    dt = jnp.bfloat16
    ws = (jax.ShapeDtypeStruct((layers, D, F), dt), jax.ShapeDtypeStruct((layers, F, D), dt))
    return jax.ShapeDtypeStruct((B, D), dt), ws


def _analyze(fn, *args, target):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return hr.analyze(fn, *args, chip="v5e", target=target, cache=False)


@pytest.mark.parametrize("target", ["local", "v5e"])
def test_a_scanned_stack_gives_one_layer_per_iteration(target):
    report = _analyze(_stack, *_specs(L), target=target)
    loops = report.loops()
    assert len(loops) == 1
    loop = loops.iloc[0]
    assert loop.trip_count == loop.iterations == L and loop.parent == ""
    one_layer = 2 * (2 * B * D * F)
    assert one_layer <= loop.flops_per_iteration <= one_layer + ELEMENTWISE
    # the same layer compiled alone: its FLOPs are one iteration's
    x, (w1, w2) = _specs(1)
    alone = _analyze(
        _layer, x, (jax.ShapeDtypeStruct((D, F), w1.dtype), jax.ShapeDtypeStruct((F, D), w2.dtype)),
        target=target,
    ).summary  # fmt: skip
    assert loop.flops_per_iteration == pytest.approx(alone["flops"], rel=0.01)
    assert loop.time_per_iteration_s * L == pytest.approx(loop.t_expected_s)
    inside = report.ops["loop"] == loops.index[0]
    assert loop.t_expected_s == pytest.approx(report.ops.loc[inside, "t_expected_s"].sum())
    # the summary holds the same, as records (JSON), slowest first
    (record,) = report.summary["loops"]
    assert record["name"] == loops.index[0] and record["trip_count"] == L
    assert record["time_per_iteration_s"] == pytest.approx(loop.time_per_iteration_s)


def test_nested_scans_give_each_loop_its_own_trip_count():
    report = _analyze(_nested, *_specs(L), target="v5e")
    loops = report.loops()
    assert len(loops) == 2
    outer = loops[loops["parent"] == ""].iloc[0]
    inner = loops[loops["parent"] != ""].iloc[0]
    assert inner.parent == outer.name and inner.name.startswith(outer.name + "/")
    assert (outer.trip_count, inner.trip_count) == (2, L // 2)
    assert inner.iterations == L  # per step: 2 × L/2
    one_layer = 2 * (2 * B * D * F)
    assert one_layer <= inner.flops_per_iteration <= one_layer + ELEMENTWISE
    assert outer.flops == pytest.approx(outer.trip_count * outer.flops_per_iteration)
    assert outer.flops >= inner.flops  # the outer loop's totals hold the inner loop's


def test_a_loop_of_unknown_trip_count_has_none():
    report = hr.analyze_hlo(FIXTURES / "while_dynamic" / "tpu_v5e.hlo.txt", chip="v5e")
    (loop,) = report.summary["loops"]
    assert loop["trip_count"] is None and loop["iterations"] == 1  # counted once
    assert report.ops.loc[report.ops["loop"] != "", "lower_bound"].all()


def test_the_cli_prints_the_loops_and_a_report_without_them_has_none():
    result = CliRunner().invoke(
        cli.main, ["hlo", str(FIXTURES / "scan10" / "tpu_v5e.hlo.txt"), "--chip", "v5e"]
    )
    assert result.exit_code == 0, result.output
    assert "10 trips" in result.output and "per iteration" in result.output
    plain = hr.analyze_hlo(FIXTURES / "mlp_bf16" / "tpu_v5e.hlo.txt", chip="v5e")
    assert plain.summary["loops"] == [] and plain.loops().empty
    old = hr.Report(plain.ops.drop(columns=["loop"]), plain.summary, plain.module)
    assert old.loops().empty  # a report written before the column
