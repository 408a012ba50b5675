"""Compile-only targets: every supported target compiles a real program on this CPU-only machine.

Nothing here is skipped: a missing libtpu or CUDA plugin must fail the suite (it installs both).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


from hlo_roofline import targets as T  # noqa: E402,I001  (first: it sets the environment jax reads)

import jax  # noqa: E402  (after targets: it must set its environment first)
import jax.numpy as jnp  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from hlo_roofline import chips  # noqa: E402

# spec -> (canonical spec, platform, chip, number of devices, device_kind)
CASES = {
    "v5e:2x2": ("v5e:2x2", "tpu", "v5e", 4, "TPU v5 lite"),
    "v5p:2x2x1": ("v5p:2x2x1", "tpu", "v5p", 4, "TPU v5"),
    "v6e:2x2": ("v6e:2x2", "tpu", "v6e", 4, "TPU v6 lite"),
    "7x:2x2x1": ("7x:2x2x1", "tpu", "7x", 8, "TPU7x"),
    "v4:2x2x1": ("v4:2x2x1", "tpu", "v4", 4, "TPU v4"),  # megacore: one device a chip
    "h100:1x1x8": ("h100-sxm:1x1x8", "cuda", "h100-sxm", 8, "NVIDIA H100 80GB HBM3"),
    "h100": ("h100-sxm:1x1x1", "cuda", "h100-sxm", 1, "NVIDIA H100 80GB HBM3"),
    "a100": ("a100-80gb:1x1x1", "cuda", "a100-80gb", 1, "NVIDIA A100-SXM4-80GB"),
    "b200": ("b200:1x1x1", "cuda", "b200", 1, "NVIDIA B200"),
    "h100:4x2x8": ("h100-sxm:4x2x8", "cuda", "h100-sxm", 64, "NVIDIA H100 80GB HBM3"),
}


@pytest.mark.parametrize("spec", list(CASES))
def test_compile_only(spec: str) -> None:
    canonical, platform, chip, n, kind = CASES[spec]
    target = T.parse_target(spec)
    assert (target.spec, target.platform, target.chip) == (canonical, platform, chip)

    devs = T.devices(spec)
    assert len(devs) == n
    assert {d.platform for d in devs} == {"tpu" if platform == "tpu" else "gpu"}
    assert {d.device_kind for d in devs} == {kind}

    mesh = T.make_mesh(spec)
    assert mesh.devices.size == n and mesh.axis_names == ("data",)
    x = jax.ShapeDtypeStruct((8 * n, 128), jnp.float32, sharding=NamedSharding(mesh, P("data")))
    compiled = jax.jit(lambda x: jnp.tanh(x @ x.T).sum()).lower(x).compile()
    text = compiled.as_text()
    assert text.startswith("HloModule ")
    assert "ENTRY" in text
    if n > 1:
        assert f"num_partitions={n}" in text
    if platform == "tpu":
        assert ":T(" in text  # TPU tiled layouts: this really is TPU-optimized HLO


def test_topology_is_cached() -> None:
    assert T.get_topology("v5e:2x2") is T.get_topology("v5e")
    assert T.get_topology("h100") is T.get_topology("h100-sxm:1x1x1")


def test_multi_axis_mesh_v4_and_7x() -> None:
    """TPU7x exposes 2 devices per chip; a v4 chip is one device (megacore, as JAX runs v4 and
    as the chip database judges it: MaxText's v4-128 is 64 devices)."""
    mesh = T.make_mesh("7x:2x2x1", (2, 4), ("data", "model"))
    assert mesh.devices.shape == (2, 4)
    with pytest.raises(ValueError, match="needs 4 devices"):
        T.make_mesh("7x:2x2x1", (4,), ("data",))
    mesh = T.make_mesh("v4:2x2x1", (2, 2), ("data", "model"))
    assert mesh.devices.shape == (2, 2)
    assert len(T.devices("v4:4x4x4")) == 64 == chips.get("v4").devices_per_chip * 64
    with pytest.raises(ValueError, match="needs 8 devices; v4:2x2x1 has 4"):
        T.make_mesh("v4:2x2x1", (8,), ("data",))


def test_unknown_target_lists_close_matches() -> None:
    with pytest.raises(T.TargetError) as err:
        T.parse_target("v5x:2x2")
    message = str(err.value)
    assert "v5e" in message and "v5p" in message and "Did you mean" in message
    assert isinstance(err.value, ValueError)


def test_chip_without_a_target_says_so() -> None:
    """H200 is in the chip database but no packaged target config compiles for it."""
    with pytest.raises(T.TargetError, match="no compile-only target produces 'h200'") as err:
        T.parse_target("h200")
    assert "h100-sxm:1x1x1" in str(err.value)


@pytest.mark.parametrize("spec", ["v5e:2x", "h100:8", "h100:1x8", "", "v5e:x", "v5e:2x2:1"])
def test_bad_topology_string(spec: str) -> None:
    with pytest.raises(T.TargetError):
        T.parse_target(spec)


@pytest.mark.parametrize(
    ("spec", "valid"),
    [
        ("h100:1x1x0", "1x1x8"),  # no GPU
        ("h100:1x1x16", "1x1x8"),  # more GPUs per host than an NVLink domain
        ("v5e:3x3", "16x16"),  # libtpu 0.0.50 would build it: no such slice exists
        ("v5e:2x2x2", "16x16"),  # v5e is a 2D torus (libtpu builds 8 chips from it)
        ("v5e:32x32", "16x16"),  # beyond the largest v5e pod (256 chips)
        ("v6e:2x2x1", "16x16"),
        ("v5p:2x2", "4x4x4"),  # v5p is a 3D torus
        ("v5p:3x4x4", "4x4x4"),
        ("7x:0x2x2", "4x4x4"),
    ],
)
def test_slice_shapes_that_do_not_exist_list_the_valid_ones(spec: str, valid: str) -> None:
    with pytest.raises(T.TargetError, match=r"Valid .* shapes") as err:
        T.parse_target(spec)
    assert valid in str(err.value)


def test_largest_slices_parse() -> None:
    assert T.parse_target("v5e:16x16").topology == "16x16"
    assert T.parse_target("v5p:16x20x28").topology == "16x20x28"  # chips.md: the largest v5p slice
    assert T.parse_target("h100:4x2x8").topology == "4x2x8"


def test_libtpu_decides_on_single_chip_slices() -> None:
    """A one-chip v5e slice exists (v5litepod-1); libtpu 0.0.42 cannot build it compile-only
    ("not divisible by chips_per_host_bounds 2x2x1"), libtpu 0.0.50 can. Both answers hold."""
    libtpu = tuple(int(p) for p in importlib.metadata.version("libtpu").split(".")[:3])
    if libtpu < (0, 0, 50):
        with pytest.raises(T.TargetError, match=r"libtpu .* rejected .* Valid v5e shapes"):
            T.get_topology("v5e:1x1")
    else:
        assert len(T.get_topology("v5e:1x1").devices) == 1


def test_aliases() -> None:
    assert T.parse_target("TPU7x:2x2x1").spec == "7x:2x2x1"
    assert T.parse_target("tpu7x").topology_name == "TPU7x:2x2x1"
    assert T.parse_target("A100:1x1x2").spec == "a100-80gb:1x1x2"
    # Any name the chip database knows, jax device_kind included.
    assert T.parse_target("TPU v5 lite:2x2").spec == "v5e:2x2"
    assert T.parse_target("v5 lite").spec == "v5e:2x2"
    assert T.parse_target("NVIDIA H100 80GB HBM3").spec == "h100-sxm:1x1x1"


def test_gpu_loader_drops_unknown_fields() -> None:
    """Fields newer than this jaxlib's proto are stripped (named on stderr only) and retried."""
    config = T.gpu_target_config("h100-sxm")
    config = config.replace(
        "  core_count: 132",
        "  core_count: 132\n  some_future_scalar_field: 4096\n"
        '  some_future_block { a: 1 b { c: "}" } }',
    )
    config += '\nfuture_top_level_field: "x"\n'
    topo, dropped = T.create_gpu_topology(config, "1x1x2")
    assert dropped == [
        "some_future_scalar_field",
        "some_future_block",
        "future_top_level_field",
    ]
    assert len(topo.devices) == 2
    assert topo.devices[0].device_kind == "NVIDIA H100 80GB HBM3"


def test_gpu_loader_reports_other_errors() -> None:
    with pytest.raises(T.TargetUnavailableError, match="could not create CUDA topology"):
        T.create_gpu_topology("gpu_device_info { core_count: }", "1x1x1")


def test_strip_field() -> None:
    text = 'a { b: 1  # b { in a comment\n  c { d: "x}" } }\nc: 2\ne: 3'
    assert T._strip_field(text, "c").split() == ["a", "{", "b:", "1", "}", "e:", "3"]


def test_packaged_gpu_configs_cite_sources() -> None:
    """Each top-level field, each gpu_device_info field and each rate has a comment line right above
    it naming its source (a block's comment covers its sub-fields)."""
    for chip in ("h100-sxm", "a100-80gb", "b200"):
        lines = T.gpu_target_config(chip).splitlines()
        blocks: list[str] = []  # names of the enclosing blocks
        for i, line in enumerate(lines):
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            if stripped == "}":
                blocks.pop()
                continue
            name = stripped.split()[0].rstrip(":")
            if blocks in ([], ["gpu_device_info"]) or name == "rate_infos":
                assert lines[i - 1].strip().startswith("#"), f"{chip}: no source for {stripped!r}"
            if stripped.endswith("{"):
                blocks.append(name)
        assert blocks == []


def test_missing_libtpu_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "libtpu" else real(name, *a)
    )
    with pytest.raises(T.TargetUnavailableError, match="pip install 'hlo_roofline\\[tpu\\]'"):
        T.get_topology("v6e:4x4")


