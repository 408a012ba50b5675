"""Compile-only targets: TPU and NVIDIA GPU topologies on a machine without accelerators.

A target string names a chip and a topology::

    "v5e:2x2"  "v5p:2x2x1"  "v6e:2x2"  "7x:2x2x1"  "v4:2x2x1"      TPU (libtpu's own topology names)
    "h100"  "h100:1x1x8"  "a100"  "b200"  "h100:4x2x8"              NVIDIA GPU

A GPU topology is ``<partitions>x<hosts per partition>x<devices per host>`` (default ``1x1x1``).
A bare TPU chip (``"v5e"``) uses the smallest topology libtpu accepts for it.

Typical use::

    from hlo_roofline.targets import make_mesh
    mesh = make_mesh("h100:1x1x8", (8,), ("data",))
    x = jax.ShapeDtypeStruct((1024, 512), jnp.bfloat16, sharding=NamedSharding(mesh, P("data")))
    text = jax.jit(f).lower(x).compile().as_text()

Environment: the CUDA plugin validates the locally installed CUDA libraries when JAX first
initialises its backends and, on a machine without them, silently never registers itself ("topology
not implemented for cuda"). Importing this module therefore sets
``JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1`` (unless already set). That variable only skips the
library-version check, so unlike ``JAX_PLATFORMS=cpu`` it does not hide a real GPU. It must be in
effect before anything initialises JAX's backends (the first ``jax.devices()`` or ``jit``), so
import this module early, or export ``JAX_PLATFORMS=cpu`` (which also skips the check and keeps
libtpu from probing for local TPUs). If it comes too late, ``get_topology`` raises
``TargetUnavailableError`` saying so.
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import logging
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import jax
import numpy as np
from jax.experimental import topologies

import hlo_roofline._jax_env  # noqa: F401  (before jax: sets the environment it reads)

__all__ = [
    "TargetError",
    "TargetSpec",
    "TargetUnavailableError",
    "create_gpu_topology",
    "devices",
    "get_topology",
    "gpu_target_config",
    "known_targets",
    "make_mesh",
    "parse_target",
]

log = logging.getLogger(__name__)


class TargetError(ValueError):
    """An unknown or malformed target string."""


class TargetUnavailableError(RuntimeError):
    """The target is valid but this environment cannot compile for it (missing package, ...)."""


@dataclass(frozen=True)
class _Chip:
    key: str  # our chip key: "v5e", "h100-sxm"
    platform: str  # "tpu" | "cuda"
    default_topology: str
    libtpu_name: str = ""  # TPU only: the chip name libtpu expects


_CHIPS: dict[str, _Chip] = {
    c.key: c
    for c in [
        _Chip("v4", "tpu", "2x2x1", "v4"),
        _Chip("v5e", "tpu", "2x2", "v5e"),
        _Chip("v5p", "tpu", "2x2x1", "v5p"),
        _Chip("v6e", "tpu", "2x2", "v6e"),
        _Chip("7x", "tpu", "2x2x1", "TPU7x"),
        _Chip("h100-sxm", "cuda", "1x1x1"),
        _Chip("a100-80gb", "cuda", "1x1x1"),
        _Chip("b200", "cuda", "1x1x1"),
    ]
}

# Accepted spellings (lower case) -> chip key.
_ALIASES: dict[str, str] = {
    **{k: k for k in _CHIPS},
    "tpu7x": "7x",
    "ironwood": "7x",
    "tpuv4": "v4",
    "tpuv5e": "v5e",
    "v5litepod": "v5e",
    "tpuv5p": "v5p",
    "tpuv6e": "v6e",
    "trillium": "v6e",
    "h100": "h100-sxm",
    "h100sxm": "h100-sxm",
    "a100": "a100-80gb",
    "a100-80g": "a100-80gb",
}

_TPU_TOPOLOGY = re.compile(r"^\d+(x\d+){1,2}$")
_GPU_TOPOLOGY = re.compile(r"^\d+x\d+x\d+$")


@dataclass(frozen=True)
class TargetSpec:
    """A parsed target. ``spec`` is canonical (``"h100" -> "h100-sxm:1x1x1"``)."""

    spec: str
    platform: str  # "tpu" | "cuda"
    chip: str  # "v5e", "7x", "h100-sxm", "a100-80gb", "b200"
    topology: str  # "2x2", "2x2x1", "1x1x8"

    @property
    def topology_name(self) -> str:
        """The name handed to ``get_topology_desc`` (libtpu spells TPU7x ``TPU7x``)."""
        if self.platform == "tpu":
            return f"{_CHIPS[self.chip].libtpu_name}:{self.topology}"
        return self.topology

    def __str__(self) -> str:
        return self.spec


def known_targets() -> list[str]:
    """Example target strings, one per chip (default topology)."""
    return [f"{c.key}:{c.default_topology}" for c in _CHIPS.values()]


def parse_target(spec: str | TargetSpec) -> TargetSpec:
    """Parse ``"chip[:topology]"``; raise ``TargetError`` with close matches for unknown chips."""
    if isinstance(spec, TargetSpec):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise TargetError(f"target must be a non-empty string like 'v5e:2x2', got {spec!r}")
    name, _, topo = spec.strip().partition(":")
    key = _ALIASES.get(name.lower().replace("_", "-"))
    if key is None:
        key = _ALIASES.get(name.lower().replace("_", "").replace("-", ""))
    if key is None:
        close = difflib.get_close_matches(name.lower(), _ALIASES, n=4, cutoff=0.5)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise TargetError(
            f"unknown target chip {name!r} in {spec!r}.{hint} "
            f"Known targets: {', '.join(known_targets())}."
        )
    chip = _CHIPS[key]
    topo = (topo or chip.default_topology).lower()
    pattern = _TPU_TOPOLOGY if chip.platform == "tpu" else _GPU_TOPOLOGY
    if not pattern.match(topo):
        want = (
            "like 2x2 or 2x2x1"
            if chip.platform == "tpu"
            else "<partitions>x<hosts per partition>x<devices per host>, e.g. 1x1x8"
        )
        raise TargetError(f"bad topology {topo!r} in {spec!r}: expected {want}")
    return TargetSpec(f"{key}:{topo}", chip.platform, key, topo)


# --------------------------------------------------------------------------------------------------
# GPU target configs


def gpu_target_config(chip: str) -> str:
    """The packaged ``GpuTargetConfigProto`` text for a GPU chip key (``"h100-sxm"``)."""
    path = Path(__file__).parent / "data" / "gpu" / f"{chip}.txtpb"
    try:
        return path.read_text()
    except FileNotFoundError:
        raise TargetError(f"no GPU target config for chip {chip!r}") from None


_REJECTED_FIELD = re.compile(
    r'has no field named "(\w+)"|Unknown enumeration value of "\w*" for field "(\w+)"'
)


def create_gpu_topology(
    config_text: str, topology: str, max_retries: int = 20
) -> tuple[topologies.TopologyDescription, list[str]]:
    """Create a deviceless CUDA topology; returns it and the config fields that had to be dropped.

    Why the retry loop: a field newer than this jaxlib's proto fails the whole parse, and the
    field's name is only printed by the C++ logger on stderr. So fd 2 is captured while creating the
    topology, a field named in ``has no field named "X"`` (or a bad enum value for field "X") is
    removed from the text, and the call is retried. Dropped fields are logged as warnings.
    """
    _require_cuda_plugin()
    dropped: list[str] = []
    text = config_text
    for _ in range(max_retries + 1):
        try:
            with _captured_stderr() as captured:
                topo = topologies.get_topology_desc(
                    platform="cuda", target_config=text, topology=topology
                )
        except NotImplementedError as e:
            raise TargetUnavailableError(_CUDA_NOT_REGISTERED) from e
        except Exception as e:
            stderr = captured.get("text", "")
            m = _REJECTED_FIELD.search(stderr)
            field = m and (m.group(1) or m.group(2))
            if not field or field in dropped:
                detail = f"\nXLA log:\n{stderr.strip()}" if stderr.strip() else ""
                raise TargetUnavailableError(
                    f"could not create CUDA topology {topology!r}: {e}{detail}"
                ) from e
            log.warning("GPU target config: dropping field %r unknown to this jaxlib", field)
            dropped.append(field)
            text = _strip_field(text, field)
            continue
        return topo, dropped
    raise TargetUnavailableError(f"GPU target config still rejected after dropping {dropped}")


class _captured_stderr:
    """Redirect fd 2 (where XLA's C++ logger writes) to a temp file; text lands in the dict."""

    def __enter__(self) -> dict[str, str]:
        self._out: dict[str, str] = {}
        self._tmp = tempfile.TemporaryFile(mode="w+b")
        self._saved = os.dup(2)
        os.dup2(self._tmp.fileno(), 2)
        return self._out

    def __exit__(self, *exc: object) -> None:
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._tmp.seek(0)
        self._out["text"] = self._tmp.read().decode(errors="replace")
        self._tmp.close()


def _strip_comments(text: str) -> str:
    """Drop ``#`` comments (outside quoted strings) so a field name in a comment is not matched."""
    out = []
    for line in text.splitlines():
        in_str, quote, cut = False, "", len(line)
        for i, ch in enumerate(line):
            if in_str:
                if ch == quote and line[i - 1] != "\\":
                    in_str = False
            elif ch in "\"'":
                in_str, quote = True, ch
            elif ch == "#":
                cut = i
                break
        out.append(line[:cut])
    return "\n".join(out)


def _strip_field(text: str, field: str) -> str:
    """Remove every occurrence of ``field: scalar`` or ``field { ... }`` from text-format proto."""
    text = _strip_comments(text)
    scalar = re.compile(rf'\b{field}\s*:\s*("(?:[^"\\]|\\.)*"|[^\s{{}}]+)')
    block = re.compile(rf"\b{field}\s*:?\s*\{{")
    while m := block.search(text):
        depth, end = 1, len(text)
        for tok in re.finditer(r'"(?:[^"\\]|\\.)*"|[{}]', text[m.end() :]):
            depth += {"{": 1, "}": -1}.get(tok.group(), 0)  # quoted strings count 0
            if depth == 0:
                end = m.end() + tok.end()
                break
        text = text[: m.start()] + text[end:]
    return scalar.sub("", text)


# --------------------------------------------------------------------------------------------------
# Topologies, devices, meshes

_CUDA_NOT_REGISTERED = (
    "JAX's CUDA plugin is installed but not registered. On a machine without CUDA libraries it "
    "only registers if JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1 or JAX_PLATFORMS=cpu is set before JAX "
    "initialises its backends: import hlo_roofline.targets before the first jax.devices()/jit, "
    "or export JAX_PLATFORMS=cpu."
)


def _require_cuda_plugin() -> None:
    if importlib.util.find_spec("jax_plugins.xla_cuda13") is None:
        raise TargetUnavailableError(
            "NVIDIA targets need JAX's CUDA plugin (no CUDA libraries, no GPU): "
            "pip install 'hlo_roofline[gpu]'  "
            "(jax-cuda13-plugin==0.10.2, nvidia-cuda-nvcc, nvidia-nvvm)"
        )


def _require_libtpu() -> None:
    if importlib.util.find_spec("libtpu") is None:
        raise TargetUnavailableError(
            "TPU targets need libtpu (no TPU needed): pip install 'hlo_roofline[tpu]'  "
            "(libtpu==0.0.42.*, the version jax 0.10.2 pins)"
        )


def get_topology(spec: str | TargetSpec) -> topologies.TopologyDescription:
    """The deviceless topology for a target (cached: creating one loads libtpu or the plugin)."""
    return _topology(parse_target(spec))


@functools.cache
def _topology(target: TargetSpec) -> topologies.TopologyDescription:
    if target.platform == "cuda":
        topo, _ = create_gpu_topology(gpu_target_config(target.chip), target.topology)
        return topo
    _require_libtpu()
    try:
        return topologies.get_topology_desc(target.topology_name, "tpu")
    except Exception as e:
        raise TargetError(f"libtpu rejected target {target.spec!r}: {e}") from e


def devices(spec: str | TargetSpec) -> list[jax.Device]:
    """The target's devices (TPU v4 and TPU7x expose 2 devices per chip)."""
    return list(get_topology(spec).devices)


def make_mesh(
    spec: str | TargetSpec,
    axis_shape: Sequence[int] | None = None,
    axis_names: Sequence[str] = ("data",),
) -> jax.sharding.Mesh:
    """A mesh over all of the target's devices; default one axis ``"data"`` of every device.

    Why not always ``topologies.make_mesh``: it refuses TPU v4 (two TensorCores per chip exposed
    as devices: "requires one device per chip ('megacore' mode)"), so v4 gets a plain mesh in
    device order. TPU7x also exposes 2 devices per chip, but ``topologies.make_mesh`` handles it.
    """
    target = parse_target(spec)
    topo = get_topology(target)
    devs = topo.devices
    shape = tuple(axis_shape) if axis_shape is not None else (len(devs),)
    if len(shape) != len(axis_names):
        raise ValueError(f"axis_shape {shape} and axis_names {tuple(axis_names)} differ in length")
    if int(np.prod(shape)) != len(devs):
        need = int(np.prod(shape))
        raise ValueError(f"mesh {shape} needs {need} devices; {target.spec} has {len(devs)}")
    if target.chip == "v4":
        return jax.sharding.Mesh(np.array(devs).reshape(shape), tuple(axis_names))
    return topologies.make_mesh(topo, shape, tuple(axis_names))
