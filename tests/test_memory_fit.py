"""The third roofline: does the step fit the chip's memory? Checked against the compiler's own
figures (its buffer assignment, or its refusal), with the expected bytes derived from the shapes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from click.testing import CliRunner
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from hlo_roofline import analyze, analyze_dump, analyze_hlo, cli, targets
from hlo_roofline.check import Rules, check
from hlo_roofline.diff import compare
from hlo_roofline.judge import memory
from hlo_roofline.testing import assert_roofline

# The steps here are one device's by design (the fit is per device): a slice target does not warn.
pytestmark = pytest.mark.filterwarnings("ignore::hlo_roofline.api.UnshardedProgramWarning")
GIB = 2**30
V5E_SLICES = (1, 4, 8, 16, 32, 64, 128, 256)  # v5litepod-N: the chips of each v5e slice (GCP)
TIGHT_BYTES = 0.9 * 16 * GIB  # the advice aims under 90% of a v5e's 16 GiB


def _words(fit: dict) -> list[str]:
    """The fit's remedies as the CLI words them (the summary holds codes and figures)."""
    return [memory.advice_text(a) for a in fit["advice"]]


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
    assert fit["verdict"] == "does_not_fit"
    assert fit["capacity_bytes"] == 16 * GIB
    assert fit["need_bytes"] == ARGUMENTS + OUTPUTS + GIB / 4  # plus the reserved space
    assert fit["used_fraction"] == pytest.approx((22.25) / 16)
    largest = [(b["name"], b["bytes"]) for b in mem["largest"][:2]]
    assert largest == [("m['w']", 4 * GIB), ("v['w']", 4 * GIB)]
    assert fit["advice"][0]["code"] == "donate" and fit["advice"][0]["saves_bytes"] == OUTPUTS
    assert f"{OUTPUTS / 1e9:.2f} GB" in _words(fit)[0]
    # Sharding: the 12 GiB of arguments shrink, the other 10.25 GiB the error does not split (the
    # outputs, the reserved space) are assumed not to; v5e comes in slices of 1, 4, 8, 16, ...
    # chips (GCP), so the smallest that brings it under 90% of 16 GiB is named, not "3x":
    devices = min(n for n in V5E_SLICES if 10.25 * GIB + ARGUMENTS / n <= TIGHT_BYTES)
    assert devices == 4
    (shard,) = [a for a in _words(fit) if a.startswith("shard")]
    assert shard.startswith("shard over a 4-chip slice (2x2, now 1)")
    assert f"{(10.25 * GIB + ARGUMENTS / 4) / 1e9:.2f} GB per device" in shard
    assert "do not shrink" in shard and "FSDP" in shard
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
    report = analyze(adam, *state(), target="v5e:2x2", jit_kwargs={"donate_argnums": (0, 1, 2)})
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


def big_sharded():
    """Four times the state over the 4 chips of a v5e:2x2: the same 22 GiB a device, refused."""
    mesh = targets.make_mesh("v5e:2x2", (4,), ("fsdp",))
    sharding = NamedSharding(mesh, P("fsdp"))
    return adam, [
        {"w": jax.ShapeDtypeStruct((4 * SHAPE[0], SHAPE[1]), d, sharding=sharding)}
        for d in (jnp.bfloat16, jnp.float32, jnp.float32, jnp.bfloat16)
    ]


@pytest.fixture(scope="module")
def refused_sharded():
    step, args = big_sharded()
    return analyze(step, *args, target="v5e:2x2")


def test_a_refused_sharded_program_has_no_op_rows(refused_sharded):
    """Before partitioning its ops have global shapes, not one device's: none are shown, and
    neither are FLOPs, bytes or coverage (the lowered text's would be the whole program's)."""
    report = refused_sharded
    mem = report.summary["memory"]
    assert mem["source"] == "compiler error" and mem["need_bytes"] == ARGUMENTS + OUTPUTS
    assert mem["arguments_bytes"] == ARGUMENTS  # per device: a quarter of each array
    assert mem["devices"] == 4
    assert report.ops.empty and report.summary["ops_before_optimization"] is False
    assert report.summary["memory_fit"]["verdict"] == "does_not_fit"
    for key in ("flops", "bytes_accessed", "coverage"):
        assert key not in report.summary
    assert report.summary["unknown_ops"] == []  # no names of ops that are in no table
    # four devices now; the state shards over a bigger slice, the other 10.25 GiB do not
    devices = min(n for n in V5E_SLICES if 10.25 * GIB + ARGUMENTS * 4 / n <= TIGHT_BYTES)
    assert devices == 16
    (shard,) = [a for a in _words(report.summary["memory_fit"]) if a.startswith("shard")]
    assert shard.startswith("shard over a 16-chip slice (4x4, now 4)")


