"""A target string is read once per call: ``analyze``, the CLI's ``analyze`` command and an
explorer candidate parse it into one :class:`~hlo_roofline.targets.Target` and pass that object to
placement, the compile cache's key and the unsharded warning (issue 44: it was read 6 times per
``analyze``, 7 from the CLI)."""

from __future__ import annotations

import concurrent.futures
import warnings

import jax
import jax.numpy as jnp
import pytest
from click.testing import CliRunner
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import hlo_roofline
from hlo_roofline import api, cli, explorer, targets

TARGET = "v5e:2x2"  # four devices, the topology named: every reader of the target runs


@pytest.fixture
def parses(monkeypatch) -> list[str]:
    """The strings ``targets`` parses, in order (its one string reader, counted)."""
    seen: list[str] = []
    original = targets._parse

    def counted(spec: str) -> targets.Target:
        seen.append(spec)
        return original(spec)

    monkeypatch.setattr(targets, "_parse", counted)
    return seen


def matmul(x, w):
    return x @ w


SHAPES = (
    jax.ShapeDtypeStruct((256, 128), jnp.float32),
    jax.ShapeDtypeStruct((128, 64), jnp.float32),
)


def test_analyze_parses_its_target_once(parses, tmp_path):
    """Unsharded on four devices: the cache key, both placements and the unsharded warning all
    read the target, from the one object."""
    with pytest.warns(api.UnshardedProgramWarning):
        report = hlo_roofline.analyze(matmul, *SHAPES, target=TARGET, cache=tmp_path)
    assert parses == [TARGET]
    assert report.summary["compiled_for"] == "v5e:2x2"
    parses.clear()
    with pytest.warns(api.UnshardedProgramWarning):  # a cache hit: the same
        hlo_roofline.analyze(matmul, *SHAPES, target=TARGET, cache=tmp_path)
    assert parses == [TARGET]


def test_a_parsed_target_is_never_parsed_again(parses, tmp_path):
    target = targets.parse_target("v5e:2x2")
    mesh = targets.make_mesh(target, (4,), ("data",))
    x = jax.ShapeDtypeStruct((256, 128), jnp.float32, sharding=NamedSharding(mesh, P("data")))
    w = jax.ShapeDtypeStruct((128, 64), jnp.float32, sharding=NamedSharding(mesh, P()))
    with warnings.catch_warnings():
        warnings.simplefilter("error", api.UnshardedProgramWarning)  # sharded: no warning
        report = hlo_roofline.analyze(matmul, x, w, target=target, cache=tmp_path)
    assert parses == ["v5e:2x2"]  # parse_target above, and nothing after
    assert report.summary["compiled_for"] == target.spec


def test_the_cli_analyze_command_parses_its_target_once(parses, tmp_path, monkeypatch):
    (tmp_path / "steps.py").write_text(
        "import jax, jax.numpy as jnp\n\n"
        "def step():\n"
        "    x = jax.ShapeDtypeStruct((256, 128), jnp.float32)\n"
        "    w = jax.ShapeDtypeStruct((128, 64), jnp.float32)\n"
        "    return (lambda x, w: x @ w), (x, w)\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HLO_ROOFLINE_CACHE_DIR", str(tmp_path / "cache"))
    result = CliRunner().invoke(cli.main, ["analyze", "steps.py:step", "--target", "v5e:2x2"])
    assert result.exit_code == 0, result.output
    assert parses == ["v5e:2x2"]


def make_matmul_step(mesh):
    x = jax.ShapeDtypeStruct((256, 128), jnp.float32, sharding=NamedSharding(mesh, P("data")))
    w = jax.ShapeDtypeStruct((128, 64), jnp.float32, sharding=NamedSharding(mesh, P()))
    return matmul, (x, w), {}


def test_an_explorer_candidate_parses_its_target_once(parses, tmp_path):
    """explore() parses the target; its candidates, each a mesh and a compile in a worker (here a
    thread, so its parses are counted too), take the object."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        result = explorer.explore(
            make_matmul_step, TARGET, axes=("data",), executor=pool, cache=tmp_path,
            progress=False,
        )  # fmt: skip
    assert list(result.table["status"]) == [explorer.STATUS_OK]
    assert parses == [TARGET]


@pytest.mark.parametrize("spec", ["v5e", "v5e:2x2"])
def test_a_string_and_the_target_parsed_from_it_warn_alike(spec, tmp_path):
    """Whether the target chose its topology travels on the Target: ``analyze`` given the string
    and given ``parse_target`` of it (as the CLI and the explorer give it) warn alike about an
    unsharded program, only where the topology was named."""
    named = targets.parse_target(spec).named_topology
    assert named == (":" in spec)
    for target in (spec, targets.parse_target(spec)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            hlo_roofline.analyze(matmul, *SHAPES, target=target, cache=tmp_path)
        warned = [w for w in caught if issubclass(w.category, api.UnshardedProgramWarning)]
        assert bool(warned) == named, (target, [str(w.message) for w in caught])
