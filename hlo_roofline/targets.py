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

Any import order works, and no environment variable is needed: on a machine without CUDA libraries
JAX's CUDA plugin fails its library-version check and never registers; :func:`get_topology`
then registers it itself, with that check skipped (a compile needs no CUDA library), even after
JAX has started its backends.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.metadata
import importlib.util
import logging
import os
import re
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import jax
import numpy as np
from jax.experimental import topologies

import hlo_roofline._jax_env  # noqa: F401  (before jax: sets the environment it reads)
from hlo_roofline import chips
from hlo_roofline.text import one_line

__all__ = [
    "Target",
    "TargetError",
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
    """A chip that has a compile-only target, and the slice shapes that exist for it."""

    key: str  # the chip database's key: "v5e", "h100-sxm"
    platform: str  # "tpu" | "cuda"
    default_topology: str
    libtpu_name: str = ""  # TPU only: the chip name libtpu expects
    dims: int = 3  # TPU: a 2D or 3D torus; GPU: partitions x hosts x devices per host
    max_chips: int = (
        0  # TPU: the largest slice (chips.md §3); GPU: devices per host (NVLink domain)
    )
    examples: str = ""  # shapes named in error messages
    # TPU only: libtpu's chip configuration, where its default is not how JAX runs the chip. A v4
    # chip's two TensorCores are one JAX device ("megacore", as the chip database and MaxText's
    # v4-N topologies have it); libtpu's default would expose each core as a device.
    chip_config: str = ""

    def shape_error(self, dims: tuple[int, ...]) -> str | None:
        """Why ``dims`` is not a slice of this chip (None when it is one).

        TPU: 2D chips (v5e, v6e) take AxB, 3D chips AxBxC; slices are built of 2x2 hosts, so an
        axis is 1, 2, or a multiple of 4 (v5e/v6e: a power of two up to 16), and no slice exceeds
        the largest pod. GPU: every count at least 1, at most 8 GPUs per host (one NVLink domain).
        """
        if len(dims) != self.dims or min(dims) < 1:
            return "wrong number of axes or an axis below 1"
        if self.platform == "cuda":
            return None if dims[2] <= self.max_chips else f"at most {self.max_chips} GPUs per host"
        if self.dims == 2:
            ok = all(d in (1, 2, 4, 8, 16) for d in dims)
        else:
            ok = all(d in (1, 2) or d % 4 == 0 for d in dims)
        if not ok:
            return "an axis that no slice has"
        if int(np.prod(dims)) > self.max_chips:
            return f"more than the {self.max_chips} chips of the largest slice"
        return None


_TPU_2D = "1x1, 2x2, 2x4, 4x4, 4x8, 8x8, 8x16, 16x16"
_TPU_3D = "2x2x1, 2x2x2, 2x2x4, 2x4x4, 4x4x4, 4x4x8, 4x8x8, 8x8x8, ..."
_GPU = "<partitions>x<hosts per partition>x<GPUs per host>, e.g. 1x1x1, 1x1x8, 8x1x8"

_CHIPS: dict[str, _Chip] = {
    c.key: c
    for c in [
        _Chip("v4", "tpu", "2x2x1", "v4", 3, 4096, _TPU_3D, chip_config="megacore"),
        _Chip("v5e", "tpu", "2x2", "v5e", 2, 256, _TPU_2D),
        _Chip("v5p", "tpu", "2x2x1", "v5p", 3, 8960, _TPU_3D),
        _Chip("v6e", "tpu", "2x2", "v6e", 2, 256, _TPU_2D),
        _Chip("7x", "tpu", "2x2x1", "TPU7x", 3, 9216, _TPU_3D),
        _Chip("h100-sxm", "cuda", "1x1x1", dims=3, max_chips=8, examples=_GPU),
        _Chip("a100-80gb", "cuda", "1x1x1", dims=3, max_chips=8, examples=_GPU),
        _Chip("b200", "cuda", "1x1x1", dims=3, max_chips=8, examples=_GPU),
    ]
}

_SHAPE = re.compile(r"^\d+(x\d+)*$")


@dataclass(frozen=True)
class Target:
    """A resolved target: made once from its string (:func:`parse_target`) and passed as this
    object to everything that compiles, places, caches or warns for it, so none parses it again.
    ``spec`` is canonical (``"h100" -> "h100-sxm:1x1x1"``); ``str(target)`` is ``spec``."""

    spec: str
    platform: str  # "tpu" | "cuda"
    chip: str  # the chip database's key: "v5e", "7x", "h100-sxm", "a100-80gb", "b200"
    topology: str  # "2x2", "2x2x1", "1x1x8"
    # whether the string chose the topology ("v5e:2x2"), not the chip's default slice ("v5e"):
    # only a chosen multi-device target is warned about a program that shards nothing
    named_topology: bool = field(default=False, compare=False)

    @property
    def topology_name(self) -> str:
        """The name handed to ``get_topology_desc`` (libtpu spells TPU7x ``TPU7x``)."""
        if self.platform == "tpu":
            return f"{_CHIPS[self.chip].libtpu_name}:{self.topology}"
        return self.topology

    @property
    def devices(self) -> list[jax.Device]:
        """The target's devices (TPU7x exposes 2 devices per chip; a v4 chip, in megacore mode,
        one); the topology is made once per target (it loads libtpu or the CUDA plugin)."""
        return list(_topology(self).devices)

    @property
    def device_count(self) -> int:
        return len(_topology(self).devices)

    def __str__(self) -> str:
        return self.spec


def slice_shapes(chip: str | Target) -> list[tuple[int, str]]:
    """(devices, shape) of the standard slices of a chip that has a target, smallest first: TPU
    slices doubling from one host (2x2 / 2x2x1; a 2D chip also 1x1), axes up to 16; GPUs 1, 2,
    4 and 8 on a host, then whole hosts of 8. Memory advice names only these."""
    c = _CHIPS[parse_target(chip).chip]
    if c.platform == "cuda":
        shapes = [(1, 1, n) for n in (1, 2, 4)]
        shapes += [(1, 2**i, c.max_chips) for i in range(8)]
    else:
        dims = [2, 2] if c.dims == 2 else [2, 2, 1]
        shapes = [(1, 1)] if c.dims == 2 else []
        while int(np.prod(dims)) <= c.max_chips and max(dims) <= 16:
            shapes.append(tuple(dims))
            dims = sorted(dims)
            dims[0] *= 2
            dims.sort()
    return [(int(np.prod(d)), "x".join(map(str, d))) for d in shapes if c.shape_error(d) is None]


def known_targets() -> list[str]:
    """Example target strings, one per chip (default topology)."""
    return [f"{c.key}:{c.default_topology}" for c in _CHIPS.values()]


def parse_target(spec: str | Target) -> Target:
    """The :class:`Target` of ``"chip[:topology]"`` (a :class:`Target` is returned as it is);
    raise ``TargetError`` with close matches for unknown chips.

    The chip part is any name the chip database knows (key, alias or jax ``device_kind``), so
    ``"TPU v5 lite:2x2"`` and ``"v5e:2x2"`` are the same target.
    """
    if isinstance(spec, Target):
        return spec
    return _parse(spec)


def _parse(spec: str) -> Target:
    """The one place a target string is read (``tests/test_target_once.py`` counts its calls)."""
    if not isinstance(spec, str) or not spec.strip():
        raise TargetError(f"target must be a non-empty string like 'v5e:2x2', got {spec!r}")
    name, _, named = spec.strip().partition(":")
    try:
        key = chips.resolve(name)
    except chips.UnknownChipError as e:
        hint = f" Did you mean: {', '.join(e.matches)}?" if e.matches else ""
        raise TargetError(
            f"unknown target chip {name!r} in {spec!r}.{hint} "
            f"Known targets: {', '.join(known_targets())}."
        ) from None
    chip = _CHIPS.get(key)
    if chip is None:
        raise TargetError(
            f"no compile-only target produces {key!r} programs (judge another target's program "
            f"against it with chip={key!r}). Known targets: {', '.join(known_targets())}."
        )
    topo = (named or chip.default_topology).strip().lower()
    dims = tuple(int(d) for d in topo.split("x")) if _SHAPE.match(topo) else ()
    why = chip.shape_error(dims) if dims else "not of the form AxB"
    if why is not None:
        raise TargetError(
            f"bad topology {topo!r} for {key} in {spec!r} ({why}). Valid {key} shapes: "
            f"{chip.examples}"
        )
    return Target(f"{key}:{topo}", chip.platform, key, topo, named_topology=bool(named.strip()))


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
    registered_late = False
    for _ in range(max_retries + 1):
        try:
            with _captured_stderr() as captured:
                topo = topologies.get_topology_desc(
                    platform="cuda", target_config=text, topology=topology
                )
        except NotImplementedError as e:  # "topology not implemented for cuda": not registered
            if registered_late:
                raise TargetUnavailableError(_CUDA_UNREGISTERED) from e
            _register_cuda_plugin()
            registered_late = True
            continue
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


def _jax_extra(extra: str, dist: str) -> str:
    """The requirement the installed jax declares for ``dist`` in its ``extra``
    (``libtpu==0.0.50.*``), so install hints name the version that fits this jax."""
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        for req in importlib.metadata.requires("jax") or ():
            spec, _, marker = req.partition(";")
            if f'extra == "{extra}"' in marker and re.match(rf"{dist}\b", spec.strip()):
                return spec.strip().replace("<=", "==").split(",")[0]
    return dist


def _has_module(name: str) -> bool:
    """Whether ``name`` can be imported (False, not an error, when its parent package is absent:
    ``jax_plugins`` exists only once some plugin is installed)."""
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def _require_cuda_plugin() -> None:
    if not _has_module("jax_plugins.xla_cuda13"):
        raise TargetUnavailableError(
            "NVIDIA targets need JAX's CUDA plugin (no CUDA libraries, no GPU): "
            "pip install 'hlo_roofline[gpu]'  "
            f"({_jax_extra('cuda13-local', 'jax-cuda13-plugin')}, nvidia-cuda-nvcc, nvidia-nvvm; "
            f"jax {_installed('jax')} is installed)"
        )


def _require_libtpu() -> None:
    if importlib.util.find_spec("libtpu") is None:
        raise TargetUnavailableError(
            "TPU targets need libtpu (no TPU needed): pip install 'hlo_roofline[tpu]'  "
            f"(libtpu>=0.0.42: any version from the one jax 0.10.2 declares, "
            f"{_jax_extra('tpu', 'libtpu')} for jax {_installed('jax')}, to the newest)"
        )


def _installed(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "none"


_cuda_lock = threading.Lock()


def _register_cuda_plugin() -> None:
    """Make sure JAX can build CUDA topologies, whatever the user did with JAX before.

    JAX registers the plugin when it first starts its backends; on a machine without CUDA
    libraries the plugin's own library-version check fails there (JAX logs a traceback) and it
    never registers. Registering late is the plugin's own ``initialize()`` run again with that
    check skipped: it adds a backend factory and a topology factory, and the backends JAX has
    already started are left as they are.
    """
    global _cuda_registered_late
    _require_cuda_plugin()
    with _cuda_lock:
        if _cuda_registered_late:  # another thread did it meanwhile
            return
        plugin = importlib.import_module("jax_plugins.xla_cuda13")
        saved = os.environ.get(_SKIP_CHECK)
        os.environ[_SKIP_CHECK] = "1"
        try:
            with _captured_stderr():
                plugin.initialize()
        except Exception as e:
            raise TargetUnavailableError(f"JAX's CUDA plugin could not be registered: {e}") from e
        finally:
            if saved is None:
                del os.environ[_SKIP_CHECK]
            else:
                os.environ[_SKIP_CHECK] = saved
        _cuda_registered_late = True


_cuda_registered_late = False
_SKIP_CHECK = "JAX_SKIP_CUDA_CONSTRAINTS_CHECK"
_CUDA_UNREGISTERED = (
    "JAX's CUDA plugin is installed but did not register (its library was not found): "
    "reinstall 'hlo_roofline[gpu]'"
)


def get_topology(spec: str | Target) -> topologies.TopologyDescription:
    """The deviceless topology for a target (cached: creating one loads libtpu or the plugin)."""
    return _topology(parse_target(spec))


@functools.cache
def _topology(target: Target) -> topologies.TopologyDescription:
    if target.platform == "cuda":
        topo, _ = create_gpu_topology(gpu_target_config(target.chip), target.topology)
        return topo
    _require_libtpu()
    try:
        with _captured_stderr():
            config = _CHIPS[target.chip].chip_config
            options = {"chip_config_name": config} if config else {}
            return topologies.get_topology_desc(target.topology_name, "tpu", **options)
    except Exception as e:
        reason = one_line(e)
        raise TargetError(
            f"libtpu {_installed('libtpu')} rejected target {target.spec!r}: {reason}. "
            f"Valid {target.chip} shapes: {_CHIPS[target.chip].examples} (jax "
            f"{_installed('jax')} declares {_jax_extra('tpu', 'libtpu')})"
        ) from None


def devices(spec: str | Target) -> list[jax.Device]:
    """The target's devices (TPU7x exposes 2 devices per chip; a v4 chip, in megacore mode, one)."""
    return list(get_topology(spec).devices)


def make_mesh(
    spec: str | Target,
    axis_shape: Sequence[int] | None = None,
    axis_names: Sequence[str] = ("data",),
    allow_split_physical_axes: bool = False,
) -> jax.sharding.Mesh:
    """A mesh over all of the target's devices; default one axis ``"data"`` of every device.

    TPU7x exposes 2 devices per chip, which ``topologies.make_mesh`` handles; a v4 target is
    made in megacore mode (one device per chip, as JAX runs it), as that function requires.
    ``allow_split_physical_axes``: a mesh axis may take part of a torus axis (fsdp 32 × tensor 2
    on a 4x4x4), as ``mesh_utils.create_device_mesh`` and MaxText's option of that name allow.
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
    if allow_split_physical_axes:  # a mesh axis may take part of a torus axis (MaxText's option)
        from jax.experimental import mesh_utils

        grid = mesh_utils.create_device_mesh(shape, list(devs), allow_split_physical_axes=True)
        return jax.sharding.Mesh(grid, tuple(axis_names))
    return topologies.make_mesh(topo, shape, tuple(axis_names))