def test_a_refused_step_fails_every_gate_with_the_compilers_reason(refused, refused_sharded):
    rules = Rules(
        min_coverage=0, max_exposed_comm=100, require="compute", exclude_kind="collective"
    )
    for report in (refused, refused_sharded):
        result = check(report, rules)
        assert [v.rule for v in result.violations] == [
            "require", "min-coverage", "max-exposed-comm",
        ]  # fmt: skip
        assert all("Ran out of memory on HBM" in v.detail for v in result.violations)
        assert all(
            v.detail.startswith("the compiler refused the program") for v in result.violations
        )
    (v,) = check(refused_sharded, Rules(select="adam")).violations  # a selection alone: one gate
    assert v.rule == "select" and "refused" in v.detail
    with pytest.raises(AssertionError, match="the compiler refused the program"):
        step, args = big_sharded()
        assert_roofline(step, *args, target="v5e:2x2", min_coverage=0)


def test_slices_named_by_the_advice():
    assert [n for n, _ in targets.slice_shapes("v5e")] == list(V5E_SLICES)
    assert targets.slice_shapes("v5p")[:4] == [(4, "2x2x1"), (8, "2x2x2"), (16, "2x2x4"),
                                               (32, "2x4x4")]  # fmt: skip
    for chip in ("v5e", "v5p", "v6e", "h100"):
        for n, shape in targets.slice_shapes(chip):
            assert targets.parse_target(f"{chip}:{shape}")  # a slice that exists
            assert n == __import__("math").prod(int(d) for d in shape.split("x"))


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


def test_hlo_text_alone_knows_arguments_and_outputs_but_not_temporaries(tmp_path):
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
    undecided = check(report, Rules(max_hbm=90))
    assert not undecided.passed and undecided.undecided  # unknown is not a pass, nor a fail
    assert not undecided.violations and undecided.unknown[0].rule == "max-hbm unknown"
    # the lower bound alone over the limit decides it: a fail
    over = check(report, Rules(max_hbm=0.01))
    assert not over.passed and not over.undecided and over.violations[0].rule == "max-hbm"
    assert "temporaries unknown" in memory.describe(report.summary)[0]
    path = tmp_path / "text.json"
    report.to_json(path)
    shown = CliRunner().invoke(cli.main, ["check", str(path), "--max-hbm", "90"])
    assert shown.exit_code == 2 and "unknown: the report cannot decide" in shown.output
    assert "temporaries unknown (HLO text only)" in shown.output
    assert CliRunner().invoke(cli.main, ["check", str(path), "--max-hbm", "0.01"]).exit_code == 1
    with pytest.raises(AssertionError, match="could not be decided"):
        assert_roofline(report, max_hbm=90)


def test_diff_reports_the_change_in_memory(refused):
    fits = analyze(adam, *state(), target="v5e:2x2", jit_kwargs={"donate_argnums": (0, 1, 2)})
    diff = compare(refused, fits)
    assert diff.hbm_a == ARGUMENTS + OUTPUTS
    assert diff.hbm_change == pytest.approx(fits.summary["memory"]["need_bytes"] / diff.hbm_a - 1)
    assert diff.hbm_change < -0.4


def test_rule_values():
    with pytest.raises(ValueError, match="max-hbm must be a finite percent > 0"):
        Rules(max_hbm=0)
    assert Rules(max_hbm=150).max_hbm == 150  # over-subscribing is a limit one may set


