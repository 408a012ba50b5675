"""The caller's JAX context is the step's: a mesh set with ``jax.set_mesh`` (or ``with mesh:``),
Flax's logical axis rules, typed PRNG keys among the arguments; the CLI compiles what the same call
compiles in the user's process; a multi-device target given an unsharded program says so.

The oracles are JAX's own: the program ``jax.jit(step).lower(...).compile()`` builds in the same
context (its ``cost_analysis()`` FLOPs and ``memory_analysis()`` argument bytes), and the
analytic FLOPs of the matmuls divided by the devices the mesh shards them over.
"""

from __future__ import annotations

import json
import textwrap
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from click.testing import CliRunner
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from hlo_roofline import analyze, api, cache, cli, placement, targets

P = PartitionSpec
S = jax.ShapeDtypeStruct
TARGET = "v5e:2x2"
B, D, F = 512, 256, 1024  # two matmuls: [B, D] @ [D, F] and [B, F] @ [F, D]
MATMUL_FLOPS = 2 * (2 * B * D * F)
RULES = (("batch", "data"), ("mlp", "model"), ("embed", None))

# The steps as a user's file holds them: the sharding comes only from the context (a mesh set with
# jax.set_mesh, Flax's axis rules), never from the arguments. NAME() yields inside that context.
STEPS = textwrap.dedent(
    f"""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import PartitionSpec as P

    from hlo_roofline import targets

    S = jax.ShapeDtypeStruct
    ARGS = (S(({B}, {D}), jnp.float32), S(({D}, {F}), jnp.float32), S(({F}, {D}), jnp.float32))
    RULES = {RULES!r}


    def mesh(kind=jax.sharding.AxisType.Explicit):
        devices = np.array(targets.devices("{TARGET}")).reshape(2, 2)
        return jax.sharding.Mesh(devices, ("data", "model"), axis_types=(kind, kind))


    def resharded(x, w1, w2):
        x = jax.sharding.reshard(x, P("data", None))
        h = jnp.tanh(x @ jax.sharding.reshard(w1, P(None, "model")))
        w2 = jax.sharding.reshard(w2, P("model", None))
        return jnp.einsum("bf,fd->bd", h, w2, out_sharding=P("data", None))


    def constrained(x, w1, w2):
        x = jax.lax.with_sharding_constraint(x, P("data", None))
        h = jax.lax.with_sharding_constraint(jnp.tanh(x @ w1), P("data", "model"))
        return h @ w2


    def logical(x, w1, w2):
        x = nn.with_logical_constraint(x, ("batch", "embed"))
        h = nn.with_logical_constraint(jnp.tanh(x @ w1), ("batch", "mlp"))
        return h @ w2


    def set_mesh_step():
        with jax.set_mesh(mesh()):
            yield resharded, ARGS


    def mesh_block_step():
        with mesh(jax.sharding.AxisType.Auto):
            yield constrained, ARGS


    def axis_rules_step():
        with jax.set_mesh(mesh(jax.sharding.AxisType.Auto)), nn.logical_axis_rules(RULES):
            yield logical, ARGS


    def no_context_step():
        return logical, ARGS


    def yields_twice():
        with jax.set_mesh(mesh()):
            yield resharded, ARGS
            yield resharded, ARGS
    """
)


def mesh(kind) -> jax.sharding.Mesh:
    devices = np.array(targets.devices(TARGET)).reshape(2, 2)
    return jax.sharding.Mesh(devices, ("data", "model"), axis_types=(kind, kind))


@pytest.fixture(scope="module")
def steps(tmp_path_factory):
    path = tmp_path_factory.mktemp("context") / "steps.py"
    path.write_text(STEPS)
    return path


