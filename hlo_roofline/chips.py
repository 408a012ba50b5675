"""Chip database: the peaks a roofline compares each op against.

The numbers live in ``data/chips.toml``; every one carries a source key (see ``docs/chips.md``).
This module turns them into frozen :class:`Chip` objects::

    from hlo_roofline import chips
    v5e = chips.get("TPU v5 lite")         # jax's device_kind works as a name
    v5e.peak_flops("bf16")                 # 1.97e14 dense FLOP/s; HLO dtypes work too ("s8")
    v5e.critical_intensity("bf16")         # FLOP per HBM byte at which compute time = memory time
    chips.get("v5e", profile="book")       # the book's rounded numbers (240 instead of 240.5)

Profiles: ``"vendor"`` (the default) holds vendor primary numbers; ``"book"`` swaps in the values
*How to Scale Your Model* rounds to, so its answers can be reproduced exactly. A chip the book does
not round differently is the same in both.

Your own chips: ``load_file("my_chips.toml")`` (same schema as the built-in file, TOML or JSON) or
``register(Chip.custom("my-chip", peak_flops={"bf16": 1e15}, hbm_bandwidth=2e12))``.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
import threading
import tomllib
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

__all__ = [
    "DATA_FILE",
    "PROFILES",
    "RATE_CLASSES",
    "Chip",
    "Ici",
    "MemorySpace",
    "Rate",
    "RateFallbackWarning",
    "ScaleUp",
    "Source",
    "Sourced",
    "UnknownChipError",
    "all_chips",
    "get",
    "load_file",
    "markdown_table",
    "names",
    "rate_class",
    "register",
    "reset",
    "resolve",
    "source_table",
]

DATA_FILE = Path(__file__).parent / "data" / "chips.toml"
PROFILES = ("vendor", "book")
# Classes of arithmetic a chip publishes a peak for. int32 has no published rate anywhere; it exists
# so wide-integer HLO types fall back through fp32 instead of being mistaken for int8.
RATE_CLASSES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4", "fp4", "int32")

# Where to look, in order, when a chip publishes no rate for the class asked for. TPUs publish no
# fp16 or fp32 MXU rate (XLA runs those dots on the bf16 MXU at DEFAULT precision); TPU7x no int8.
_FALLBACKS: dict[str, tuple[str, ...]] = {
    "fp64": ("fp32", "bf16"),
    "fp32": ("bf16", "fp16"),
    "tf32": ("fp32", "bf16"),
    "bf16": ("fp16", "fp32"),
    "fp16": ("bf16", "fp32"),
    "fp8": ("fp16", "bf16", "fp32"),
    "fp4": ("fp8", "fp16", "bf16"),
    "int8": ("bf16", "fp16"),
    "int4": ("int8", "bf16"),
    "int32": ("fp32", "bf16"),
}

# HLO element types (and numpy/jax spellings) -> rate class. f8*/f4* variants are matched by prefix.
_DTYPE_CLASS = {
    "f64": "fp64", "float64": "fp64", "c128": "fp64", "complex128": "fp64",
    "f32": "fp32", "float32": "fp32", "c64": "fp32", "complex64": "fp32",
    "bf16": "bf16", "bfloat16": "bf16",
    "f16": "fp16", "float16": "fp16",
    "s8": "int8", "u8": "int8", "uint8": "int8", "pred": "int8", "bool": "int8",
    "s4": "int4", "u4": "int4", "uint4": "int4",
    "s16": "int32", "u16": "int32", "s32": "int32", "u32": "int32", "s64": "int32", "u64": "int32",
    "int16": "int32", "uint16": "int32", "uint32": "int32", "int64": "int32", "uint64": "int32",
}  # fmt: skip


def rate_class(dtype: Any) -> str:
    """Map an HLO dtype (``bf16``, ``s8``, ``f8e4m3fn``...) or numpy name to its rate class."""
    d = str(dtype).strip().lower()
    if d in RATE_CLASSES:
        return d
    if d in _DTYPE_CLASS:
        return _DTYPE_CLASS[d]
    if d.startswith(("f8", "float8")):
        return "fp8"
    if d.startswith(("f4", "float4")):
        return "fp4"
    raise ValueError(
        f"unknown dtype {dtype!r}: expected an HLO type (bf16, f32, s8, f8e4m3fn, ...) "
        f"or a rate class {RATE_CLASSES}"
    )


class UnknownChipError(KeyError, ValueError):
    """No chip has this name or alias; ``matches`` holds the closest chip keys."""

    def __init__(self, name: str, matches: list[str], known: list[str]) -> None:
        self.name, self.matches = name, matches
        hint = f" Close matches: {', '.join(matches)}." if matches else ""
        self.message = f"unknown chip {name!r}.{hint} Known chips: {', '.join(known)}."
        super().__init__(self.message)

    def __str__(self) -> str:  # KeyError would quote the message
        return self.message


class RateFallbackWarning(UserWarning):
    """A chip has no published rate for a dtype, so a related rate was used instead."""


@dataclass(frozen=True)
class Source:
    """A reference that numbers cite by key (the ``[sources]`` table)."""

    key: str
    title: str
    url: str = ""


@dataclass(frozen=True)
class Sourced:
    """Where one number came from: source keys, and a note recording any disagreement."""

    value: Any
    keys: tuple[str, ...]
    note: str = ""


@dataclass(frozen=True)
class Rate:
    """What :meth:`Chip.rate` used: a fallback is visible here instead of silently hidden."""

    flops: float
    requested: str  # rate class asked for
    used: str  # rate class whose number this is
    note: str = ""

    @property
    def fallback(self) -> bool:
        return self.requested != self.used


@dataclass(frozen=True)
class MemorySpace:
    """An on-chip memory (VMEM, SMEM, shared memory, L2, ...); capacity is per ``per`` unit."""

    name: str
    per: str  # "chip", "tensorcore", "sm" or "cu"
    count: int  # how many ``per`` units the chip has
    capacity: float | None = None  # bytes per unit
    bandwidth: float | None = None  # B/s, where published

    @property
    def total_capacity(self) -> float | None:
        return None if self.capacity is None else self.capacity * self.count


@dataclass(frozen=True)
class Ici:
    """TPU inter-chip interconnect. The book's ``W_ici`` is ``link_bidirectional`` (2 x one-way)."""

    link_oneway: float | None = None  # B/s per link, one direction
    link_bidirectional: float | None = None  # B/s per link, both directions
    links: int | None = None
    topology: str = ""  # "2D torus", "3D torus"
    max_slice_dims: tuple[int, ...] = ()
    max_slice_chips: int | None = None
    host_dims: tuple[int, ...] = ()
    chip_bidirectional: float | None = None  # GCP's "ICI bandwidth per chip": all ports, both ways
    hop_latency: float | None = None  # s, the book's T_min
    wraparound_multiple_of: int | None = None  # v4/v5p: axes that are multiples of 4 wrap
    wraparound_sizes: tuple[int, ...] = ()  # v5e/v6e: only axes of size 16 wrap

    def wraps(self, axis_size: int) -> bool | None:
        """Whether a slice axis of this size has wraparound links; None if the sources don't say."""
        if self.wraparound_multiple_of:
            return axis_size % self.wraparound_multiple_of == 0
        if self.wraparound_sizes:
            return axis_size in self.wraparound_sizes
        return None