STEPS = """
import jax, jax.numpy as jnp
from test_memory_fit import big_sharded

def ffi_step():
    def step(x):  # lowers; XLA has no handler for the target: compiling fails
        out = jax.ShapeDtypeStruct(x.shape, x.dtype)
        return jax.ffi.ffi_call("hlo_roofline_no_such_target", out)(x)
    return step, (jax.ShapeDtypeStruct((8,), jnp.float32),)

def broken_step():
    def step(x):
        return x @ jnp.ones((3, 3))  # a shape error in the user's code, at trace time
    return step, (jax.ShapeDtypeStruct((8,), jnp.float32),)
"""


@pytest.fixture
def steps(tmp_path, monkeypatch):
    path = tmp_path / "steps.py"
    path.write_text(STEPS)
    monkeypatch.syspath_prepend(str(__import__("pathlib").Path(__file__).parent))
    return path


def test_cli_refused_sharded_step_says_ops_are_unknown_and_fails_every_gate(steps):
    runner = CliRunner()
    shown = runner.invoke(cli.main, ["analyze", f"{steps}:big_sharded", "--target", "v5e:2x2"])
    assert shown.exit_code == 0, shown.output
    assert "0 ops" not in shown.output
    assert "ops unknown: the compiler refused the program" in shown.output
    assert (
        "FLOPs, bytes: unknown per device" in shown.output and "coverage: unknown" in shown.output
    )
    assert "step time: unknown" in shown.output
    assert f"on each of 4 devices: the compiler needs {(ARGUMENTS + OUTPUTS) / 1e9:.3g} GB" in (
        shown.output
    )
    assert "try: shard over a 16-chip slice (4x4, now 4)" in shown.output
    gate = runner.invoke(cli.main, ["check", "--from", f"{steps}:big_sharded", "--target",
                                    "v5e:2x2", "--min-coverage", "0", "--max-exposed-comm", "100",
                                    "--format", "json"])  # fmt: skip
    assert gate.exit_code == 1, gate.output
    violations = __import__("json").loads(gate.output)["violations"]
    assert [v["rule"] for v in violations] == ["min-coverage", "max-exposed-comm"]
    assert all("Ran out of memory" in v["detail"] for v in violations)


def test_cli_a_step_that_fails_to_compile_fails_the_gate_bad_code_is_bad_input(steps):
    runner = CliRunner()
    failed = runner.invoke(cli.main, ["check", "--from", f"{steps}:ffi_step", "--target", "local",
                                      "--min-coverage", "0", "--max-hbm", "100"])  # fmt: skip
    assert failed.exit_code == 1, failed.output
    assert "the compiler refused the program" in failed.output
    assert "hlo_roofline_no_such_target" in failed.output
    assert "min-coverage" in failed.output and "max-hbm" in failed.output
    broken = runner.invoke(cli.main, ["check", "--from", f"{steps}:broken_step", "--target",
                                      "local", "--min-coverage", "0"])  # fmt: skip
    assert broken.exit_code == 2 and "compiling" in broken.output, broken.output
    assert "Traceback" not in broken.output


# -- the fit from an --xla_dump_to directory -------------------------------------------------------

DUMPS = __import__("pathlib").Path(__file__).parent.parent / "fixtures" / "memory_dump"
ORACLE_KEYS = {  # memory() field: memory_analysis() field
    "arguments_bytes": "argument_size_in_bytes",
    "outputs_bytes": "output_size_in_bytes",
    "aliased_bytes": "alias_size_in_bytes",
    "temporaries_bytes": "temp_size_in_bytes",
}


def dump_figures(directory):
    """(from_dump of the directory's module, the oracle: memory_analysis() of the same compile)."""
    oracle = __import__("json").loads((directory / "memory_analysis.json").read_text())
    (assignment,) = directory.glob(f"*{memory.ASSIGNMENT_SUFFIX}")
    (usage,) = directory.glob(f"*{memory.USAGE_SUFFIX}")
    mem = memory.from_dump(assignment.read_text(), usage.read_text(), {})
    return mem, oracle


