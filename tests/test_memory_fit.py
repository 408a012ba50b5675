"""The third roofline: does the step fit the chip's memory? Checked against the compiler's own
figures (its buffer assignment, or its refusal), with the expected bytes derived from the shapes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from click.testing import CliRunner
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from hlo_roofline import analyze, analyze_hlo, cli, memory, targets
from hlo_roofline.check import Rules, check
from hlo_roofline.diff import compare
from hlo_roofline.testing import assert_roofline

GIB = 2**30
SHAPE = (16384, 65536)  # 2**30 elements: bf16 2 GiB, f32 4 GiB
# Adam on one weight: parameters bf16, two f32 moments, a bf16 gradient in; parameters and
# moments out. From the shapes alone: 2 + 4 + 4 + 2 = 12 GiB in, 2 + 4 + 4 = 10 GiB out.
ARGUMENTS, OUTPUTS = 12 * GIB, 10 * GIB


def adam(p, m, v, g):
    m = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g.astype(jnp.float32), m, g)
    v = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * jnp.square(g.astype(jnp.float32)), v, g)
    p = jax.tree.map(
        lambda p, m, v: (p.astype(jnp.float32) - 1e-3 * m / (jnp.sqrt(v) + 1e-8)).astype(p.dtype),
        p, m, v,
    )  # fmt: skip
    return p, m, v


def state(sharding=None):
    def s(dtype):
        return {"w": jax.ShapeDtypeStruct(SHAPE, dtype, sharding=sharding)}

    return s(jnp.bfloat16), s(jnp.float32), s(jnp.float32), s(jnp.bfloat16)


def sharded_state(target: str, devices: int):
    mesh = targets.make_mesh(target, (devices,), ("fsdp",))
    return state(NamedSharding(mesh, P("fsdp")))


@pytest.fixture(scope="module")
def refused():
    """22 GiB for a 16 GiB v5e: XLA:TPU refuses to compile it."""
    return analyze(adam, *state(), target="v5e:2x2")


def test_a_step_too_big_for_v5e_is_a_report_that_says_so(refused):
    mem, fit = refused.summary["memory"], refused.summary["memory_fit"]
    assert mem["source"] == "compiler error" and "Ran out of memory" in mem["compiler_error"]
    assert mem["need_bytes"] == ARGUMENTS + OUTPUTS  # the compiler's "22.00G", from the shapes
    assert mem["arguments_bytes"] == ARGUMENTS
    assert mem["available_bytes"] == 15.75 * GIB  # XLA:TPU keeps 0.25 GiB of the 16 for itself
    assert fit["verdict"] == "does not fit"
    assert fit["capacity_bytes"] == 16 * GIB
    assert fit["need_bytes"] == ARGUMENTS + OUTPUTS + GIB / 4  # plus the reserved space
    assert fit["used_fraction"] == pytest.approx((22.25) / 16)
    largest = [(b["name"], b["bytes"]) for b in mem["largest"][:2]]
    assert largest == [("m['w']", 4 * GIB), ("v['w']", 4 * GIB)]
    assert "donate" in fit["advice"][0] and f"{OUTPUTS / 1e9:.2f} GB" in fit["advice"][0]
    assert any("shard over 2x more devices" in a for a in fit["advice"])
    # No optimized program exists: the ops are the lowered program's, and the report says so.
    assert refused.summary["ops_before_optimization"] is True
    assert "refused" in refused.summary["how"]
    assert refused.summary["flops"] > 0


def test_the_same_step_fits_an_h100_and_a_v5p():
    for target, capacity in (("h100", 80e9), ("v5p:2x2x1", 95 * GIB)):
        report = analyze(adam, *state(), target=target)
        mem, fit = report.summary["memory"], report.summary["memory_fit"]
        assert mem["source"] == "compiler"
        assert mem["arguments_bytes"] == ARGUMENTS  # the compiler's buffer assignment
        assert mem["outputs_bytes"] >= OUTPUTS and mem["aliased_bytes"] == 0
        assert fit["verdict"] == "fits" and fit["capacity_bytes"] == capacity
        assert fit["advice"] == []


def test_donation_makes_it_fit_a_v5e():
    report = analyze(adam, *state(), target="v5e:2x2", donate_argnums=(0, 1, 2))
    mem, fit = report.summary["memory"], report.summary["memory_fit"]
    assert mem["aliased_bytes"] == OUTPUTS  # every output reuses its input's buffer
    assert ARGUMENTS <= mem["need_bytes"] < ARGUMENTS * 1.01
    assert fit["verdict"] == "fits" and fit["used_fraction"] == pytest.approx(0.75, abs=0.01)
    assert mem["donatable_bytes"] == 0  # nothing left to donate


def test_sharding_over_a_bigger_slice_makes_it_fit_and_the_gate_tells_them_apart(refused):
    report = analyze(adam, *sharded_state("v5e:2x4", 8), target="v5e:2x4")
    mem = report.summary["memory"]
    assert mem["arguments_bytes"] == ARGUMENTS // 8  # per device
    assert report.summary["memory_fit"]["verdict"] == "fits"
    rules = Rules.from_mapping({"max-hbm": 90})  # the TOML form
    assert not check(refused, rules).passed
    assert "needs 23.89 GB of 17.18 GB" in check(refused, rules).table()
    assert check(report, rules).passed
    with pytest.raises(AssertionError, match="max-hbm"):
        assert_roofline(adam, *state(), target="v5e:2x2", max_hbm=90)
    assert_roofline(adam, *sharded_state("v5e:2x4", 8), target="v5e:2x4", max_hbm=90)


def test_a_refused_sharded_program_has_no_op_rows():
    """Four times the state over the 4 chips of a v5e:2x2 is the same 22 GiB a device: refused.
    Before partitioning its ops have global shapes, not one device's: none are shown."""
    mesh = targets.make_mesh("v5e:2x2", (4,), ("fsdp",))
    sharding = NamedSharding(mesh, P("fsdp"))
    big = [
        {"w": jax.ShapeDtypeStruct((4 * SHAPE[0], SHAPE[1]), d, sharding=sharding)}
        for d in (jnp.bfloat16, jnp.float32, jnp.float32, jnp.bfloat16)
    ]
    report = analyze(adam, *big, target="v5e:2x2")
    mem = report.summary["memory"]
    assert mem["source"] == "compiler error" and mem["need_bytes"] == ARGUMENTS + OUTPUTS
    assert mem["arguments_bytes"] == ARGUMENTS  # per device: a quarter of each array
    assert report.ops.empty and report.summary["ops_before_optimization"] is False
    assert report.summary["memory_fit"]["verdict"] == "does not fit"


