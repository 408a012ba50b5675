"""The extras stay out of the user's way: ``[tpu]`` asks for libtpu alone, from the version the
oldest jax declares with no upper pin (``jax[tpu]`` pinned libtpu exactly and downgraded a newer
one); ``[gpu]`` is separate; CI's constraints pin both ends exactly. And the CUDA plugin's message:
exactly when it prints, and what silences it (README.md, "JAX versions").
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import tomllib

import pytest
from conftest import ROOT
from packaging.requirements import Requirement
from packaging.version import Version

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
EXTRAS = {name: [Requirement(r) for r in reqs] for name, reqs in PROJECT["optional-dependencies"].items()}


def _constraints(which: str) -> dict[str, str]:
    pins = {}
    for line in (ROOT / ".ci" / f"constraints-{which}.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[name.strip()] = version.strip()
    return pins


def test_tpu_extra_is_libtpu_with_a_floor_and_no_ceiling():
    (libtpu,) = EXTRAS["tpu"]
    assert libtpu.name == "libtpu" and not libtpu.extras and libtpu.marker is None
    operators = {spec.operator for spec in libtpu.specifier}
    assert operators == {">="}, libtpu  # no ==, ~=, <, <=: a newer libtpu is never downgraded
    for version in ("0.0.52", "0.0.60", "1.0"):  # newer than any jax declared when written
        assert Version(version) in libtpu.specifier


@pytest.mark.parametrize("which", ["oldest", "newest"])
def test_constraints_pin_exact_versions_the_extras_accept(which):
    pins = _constraints(which)
    assert pins and all(v and "*" not in v and "," not in v for v in pins.values()), pins
    (libtpu,) = EXTRAS["tpu"]
    assert Version(pins["libtpu"]) in libtpu.specifier
    jax = next(r for r in (Requirement(d) for d in PROJECT["dependencies"]) if r.name == "jax")
    assert Version(pins["jax"]) in jax.specifier


def test_the_floor_is_the_libtpu_of_the_oldest_jax():
    """The oldest constraints hold jax 0.10.2 with the libtpu it declares (``libtpu==0.0.42.*``):
    the extra's floor is that release, so the oldest supported jax can always resolve it."""
    (libtpu,) = EXTRAS["tpu"]
    (floor,) = (Version(spec.version) for spec in libtpu.specifier)
    oldest = Version(_constraints("oldest")["libtpu"])
    assert floor <= oldest and floor.release[:3] == oldest.release[:3]


def test_gpu_extra_is_separate_from_tpu():
    tpu, gpu = ({r.name for r in EXTRAS[name]} for name in ("tpu", "gpu"))
    assert not tpu & gpu
    assert "libtpu" not in gpu and not any("cuda" in name for name in tpu)


def test_the_installed_libtpu_satisfies_the_extra():
    if not _installed("libtpu"):
        pytest.skip("no libtpu installed")
    (libtpu,) = EXTRAS["tpu"]
    assert Version(importlib.metadata.version("libtpu")) in libtpu.specifier


# -- the CUDA plugin's message ---------------------------------------------------------------------

CUDNN_MESSAGE = "Unable to load cuDNN"
# What the package and the test set-up put in the environment; the user's programs have none.
OURS = ("JAX_PLATFORMS", "JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "ALLOW_MULTIPLE_LIBTPU_LOAD",
        "TPU_ACCELERATOR_TYPE", "TPU_WORKER_HOSTNAMES")  # fmt: skip
START = "import jax, jax.numpy as jnp; print(float(jnp.ones(3).sum()))"


def _run(code: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in OURS}
    done = subprocess.run(
        [sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip().endswith("3.0"), done.stderr[-2000:]
    return done.stderr


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is not there
        return False


@pytest.fixture(scope="module")
def plugin_without_cudnn():
    if not _installed("jax_plugins.xla_cuda13"):
        pytest.skip("the CUDA plugin ([gpu]) is not installed")
    if _installed("nvidia.cudnn"):
        pytest.skip("cuDNN is installed: the plugin's check passes")


def test_the_cudnn_message_prints_at_backend_start_when_no_platform_is_named(plugin_without_cudnn):
    """With [gpu] installed and no cuDNN, any JAX program that starts its backends without naming
    a platform prints the plugin's traceback (JAX discovers every installed plugin), and still runs
    on the CPU. Importing jax alone does not start the backends."""
    assert CUDNN_MESSAGE in _run(START)
    assert CUDNN_MESSAGE not in _run("import jax, jax.numpy as jnp; print(3.0)")


@pytest.mark.parametrize(
    ("how", "code", "env"),
    [
        ("JAX_PLATFORMS=cpu", START, {"JAX_PLATFORMS": "cpu"}),
        ("jax.config", "import jax; jax.config.update('jax_platforms', 'cpu'); " + START, {}),
        ("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", START, {"JAX_SKIP_CUDA_CONSTRAINTS_CHECK": "1"}),
        ("import hlo_roofline first", "import hlo_roofline; " + START, {}),
    ],
)
def test_what_silences_the_cudnn_message(plugin_without_cudnn, how, code, env):
    assert CUDNN_MESSAGE not in _run(code, **env), how


def test_a_gpu_target_without_the_plugin_says_how_to_install_it(monkeypatch):
    """With [tpu] alone there is no ``jax_plugins`` package at all: a GPU target is a clear
    TargetUnavailableError naming the extra, not a ModuleNotFoundError."""
    from hlo_roofline import targets

    real = importlib.util.find_spec

    def no_plugins(name, *args, **kwargs):
        if name == "jax_plugins" or name.startswith("jax_plugins."):
            raise ModuleNotFoundError(f"No module named {name.split('.')[0]!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", no_plugins)
    with pytest.raises(targets.TargetUnavailableError, match=r"hlo_roofline\[gpu\]"):
        targets._require_cuda_plugin()