# A user's script: jax is imported and used before hlo_roofline, with no environment variable set.
JAX_FIRST = """
import sys
import jax, jax.numpy as jnp
print(float(jnp.ones(3).sum()))
print("--- hlo_roofline from here ---", file=sys.stderr, flush=True)
import hlo_roofline
x = jax.ShapeDtypeStruct((256, 256), jnp.bfloat16)
for how in ({"target": "h100"}, {"chip": "a100"}, {"target": "v5e"}, {"chip": "b200"}):
    report = hlo_roofline.analyze(lambda x: x @ x, x, cache=False, **how)
    print(report.chip, report.summary["compiled_for"], report.ops["flops"].max())
"""


def test_gpu_and_tpu_targets_work_after_the_user_started_jax() -> None:
    """JAX started its backends first (the CUDA plugin failed its library check and did not
    register): every target still compiles, and nothing hlo_roofline does prints to stderr."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in ("JAX_PLATFORMS", "JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "ALLOW_MULTIPLE_LIBTPU_LOAD")
        and not k.startswith("TPU_")
    }
    done = subprocess.run(
        [sys.executable, "-c", JAX_FIRST], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines[0] == "3.0"
    rows = [line.split() for line in lines[1:]]
    assert [r[:2] for r in rows] == [
        ["h100-sxm", "h100-sxm:1x1x1"],
        ["a100-80gb", "a100-80gb:1x1x1"],
        ["v5e", "v5e:2x2"],
        ["b200", "b200:1x1x1"],
    ]
    assert {float(r[2]) for r in rows} == {2 * 256**3}  # the matmul, counted alike everywhere
    ours = done.stderr.partition("--- hlo_roofline from here ---")[2]
    assert ours.strip() == "", ours


def test_tpu_topology_starts_quietly_without_a_tpu():
    """libtpu would print a page of metadata-server errors on a machine without a TPU."""
    code = "import hlo_roofline.targets as t; print(len(t.devices('v5e:2x2')))"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPU_")}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "4"
    assert "could not determine" not in done.stderr and "E0000" not in done.stderr, done.stderr