def test_a_cpu_dump_gives_the_compilers_own_figures():
    mem, oracle = dump_figures(DUMPS / "cpu")
    for ours, theirs in ORACLE_KEYS.items():
        assert mem[ours] == oracle[theirs], ours
    assert mem["complete"] and mem["source"] == "dump"
    assert (
        mem["need_bytes"]
        == sum(oracle[ORACLE_KEYS[k]] for k in ORACLE_KEYS) - 2 * oracle["alias_size_in_bytes"]
    )  # arguments + outputs − aliased + temporaries
    assert mem["allocated_bytes"] >= mem["need_bytes"]  # the usage report's total: thread-local too
    report = analyze_dump(DUMPS / "cpu", chip="v5e")
    ((_, r),) = report.items()
    assert r.summary["memory"]["need_bytes"] == mem["need_bytes"]
    assert r.summary["memory_fit"]["verdict"] == "fits"  # not "unknown": temporaries are known
    shown = CliRunner().invoke(cli.main, ["hlo", str(DUMPS / "cpu"), "--chip", "v5e"])
    assert shown.exit_code == 0, shown.output
    assert "fits (the dump's buffer assignment)" in shown.output


def test_a_tpu_dump_gives_arguments_and_outputs_exactly_and_temporaries_as_a_lower_bound():
    mem, oracle = dump_figures(DUMPS / "tpu_v5p")
    for ours in ("arguments_bytes", "outputs_bytes", "aliased_bytes"):
        assert mem[ours] == oracle[ORACLE_KEYS[ours]], ours
    # XLA:TPU assigns more temporaries in code generation, after the dump's buffer assignment
    assert 0 < mem["temporaries_bytes"] <= oracle["temp_size_in_bytes"]
    assert mem["complete"] is False


def test_a_gpu_dump_counts_the_temporaries_xla_puts_in_their_own_memory_space():
    """XLA:GPU may put temporaries in a memory space of their own (a color other than 0):
    still device memory, still the step's need (the dump's usage report calls it ``smem``)."""
    directory = DUMPS / "gpu_h100"
    assert "color 2" in next(directory.glob(f"*{memory.ASSIGNMENT_SUFFIX}")).read_text()
    mem, oracle = dump_figures(directory)
    for ours, theirs in ORACLE_KEYS.items():
        assert mem[ours] == oracle[theirs], ours
    assert mem["complete"] and mem["allocated_bytes"] >= mem["need_bytes"]
    ((_, report),) = analyze_dump(directory, chip="h100").items()
    assert report.summary["memory_fit"]["need_bytes"] == mem["need_bytes"]


def test_a_fresh_dump_matches_memory_analysis_of_the_same_compile(tmp_path):
    """The fixture's script, run now: whatever this jax's XLA assigns, the dump says the same."""
    import subprocess
    import sys

    script = DUMPS / "make_dump.py"
    env = {**__import__("os").environ, "PYTHONPATH": str(DUMPS.parent.parent)}
    subprocess.run([sys.executable, str(script), str(tmp_path), "cpu"], check=True, env=env,
                   capture_output=True, timeout=300)  # fmt: skip
    mem, oracle = dump_figures(tmp_path)
    for ours, theirs in ORACLE_KEYS.items():
        assert mem[ours] == oracle[theirs], ours


def test_not_a_buffer_assignment():
    with pytest.raises(ValueError, match="not an XLA buffer assignment"):
        memory.from_dump("BufferAssignment:\n", None, {})


def test_replicated_state_is_advised_to_shard_over_the_devices_it_has():
    """The state replicated on the 4 chips of a v5e:2x2: each holds all 12 GiB of it. Sharded
    over those 4 (FSDP), each would hold 3 GiB beside the 10.25 GiB that do not shrink."""
    mesh = targets.make_mesh("v5e:2x2", (4,), ("fsdp",))
    report = analyze(adam, *state(NamedSharding(mesh, P())), target="v5e:2x2")
    mem = report.summary["memory"]
    assert mem["devices"] == 4 and mem["arguments_global_bytes"] == ARGUMENTS  # replicated
    assert min(n for n in V5E_SLICES if n >= 4 and 10.25 * GIB + ARGUMENTS / n <= TIGHT_BYTES) == 4
    (shard,) = [a for a in _words(report.summary["memory_fit"]) if a.startswith("shard")]
    assert shard.startswith(
        f"shard over the 4 devices it has: about {(10.25 * GIB + ARGUMENTS / 4) / 1e9:.2f} GB"
    )