def run_cli(*args: str) -> dict:
    result = CliRunner().invoke(cli.main, [*args, "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def in_process(steps, name: str):
    """(report, XLA's FLOPs, XLA's argument bytes) of NAME's step analyzed in this process, in the
    context NAME opens, beside the same program compiled by jax itself there."""
    with cli.opened_entry(f"{steps}:{name}") as (step, args, _):
        report = analyze(step, *args, target=TARGET, cache=False)
        compiled = jax.jit(step).lower(*placement.place_args(args, TARGET)).compile()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return report, cost["flops"], compiled.memory_analysis().argument_size_in_bytes


@pytest.mark.parametrize(
    ("name", "shards"),
    [("set_mesh_step", 4), ("mesh_block_step", 4), ("axis_rules_step", 4), ("no_context_step", 1)],
)
def test_the_cli_compiles_what_the_users_process_compiles(
    steps, name, shards, tmp_path, monkeypatch
):
    report, xla_flops, xla_arguments = in_process(steps, name)
    # The context shards the matmuls over the 4 devices (the tanh and the rest are a few percent).
    assert report.summary["flops"] == pytest.approx(MATMUL_FLOPS / shards, rel=0.02)
    assert report.summary["flops"] == pytest.approx(xla_flops, rel=0.01)
    assert report.summary["memory"]["arguments_bytes"] == xla_arguments
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path))
    result = CliRunner().invoke(
        cli.main, ["analyze", f"{steps}:{name}", "--target", TARGET, "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)["summary"]
    assert summary["flops"] == report.summary["flops"]
    assert summary["bytes_accessed"] == report.summary["bytes_accessed"]
    assert summary["memory"]["need_bytes"] == report.summary["memory"]["need_bytes"]
    assert ("nothing is sharded" in result.stderr) == (shards == 1), result.stderr


def test_a_multi_device_target_given_an_unsharded_program_warns(steps):
    x, w1, w2 = S((B, D), jnp.float32), S((D, F), jnp.float32), S((F, D), jnp.float32)

    def step(x, w1, w2):
        return jnp.tanh(x @ w1) @ w2

    with pytest.warns(api.UnshardedProgramWarning, match="compiled for one device"):
        analyze(step, x, w1, w2, target=TARGET, cache=False)
    replicated = NamedSharding(mesh(jax.sharding.AxisType.Auto), P())
    on_mesh = [S(a.shape, a.dtype, sharding=replicated) for a in (x, w1, w2)]
    with pytest.warns(api.UnshardedProgramWarning, match="nothing split"):
        analyze(step, *on_mesh, target=TARGET, cache=False)
    sharded = NamedSharding(mesh(jax.sharding.AxisType.Auto), P("data"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", api.UnshardedProgramWarning)
        analyze(step, S((B, D), jnp.float32, sharding=sharded), *on_mesh[1:], target=TARGET,
                cache=False)  # fmt: skip
        analyze(step, x, w1, w2, target="h100", cache=False)  # one device: nothing to shard


def test_the_cli_warns_in_one_line_and_explains_a_directory(steps, tmp_path):
    runner = CliRunner()
    result = runner.invoke(cli.main, ["analyze", f"{steps}:no_context_step", "--target", TARGET])
    assert result.exit_code == 0
    warned = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warned) == 1 and "nothing is sharded" in warned[0], result.stderr
    result = runner.invoke(cli.main, ["analyze", str(tmp_path)])
    assert result.exit_code == 2
    assert f"use `hlo-roofline hlo {tmp_path}`" in result.output
    (tmp_path / "adir.py").mkdir()
    result = runner.invoke(cli.main, ["analyze", f"{tmp_path / 'adir.py'}:f"])
    assert result.exit_code == 2 and "is a directory, not a Python file" in result.output
    result = runner.invoke(cli.main, ["analyze", f"{steps}:yields_twice", "--target", TARGET])
    assert result.exit_code == 2 and "must yield once" in result.output
    assert "Traceback" not in result.output


def test_a_step_is_one_cache_entry_whoever_analyzes_it(steps, tmp_path, monkeypatch):
    """The HLO records no caller's frames: analyzed here, from a helper, and by the CLI, the step
    is compiled once."""
    body = (
        "def step(x, w):\n    return jnp.tanh(x @ w)\n\n\ndef example():\n    return step, ARGS\n"
    )
    path = tmp_path / "one.py"
    path.write_text(
        "import jax, jax.numpy as jnp\n"
        "ARGS = (jax.ShapeDtypeStruct((128, 256), jnp.bfloat16),"
        " jax.ShapeDtypeStruct((256, 512), jnp.bfloat16))\n" + body
    )
    step, args, _ = cli.load_entry(f"{path}:example")
    first = analyze(step, *args, target="v5e", cache=tmp_path / "c")

    calls = []
    real = jax.stages.Lowered.compile
    monkeypatch.setattr(
        jax.stages.Lowered, "compile", lambda self, *a, **k: calls.append(1) or real(self, *a, **k)
    )

    def from_a_helper():
        return analyze(step, *args, target="v5e", cache=tmp_path / "c")

    assert from_a_helper().ops.equals(first.ops)
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "c"))
    data = run_cli("analyze", f"{path}:example", "--target", "v5e")
    assert data["summary"]["flops"] == first.summary["flops"]
    assert calls == []
    assert len(list((tmp_path / "c").glob("*.hlo.txt"))) == 1


# -- typed PRNG keys and float0 among the arguments -------------------------------------------------


class Noisy(nnx.Module):
    """A layer that keeps its ``nnx.Rngs`` in its state (as dropout does): typed keys in the state."""

    def __init__(self, rngs: nnx.Rngs):
        self.linear = nnx.Linear(256, 256, rngs=rngs)
        self.dropout = nnx.Dropout(0.1, rngs=rngs)

    def __call__(self, x):
        return self.dropout(self.linear(x))


def nnx_step():
    graphdef, state = nnx.split(nnx.eval_shape(lambda: Noisy(nnx.Rngs(0, dropout=1))))

    def train_step(state, x):
        model = nnx.merge(graphdef, state)
        loss, grads = nnx.value_and_grad(lambda m: m(x).sum())(model)
        return nnx.state(model), loss, grads

    return train_step, (state, S((32, 256), jnp.float32))


def xla_argument_bytes(step, args) -> int:
    return jax.jit(step).lower(*args).compile().memory_analysis().argument_size_in_bytes


def test_typed_keys_in_nnx_state_and_raw_keys_are_sized_as_stored():
    step, args = nnx_step()
    dtypes = {str(x.dtype) for x in jax.tree_util.tree_leaves(args[0])}
    assert any(d.startswith("key<") for d in dtypes), dtypes  # the test holds typed keys
    report = analyze(step, *args, cache=False)
    memory = report.summary["memory"]
    assert memory["arguments_bytes"] == xla_argument_bytes(step, args)
    keys = [b for b in memory["largest"] if "key<" in b["shape"]]
    assert all(b["bytes"] == 8 for b in keys)  # two uint32 each

    def sample(key, x):
        return jax.random.normal(key, x.shape) + x, jax.random.split(key)

    key = jax.random.key(0)
    report = analyze(sample, key, jnp.ones((64, 64)), cache=False)
    assert report.summary["memory"]["arguments_bytes"] == 8 + 64 * 64 * 4
    assert placement.element_bytes(jax.random.key(0, impl="rbg").dtype) == 16  # four uint32
    assert placement.element_bytes(jax.dtypes.float0) == 1  # passed as a bool, as XLA counts it

    def grads(x, i):
        return jax.grad(lambda x, i: (x * i).sum(), argnums=(0, 1), allow_int=True)(x, i)

    x, i = S((8, 8), jnp.float32), S((8, 8), jnp.int32)
    assert analyze(grads, x, i, cache=False).summary["flops"] > 0
    zero = S((8, 8), jax.dtypes.float0)
    report = analyze(lambda z, x: x * 2, zero, x, cache=False)
    assert report.summary["memory"]["arguments_bytes"] == xla_argument_bytes(
        lambda z, x: x * 2, (zero, x)
    )


def test_nnx_state_with_rngs_through_the_cli(tmp_path, monkeypatch):
    path = tmp_path / "nnx_steps.py"
    path.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from test_api_context import nnx_step\n"
        "def example():\n    return nnx_step()\n"
    )
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "c"))
    data = run_cli("analyze", f"{path}:example")
    step, args = nnx_step()
    assert data["summary"]["memory"]["arguments_bytes"] == xla_argument_bytes(step, args)