@dataclass(frozen=True)
class ScaleUp:
    """GPU scale-up fabric (NVLink, Infinity Fabric). The book's ``W_GPU`` is ``oneway``."""

    fabric: str = ""
    topology: str = ""  # "NVSwitch", "full mesh" (a ring then gets one peer link), "bridge"
    oneway: float | None = None  # per-GPU egress, one direction, B/s
    bidirectional: float | None = None  # vendor headline figure
    links: int | None = None
    link_oneway: float | None = None  # one link (one peer on a full mesh), one direction
    domain: int | None = None  # GPUs in one scale-up domain


def _frozen(d: Mapping | None = None) -> Mapping:
    return MappingProxyType(dict(d or {}))


@dataclass(frozen=True)
class Chip:
    """One accelerator (a TPU chip or a GPU package) under one profile. Units: FLOP/s, bytes, B/s.

    ``flops`` maps rate class -> dense peak FLOP/s. ``sources`` maps a dotted field path from the
    data file (``"hbm.bandwidth"``, ``"flops.int8"``) to its :class:`Sourced` provenance.
    """

    key: str
    name: str
    kind: str  # "tpu", "gpu", or anything for user chips
    flops: Mapping[str, float]
    hbm_bandwidth: float
    hbm_capacity: float | None = None
    vendor: str = ""
    profile: str = "vendor"
    status: str = ""  # "V" vendor primary, "V*" vendor figure via a secondary source
    aliases: tuple[str, ...] = ()
    cores: Mapping[str, int] = field(default_factory=_frozen)  # {"tensorcore": 2} / {"sm": 132}
    megacore: bool | None = None  # TPUs with 2 TensorCores: do they act as one JAX device?
    mxu: tuple[int, ...] = ()
    memory: Mapping[str, MemorySpace] = field(default_factory=_frozen)
    vpu_flops: float | None = None  # vector unit, whole chip
    eup_rate: float | None = None  # transcendental unit (TPU EUP), results per second, whole chip
    vector_elements_rate: float | None = None  # elements/s a TPU vector loop passes, whole chip
    lane_reduce_rate: float | None = None  # elements/s a TPU standalone reduce folds across lanes
    fill_rate: float | None = None  # elements/s a TPU fill (broadcast of a scalar) writes, whole chip
    op_floor_s: float | None = None  # the least time any op takes (a TPU's per-op overhead)
    clock_hz: float | None = None  # core clock: converts XLA:TPU's cycle estimates to seconds
    ici: Ici | None = None
    scaleup: ScaleUp | None = None
    dcn_per_chip: float | None = None  # TPU data-centre network egress per chip, B/s
    scaleout_per_node: float | None = None  # GPU scale-out egress per node (the book's W_node)
    pcie: float | None = None  # host link per chip, direction not stated by the source
    pcie_bidirectional: float | None = None
    c2c: float | None = None  # GB200 NVLink-C2C to Grace
    host_link: str = ""
    sources: Mapping[str, Sourced] = field(default_factory=_frozen, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.flops:
            raise ValueError(f"chip {self.key!r}: needs at least one peak FLOP/s rate")
        if unknown := set(self.flops) - set(RATE_CLASSES):
            raise ValueError(f"chip {self.key!r}: unknown rate classes {sorted(unknown)}")
        if not self.hbm_bandwidth or self.hbm_bandwidth <= 0:
            raise ValueError(f"chip {self.key!r}: needs a positive hbm_bandwidth")

    def __hash__(self) -> int:  # Mapping fields are not hashable; these identify a chip well enough
        return hash((self.key, self.profile, tuple(sorted(self.flops.items())), self.hbm_bandwidth))

    # -- compute ------------------------------------------------------------------------------
    def rate(self, dtype: Any = "bf16") -> Rate:
        """The dense peak for ``dtype``, falling back to a related rate if the chip has none."""
        want = rate_class(dtype)
        for cls in (want, *_FALLBACKS.get(want, ())):
            if cls in self.flops:
                prov = self.sources.get(f"flops.{cls}")
                note = prov.note if prov else ""
                if cls != want:
                    note = f"{self.name} publishes no {want} rate; using its {cls} rate"
                return Rate(self.flops[cls], want, cls, note)
        raise ValueError(f"{self.name}: no {want} rate and no fallback among {sorted(self.flops)}")

    def peak_flops(self, dtype: Any = "bf16") -> float:
        """Dense peak FLOP/s (OP/s for integers) for an HLO dtype; warns when it falls back."""
        r = self.rate(dtype)
        if r.fallback:
            warnings.warn(r.note, RateFallbackWarning, stacklevel=2)
        return r.flops

    def has_rate(self, dtype: Any) -> bool:
        """True if the chip publishes a rate for this dtype's class (no fallback needed)."""
        return rate_class(dtype) in self.flops

    def bandwidth(self, memory: str = "hbm") -> float:
        """B/s of ``"hbm"`` or of a named on-chip memory (``"vmem"``, ``"l2"``)."""
        if memory == "hbm":
            return self.hbm_bandwidth
        space = self.memory.get(memory)
        if space is None or space.bandwidth is None:
            raise ValueError(f"{self.name}: no published bandwidth for memory {memory!r}")
        return space.bandwidth

    def critical_intensity(self, dtype: Any = "bf16", bandwidth: float | str = "hbm") -> float:
        """FLOP per byte above which an op is compute-bound: peak / bandwidth (B/s or a name)."""
        bw = self.bandwidth(bandwidth) if isinstance(bandwidth, str) else float(bandwidth)
        return self.peak_flops(dtype) / bw

    # -- devices ------------------------------------------------------------------------------
    @property
    def devices_per_chip(self) -> int | None:
        """JAX devices per chip: 2 on TPU7x (no megacore), 1 on megacore/single-core chips."""
        tcs = self.cores.get("tensorcore", 1)
        if tcs == 1 or self.megacore:
            return 1
        return tcs if self.megacore is False else None

    def per_device(self) -> Chip:
        """This chip's share per JAX device (compute, HBM and vector roofs divided evenly)."""
        n = self.devices_per_chip
        if not n or n == 1:
            return self

        def share(x: float | None) -> float | None:
            return None if x is None else x / n

        cores = {k: (v // n if k == "tensorcore" else v) for k, v in self.cores.items()}
        memory = {
            k: dataclasses.replace(m, count=cores.get(m.per, m.count)) if m.per != "chip" else m
            for k, m in self.memory.items()
        }
        return dataclasses.replace(
            self,
            name=f"{self.name} (1 of {n} devices per chip)",
            flops=_frozen({c: v / n for c, v in self.flops.items()}),
            hbm_bandwidth=self.hbm_bandwidth / n,
            hbm_capacity=share(self.hbm_capacity),
            vpu_flops=share(self.vpu_flops),
            eup_rate=share(self.eup_rate),
            vector_elements_rate=share(self.vector_elements_rate),
            lane_reduce_rate=share(self.lane_reduce_rate),
            fill_rate=share(self.fill_rate),
            dcn_per_chip=share(self.dcn_per_chip),  # the chip's DCN egress, shared
            cores=_frozen(cores),
            memory=_frozen(memory),
        )

    def source_of(self, path: str) -> Sourced:
        """Provenance of one number, by dotted path (``"hbm.bandwidth"``, ``"ici.links"``)."""
        try:
            return self.sources[path]
        except KeyError:
            raise KeyError(f"{self.name}: no sourced field {path!r}") from None

    @classmethod
    def custom(
        cls,
        name: str,
        *,
        peak_flops: Mapping[str, float],
        hbm_bandwidth: float,
        hbm_capacity: float | None = None,
        kind: str = "custom",
        aliases: Iterable[str] = (),
        source: str = "user",
        **fields: Any,
    ) -> Chip:
        """A chip from numbers given in code; ``peak_flops`` keys may be HLO dtypes.

        ``fields`` sets any other :class:`Chip` field (``vpu_flops=``, ``ici=Ici(...)``, ...).
        Pass the result to :func:`register` to make :func:`get` find it by name.
        """
        flops = {rate_class(d): float(v) for d, v in peak_flops.items()}
        prov = {f"flops.{c}": Sourced(v, (source,)) for c, v in flops.items()}
        prov["hbm.bandwidth"] = Sourced(hbm_bandwidth, (source,))
        if hbm_capacity is not None:
            prov["hbm.capacity"] = Sourced(hbm_capacity, (source,))
        return cls(
            key=fields.pop("key", None) or _slug(name),
            name=name,
            kind=kind,
            flops=_frozen(flops),
            hbm_bandwidth=float(hbm_bandwidth),
            hbm_capacity=hbm_capacity,
            aliases=tuple(aliases),
            sources=_frozen(prov),
            **fields,
        )


# -- building a Chip from the data file --------------------------------------------------------

_SECTIONS = {
    "hbm": {"capacity", "bandwidth"},
    "vpu": {"per", "flops", "elements", "fill"},
    "eup": {"per", "rate"},
    "xlu": {"per", "lane_reduce"},
    "ici": {f.name for f in dataclasses.fields(Ici) if not f.name.startswith("wraparound_")}
    | {"wraparound"},  # { multiple_of = 4 } or { sizes = [16] }
    "scaleup": {f.name for f in dataclasses.fields(ScaleUp)},
    "network": {"dcn_per_chip", "scaleout_per_node"},
    "host": {"pcie", "pcie_bidirectional", "c2c", "link"},
}
_TOP_KEYS = {"name", "kind", "vendor", "status", "aliases", "cores", "megacore", "mxu", "flops"}
_TOP_KEYS |= {"clock", "op_floor"}
_TOP_KEYS |= {"memory", "book", *_SECTIONS}


def _norm(name: str) -> str:
    return re.sub(r"[^0-9a-z]+", "", str(name).lower())


def _slug(name: str) -> str:
    return re.sub(r"[^0-9a-z]+", "-", name.lower()).strip("-")


def _merge(base: Mapping, over: Mapping) -> dict:
    """Deep-merge a profile's overrides into the chip table (a sourced leaf is replaced whole)."""
    out = dict(base)
    for k, v in over.items():
        both_tables = isinstance(v, Mapping) and isinstance(out.get(k), Mapping)
        out[k] = _merge(out[k], v) if both_tables and "source" not in v else v
    return out


def _unwrap(node: Any, path: str, prov: dict[str, Sourced], default_source: str | None) -> Any:
    """Replace sourced leaves by their values, recording provenance in ``prov``."""
    if isinstance(node, Mapping) and "source" in node:
        src = node["source"]
        keys = (src,) if isinstance(src, str) else tuple(src)
        value = node.get("value", {k: v for k, v in node.items() if k not in ("source", "note")})
        prov[path] = Sourced(value, keys, node.get("note", ""))
        return value
    if isinstance(node, Mapping):
        return {
            k: _unwrap(v, f"{path}.{k}" if path else k, prov, default_source)
            for k, v in node.items()
        }
    is_number = isinstance(node, int | float) and not isinstance(node, bool)
    if is_number or (isinstance(node, list) and any(isinstance(x, int | float) for x in node)):
        if default_source is None:
            raise ValueError(f"{path}: number {node!r} has no source")
        prov[path] = Sourced(node, (default_source,))
    return node


def _section(t: Mapping, name: str, key: str) -> dict:
    sec = dict(t.get(name, {}))
    if name in _SECTIONS and (unknown := set(sec) - _SECTIONS[name]):
        raise ValueError(f"chip {key!r}: unknown [{name}] fields {sorted(unknown)}")
    return sec


def _whole_chip(section: Mapping, field: str, cores: Mapping[str, int]) -> float | None:
    """A unit's rate for the whole chip: the section's figure times the cores it is given ``per``
    (``per = "tensorcore"``); None where the section has no such figure."""
    if field not in section:
        return None
    return section[field] * (cores.get(section["per"], 1) if "per" in section else 1)


def _build(key: str, raw: Mapping, profile: str, default_source: str | None) -> Chip:
    if unknown := set(raw) - _TOP_KEYS:
        raise ValueError(f"chip {key!r}: unknown fields {sorted(unknown)}")
    table = _merge(raw, raw.get("book", {})) if profile == "book" else raw
    prov: dict[str, Sourced] = {}
    t = _unwrap({k: v for k, v in table.items() if k != "book"}, "", prov, default_source)
    if missing := {k for p in prov.values() for k in p.keys} - set(_sources):
        raise ValueError(f"chip {key!r}: source keys {sorted(missing)} are not in [sources]")

    flops: dict[str, float] = {}
    for cls, v in t.get("flops", {}).items():
        if isinstance(v, Mapping):  # { same_rate_as = "bf16" }
            v = t["flops"].get(v.get("same_rate_as"))
            if not isinstance(v, int | float):
                raise ValueError(f"chip {key!r}: flops.{cls} names no numeric rate to share")
        flops[cls] = float(v)
    cores = {k: int(v) for k, v in t.get("cores", {}).items()}
    memory = {
        name: MemorySpace(
            name=name,
            per=m.get("per", "chip"),
            count=1 if m.get("per", "chip") == "chip" else cores.get(m["per"], 1),
            capacity=m.get("capacity"),
            bandwidth=m.get("bandwidth"),
        )
        for name, m in t.get("memory", {}).items()
    }
    hbm, host, net = (_section(t, s, key) for s in ("hbm", "host", "network"))
    vpu, eup, xlu = (_section(t, s, key) for s in ("vpu", "eup", "xlu"))
    vpu_flops, vector_elements, fill = (
        _whole_chip(vpu, f, cores) for f in ("flops", "elements", "fill")
    )
    eup_rate = _whole_chip(eup, "rate", cores)
    lane_reduce = _whole_chip(xlu, "lane_reduce", cores)
    ici = None
    if sec := _section(t, "ici", key):
        wrap = sec.pop("wraparound", {})
        sec = {k: tuple(v) if isinstance(v, list) else v for k, v in sec.items()}
        ici = Ici(
            **sec,
            wraparound_multiple_of=wrap.get("multiple_of"),
            wraparound_sizes=tuple(wrap.get("sizes", ())),
        )
    scaleup = ScaleUp(**sec) if (sec := _section(t, "scaleup", key)) else None
    return Chip(
        key=key,
        name=t.get("name", key),
        kind=t.get("kind", "custom"),
        flops=_frozen(flops),
        hbm_bandwidth=hbm.get("bandwidth", 0.0),
        hbm_capacity=hbm.get("capacity"),
        vendor=t.get("vendor", ""),
        profile=profile,
        status=t.get("status", ""),
        aliases=tuple(t.get("aliases", ())),
        cores=_frozen(cores),
        megacore=t.get("megacore"),
        mxu=tuple(t.get("mxu", ())),
        memory=_frozen(memory),
        vpu_flops=vpu_flops,
        eup_rate=eup_rate,
        vector_elements_rate=vector_elements,
        lane_reduce_rate=lane_reduce,
        fill_rate=fill,
        op_floor_s=t.get("op_floor"),
        clock_hz=t.get("clock"),
        ici=ici,
        scaleup=scaleup,
        dcn_per_chip=net.get("dcn_per_chip"),
        scaleout_per_node=net.get("scaleout_per_node"),
        pcie=host.get("pcie"),
        pcie_bidirectional=host.get("pcie_bidirectional"),
        c2c=host.get("c2c"),
        host_link=host.get("link", ""),
        sources=_frozen(prov),
    )


# -- the registry ------------------------------------------------------------------------------

_raw: dict[str, tuple[Mapping, str | None]] = {}  # key -> (data-file table, default source key)
_custom: dict[str, Chip] = {}  # key -> chip registered from code
_aliases: dict[str, str] = {}  # normalized name -> key
_sources: dict[str, Source] = {}
_cache: dict[tuple[str, str], Chip] = {}
_loaded = False
_loading = threading.Lock()  # a server's first requests may all ask at once


def _ensure_loaded() -> None:
    global _loaded
    if _loaded:
        return
    with _loading:
        if not _loaded:
            _load_data(tomllib.loads(DATA_FILE.read_text()), str(DATA_FILE), None)
            _loaded = True  # only once complete: another thread must not see a half-loaded table


def _add_aliases(key: str, names: Iterable[str]) -> None:
    for n in (key, *names):
        _aliases[_norm(n)] = key


def _load_data(data: Mapping, origin: str, default_source: str | None) -> list[str]:
    """Register the chips of one parsed file; later registrations win over earlier ones."""
    for k, s in data.get("sources", {}).items():
        _sources[k] = Source(k, s.get("title", ""), s.get("url", ""))
    if default_source:
        _sources.setdefault(
            default_source, Source(default_source, f"unsourced numbers in {origin}", origin)
        )
    chips = data.get("chips")
    if not isinstance(chips, Mapping) or not chips:
        raise ValueError(f"{origin}: expected a [chips.<key>] table")
    for key, raw in chips.items():  # validate everything before registering anything
        for profile in PROFILES:
            _build(key, raw, profile, default_source)
    for key, raw in chips.items():
        _raw[key] = (raw, default_source)
        _custom.pop(key, None)
        _add_aliases(key, [raw.get("name", key), *raw.get("aliases", ())])
    _cache.clear()
    return list(chips)


def load_file(path: str | Path) -> list[Chip]:
    """Register the chips of a TOML or JSON file (same schema as ``data/chips.toml``).

    User files may give bare numbers: they are then cited as ``file:<name>``. A chip key that is
    already known is replaced. Returns the file's chips (vendor profile).
    """
    _ensure_loaded()
    path = Path(path)
    text = path.read_text()
    data = json.loads(text) if path.suffix.lower() == ".json" else tomllib.loads(text)
    keys = _load_data(data, str(path), f"file:{path.name}")
    return [get(k) for k in keys]


def register(chip: Chip) -> Chip:
    """Make :func:`get` find a chip built in code (e.g. by :meth:`Chip.custom`) by key or alias."""
    _ensure_loaded()
    for k in {k for s in chip.sources.values() for k in s.keys} - set(_sources):
        _sources[k] = Source(k, "user-supplied numbers (Chip.custom)")
    _custom[chip.key] = chip
    _add_aliases(chip.key, [chip.name, *chip.aliases])
    _cache.clear()
    return chip


def reset() -> None:
    """Forget chips loaded from user files or registered from code (the built-in data reloads)."""
    global _loaded
    for d in (_raw, _custom, _aliases, _sources, _cache):
        d.clear()
    _loaded = False


def names() -> list[str]:
    """Canonical chip keys, in data-file order, then chips registered from code."""
    _ensure_loaded()
    return list(dict.fromkeys([*_raw, *_custom]))


def resolve(name: str) -> str:
    """The canonical key for a key, alias or device name (case, spaces and dashes ignored)."""
    _ensure_loaded()
    norm = _norm(name)
    if norm in _aliases:
        return _aliases[norm]
    close = difflib.get_close_matches(norm, list(_aliases), n=8, cutoff=0.6)
    close += [a for a in _aliases if norm and (norm in a or a in norm)]
    matches = list(dict.fromkeys(_aliases[a] for a in close))[:5]
    raise UnknownChipError(name, matches, names())


HOST = "host"  # this machine's CPU, measured by hlo_roofline.host

# Chips made on first use (name -> factory): hlo_roofline.host provides "host", measuring this
# machine's CPU, so the database needs no import of what measures it.
_providers: dict[str, Callable[[], Chip]] = {}


def provide(name: str, factory: Callable[[], Chip]) -> None:
    """Make ``chips.get(name)`` call ``factory`` (once it has registered a chip, that one is used)."""
    _providers[name.strip().lower()] = factory


def get(name: str | Chip, profile: str = "vendor") -> Chip:
    """Look a chip up by key, alias or jax ``device_kind`` (``"host"``: this machine's CPU,
    measured on first use); raise :class:`UnknownChipError` with close matches."""
    if isinstance(name, Chip):
        return name
    if isinstance(name, str) and name.strip().lower() in _providers:
        key = name.strip().lower()
        if key not in _custom:
            return _providers[key]()
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; expected one of {PROFILES}")
    key = resolve(name)
    if key in _custom:
        return _custom[key]
    if (key, profile) not in _cache:
        raw, default_source = _raw[key]
        _cache[key, profile] = _build(key, raw, profile, default_source)
    return _cache[key, profile]


def all_chips(profile: str = "vendor") -> list[Chip]:
    """Every known chip under one profile."""
    return [get(k, profile) for k in names()]


def source_table() -> Mapping[str, Source]:
    """Source key -> :class:`Source` (title and URL) for every key the numbers cite."""
    _ensure_loaded()
    return MappingProxyType(_sources)


# -- documentation -----------------------------------------------------------------------------


def _fmt(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x:.5g}".replace("e+", "e")


def _fmt_bytes(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x / 2**30:g} GiB" if x % 2**30 == 0 else f"{x / 1e9:g} GB"


def markdown_table() -> str:
    """The chip table of docs/chips.md (regenerate with ``python -m hlo_roofline.chips``)."""
    head = (
        "| key | chip | bf16 | fp8 | int8 | fp32 | HBM | HBM B/s | CI vendor | CI book "
        "| ICI link / GPU egress, one-way B/s | sources |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    rows = [head]
    for c in all_chips():
        b = get(c.key, "book")
        link = c.ici.link_oneway if c.ici else (c.scaleup.oneway if c.scaleup else None)
        keys = dict.fromkeys(k for s in [*c.sources.values(), *b.sources.values()] for k in s.keys)
        row = [
            f"`{c.key}`",
            c.name,
            *(_fmt(c.flops.get(r)) for r in ("bf16", "fp8", "int8", "fp32")),
            _fmt_bytes(c.hbm_capacity),
            _fmt(c.hbm_bandwidth),
            f"{c.critical_intensity():.1f}",
            f"{b.critical_intensity():.1f}",
            _fmt(link),
            ", ".join(keys),
        ]
        rows.append("| " + " | ".join(row) + " |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