def test_cli_summary_and_gate(tmp_path):
    steps = tmp_path / "steps.py"
    steps.write_text(
        "import jax, jax.numpy as jnp\n"
        "from test_memory_fit import adam, state\n"
        "def big_adam():\n    return adam, state()\n"
    )
    runner = CliRunner()
    env_path = str(__import__("pathlib").Path(__file__).parent)
    import sys

    sys.path.insert(0, env_path)
    try:
        shown = runner.invoke(cli.main, ["analyze", f"{steps}:big_adam", "--target", "v5e:2x2"])
        gate = runner.invoke(
            cli.main, ["check", "--from", f"{steps}:big_adam", "--target", "v5e:2x2",
                       "--max-hbm", "90"],
        )  # fmt: skip
    finally:
        sys.path.remove(env_path)
    assert shown.exit_code == 0, shown.output
    assert "HBM per device: 23.9 GB of 17.2 GB (139%): does not fit" in shown.output
    assert "try: donate" in shown.output and "largest: m['w'] 4.29 GB" in shown.output
    assert gate.exit_code == 1 and "max-hbm" in gate.output


def test_hlo_text_alone_knows_arguments_and_outputs_but_not_temporaries():
    text = """HloModule m, is_scheduled=true, input_output_alias={ {0}: (0, {}, may-alias) }

ENTRY e {
  a = f32[1024,1024]{1,0} parameter(0)
  b = f32[1024,1024]{1,0} parameter(1)
  d = f32[1024,1024]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  s = f32[1024,1024]{1,0} add(d, b)
  ROOT t = (f32[1024,1024]{1,0}, f32[1024,1024]{1,0}) tuple(s, d)
}
"""
    report = analyze_hlo(text, chip="v5e")
    mem, fit = report.summary["memory"], report.summary["memory_fit"]
    mib4 = 1024 * 1024 * 4
    assert mem["source"] == "hlo" and mem["complete"] is False
    assert mem["arguments_bytes"] == 2 * mib4 and mem["outputs_bytes"] == 2 * mib4
    assert mem["aliased_bytes"] == mib4 and mem["need_bytes"] == 3 * mib4
    assert fit["verdict"] == "unknown"  # temporaries unknown: a lower bound cannot say "fits"
    assert [b["kind"] for b in mem["largest"]] == ["parameter", "parameter", "output", "output"]
    assert not check(report, Rules(max_hbm=90)).passed  # unknown is not a pass
    assert "temporaries unknown" in memory.describe(report.summary)[0]


def test_diff_reports_the_change_in_memory(refused):
    fits = analyze(adam, *state(), target="v5e:2x2", donate_argnums=(0, 1, 2))
    diff = compare(refused, fits)
    assert diff.hbm_a == ARGUMENTS + OUTPUTS
    assert diff.hbm_change == pytest.approx(fits.summary["memory"]["need_bytes"] / diff.hbm_a - 1)
    assert diff.hbm_change < -0.4


def test_rule_values():
    with pytest.raises(ValueError, match="max-hbm must be a positive percent"):
        Rules(max_hbm=0)
    assert Rules(max_hbm=150).max_hbm == 150  # over-subscribing is a limit one may set