def test_contexts_are_left_when_the_step_fails(tmp_path):
    path = tmp_path / "failing.py"
    path.write_text(
        "import jax, jax.numpy as jnp\nimport flax.linen as nn\nLEFT = []\n"
        "def bad(x):\n    return x @ x\n"
        "def example():\n"
        "    try:\n"
        "        with nn.logical_axis_rules([('batch', None)]):\n"
        "            yield bad, (jax.ShapeDtypeStruct((3, 4), jnp.float32),)\n"
        "    finally:\n"
        "        LEFT.append(1)\n"
    )
    result = CliRunner().invoke(cli.main, ["analyze", f"{path}:example", "--no-cache"])
    assert result.exit_code == 2 and "compiling" in result.output and "TypeError" in result.output
    from flax.core import spmd

    assert not spmd.get_logical_axis_rules()  # the rules did not outlive the command


def test_assert_roofline_compiles_in_the_callers_mesh(steps):
    from hlo_roofline.testing import assert_roofline

    with cli.opened_entry(f"{steps}:set_mesh_step") as (step, args, _):
        report = assert_roofline(step, *args, target=TARGET, cache=False, min_coverage=50)
    assert report.summary["flops"] == pytest.approx(MATMUL_FLOPS / 4, rel=0.02)


def test_in_shardings_place_plain_arguments_as_jit_does():
    """``analyze(step, *specs, jit_kwargs={"in_shardings": ...})`` on a target: the arguments
    are jit's to place, as in the user's own ``jax.jit(step, in_shardings=...).lower(*specs)``."""
    auto = mesh(jax.sharding.AxisType.Auto)
    shardings = (NamedSharding(auto, P("data")), NamedSharding(auto, P()))
    x, w = S((B, D), jnp.float32), S((D, F), jnp.float32)

    def step(x, w):
        return jnp.tanh(x @ w)

    report = analyze(step, x, w, target=TARGET, cache=False, jit_kwargs={"in_shardings": shardings})
    compiled = jax.jit(step, in_shardings=shardings).lower(x, w).compile()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    assert report.summary["flops"] == pytest.approx(cost["flops"], rel=0.01)
    assert report.summary["flops"] == pytest.approx(2 * B * D * F / 2, rel=0.02)
    arguments = compiled.memory_analysis().argument_size_in_bytes
    assert report.summary["memory"]["arguments_bytes"] == arguments
    inputs = [b for b in report.summary["memory"]["largest"] if b["kind"] == "parameter"]
    assert sum(b["bytes"] for b in inputs) == arguments == (B * D // 2 + D * F) * 4
