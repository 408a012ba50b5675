"""The chip model: frozen :class:`Chip` objects and what they are made of (no file, no registry).

A :class:`Chip` holds one accelerator's peaks under one profile, each number with its
:class:`Sourced` provenance; :func:`rate_class` maps an HLO dtype to the class of arithmetic a
chip publishes a peak for, and :meth:`Chip.rate` falls back through related classes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

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
    kind: str = "fact"  # one of KINDS
    fitted_on: str = ""  # a calibrated number's fixtures


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


# What a number of the chip database is (every leaf's ``kind``): a ``fact`` (published, with its
# source), ``derived`` (arithmetic on facts, its formula in the note) or ``calibrated`` (fitted
# on committed fixtures, ``fitted_on`` names them; only the expected model reads it).
KINDS = ("fact", "derived", "calibrated")


@dataclass(frozen=True)
class Calibration:
    """A chip's calibrated numbers: what XLA:TPU's cost model charges beyond the hardware's work
    (its operand stream, the tiling loop's steps, its vector loop's rates, per-op floor, ...) and
    what the GPUs measured in ``fixtures/measured_gpu`` took at least. Each is fitted on committed
    fixtures (``python -m hlo_roofline.calibrate`` refits them), never a published figure, so only
    the expected model (``t_expected_s``) reads them: the bound (``t_bound_s``), the verdicts and
    the ``book`` profile never do. Rates are whole chip; ``None``: no such effect on this chip."""

    # B/s at which XLA:TPU's cost model streams a matmul's HBM operands
    matmul_stream_bandwidth: float | None = None
    vector_elements_rate: float | None = None  # elements/s a TPU vector loop passes
    lane_reduce_rate: float | None = None  # elements/s a TPU standalone reduce folds across lanes
    fill_rate: float | None = None  # elements/s a TPU fill (broadcast of a scalar) writes
    # results/s XLA:TPU charges a deep-buffered reduce over major dimensions
    major_reduce_rate: float | None = None
    # words/s XLA:TPU streams a matmul's wide operand through the vector registers where the
    # fusion also reduces the product (decode's scores and their max)
    reduced_stream_rate: float | None = None
    # multiply-adds/s XLA:TPU charges a depthwise convolution's taps on the vector unit
    depthwise_tap_rate: float | None = None
    # elements/s XLA:TPU charges an array a fusion expands and folds inside itself
    expanded_elements_rate: float | None = None
    # results/s XLA:TPU charges a fusion folding an expansion's sublanes one lane tile at a time
    sublane_fold_rate: float | None = None
    # product elements/s XLA:TPU charges a matmul fusion that folds its own product
    folded_product_rate: float | None = None
    # elements/s XLA:TPU charges a lane-moving copy per element of each side in HBM
    relayout_rate: float | None = None
    # weight elements/s XLA:TPU charges a matmul for loading its weight tiles into the MXUs
    # (weight-stationary: per held element, whatever the rows streamed through them), and the
    # time it adds per matmul op on top of that load
    weight_load_rate: float | None = None
    weight_load_overhead_s: float | None = None
    # HBM bytes per element the loop that set vector_elements_rate read: XLA:TPU charges a loop's
    # reads beyond these on top of its loop time
    loop_read_bytes: float | None = None
    # vector loop passes XLA:TPU charges per element of a K-split matmul's result-sized arrays
    # once a result tile is finished (the accumulator, further results, epilogue-only operands),
    # after the MXU less one K step
    epilogue_passes: float | None = None
    # the same where the loop keeps K whole: passes per element of those arrays and of an operand
    # the fusion relays, per step that reads it, charged where they exceed the MXU's time
    epilogue_passes_k_whole: float | None = None
    # vector loop passes XLA:TPU charges per element of a K-split matmul fusion's computed left
    # operand, once per fetch of its window, after the MXU
    prologue_passes: float | None = None
    op_floor_s: float | None = None  # the least time any op takes (per-op overhead)
    # time XLA:TPU's cost model adds per step of a matmul fusion's tiling loop, per device
    tile_step_s: float | None = None
    # the share of the matrix unit's peak the chip's matmul kernels reach, and of the HBM
    # bandwidth its streaming ops reach (measured on whole steps or traces: fractions, not shared)
    matmul_efficiency: float | None = None
    memory_efficiency: float | None = None
    # the share of the HBM bandwidth a GPU kernel without a software pipeline reaches per unit of
    # its occupancy (resident warps ÷ the SM's slots: the loads it keeps in flight), measured on
    # traces; the streams' share caps it
    occupancy_bandwidth: float | None = None
    # a multi-slice (megascale) transfer over the data-centre network: the share of the chip's DCN
    # egress it reaches, and the time each step of its ring over the slices adds (the hop from
    # one slice to the next through the hosts and their NICs); measured on whole steps
    dcn_efficiency: float | None = None
    dcn_step_s: float | None = None
    # a GPU's kernels of their own class, measured on traces (fractions of the bound): a fused
    # kernel's matrix work (cuDNN's flash attention: ``kernel_mxu_flops``) and cuDNN's convolutions
    kernel_efficiency: float | None = None
    conv_efficiency: float | None = None
    conv_narrow_efficiency: float | None = None  # a conv whose K is no whole number of MMA steps
    # a GPU stream's idle time before each kernel's run that no kernel covers (the host's
    # launch), measured on traces
    launch_gap_s: float | None = None
    # the host's dispatch of a step that waits for its outputs (from its start to its first
    # kernel, and from its last kernel to its end): a time per step and one per argument buffer
    dispatch_s: float | None = None
    dispatch_per_argument_s: float | None = None

    _RATES = ("matmul_stream_bandwidth", "vector_elements_rate", "lane_reduce_rate", "fill_rate",
              "major_reduce_rate", "reduced_stream_rate", "depthwise_tap_rate",
              "expanded_elements_rate", "sublane_fold_rate", "folded_product_rate",
              "relayout_rate", "weight_load_rate")  # fmt: skip

    def shared(self, n: int) -> Calibration:
        """Each of ``n`` devices' share of a chip's calibration (its rates divided evenly)."""
        rates = {k: getattr(self, k) for k in self._RATES}
        return dataclasses.replace(
            self, **{k: None if v is None else v / n for k, v in rates.items()}
        )

    def values(self) -> dict[str, float]:
        """Every number this calibration holds, by field name."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) is not None
        }


# Passes of the bf16 MXU a TPU makes for an f32 dot at each precision (JAX: HIGH is "bfloat16_3x";
# XLA:TPU compiles the BF16_BF16_F32_X6 algorithm to HIGHEST).
_TPU_F32_PASSES = {"default": 1, "high": 3, "highest": 6}


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
    clock_hz: float | None = None  # core clock: converts XLA:TPU's cycle estimates to seconds
    ici: Ici | None = None
    scaleup: ScaleUp | None = None
    dcn_per_chip: float | None = None  # TPU data-centre network egress per chip, B/s
    scaleout_per_node: float | None = None  # GPU scale-out egress per node (the book's W_node)
    pcie: float | None = None  # host link per chip, direction not stated by the source
    pcie_bidirectional: float | None = None
    c2c: float | None = None  # GB200 NVLink-C2C to Grace
    host_link: str = ""
    # what only the expected model reads: XLA:TPU's charges, the measured GPU floor (fitted on
    # committed fixtures, never published by the vendor); empty under the book profile
    calibration: Calibration = field(default_factory=Calibration)
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
        return self.ridge(self.peak_flops(dtype), bandwidth)

    def ridge(self, rate: float, bandwidth: float | str = "hbm") -> float:
        """FLOP per byte at which ``rate`` (FLOP/s: a peak, the vector unit's) meets
        ``bandwidth`` (B/s or a memory's name): the one formula of a roof's critical intensity."""
        bw = self.bandwidth(bandwidth) if isinstance(bandwidth, str) else float(bandwidth)
        return rate / bw

    # -- the rates ops run at -----------------------------------------------------------------
    def peak(self, dtype: Any = "bf16") -> float:
        """:meth:`peak_flops` without its warning: for callers that say the fallback themselves."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RateFallbackWarning)
            return self.peak_flops(dtype)

    def matmul_peak(self, dtype: str, precision: str = "default") -> float:
        """The rate a matmul runs at: its input dtype's, except that f32 inputs run at the rate their
        precision asks for — TF32 tensor cores on NVIDIA unless ``highest`` (JAX's default), one to
        six bf16 passes on a TPU — and an explicit algorithm (``dot_bf16_bf16_f32_x3``) at its own."""
        if precision.startswith("dot_"):
            parts = precision.split("_")  # dot_<lhs>_<rhs>_<accumulator>[_x<passes>]
            passes = int(parts[-1][1:]) if parts[-1][:1] == "x" and parts[-1][1:].isdigit() else 1
            with contextlib.suppress(ValueError):
                return self.peak(parts[1]) / passes
        if dtype != "f32":
            return self.peak(dtype)
        if self.kind == "gpu" and precision != "highest" and self.has_rate("tf32"):
            return self.peak("tf32")
        if self.kind == "tpu":
            return self.peak("bf16") / _TPU_F32_PASSES.get(precision, 1)
        return self.peak(dtype)

    def vector_peak(self) -> float:
        """Where elementwise work runs: the VPU where published, else CUDA-core fp32, else the MXU."""
        if self.vpu_flops:
            return self.vpu_flops
        if self.kind == "gpu" and self.has_rate("f32"):
            return self.peak("f32")
        return self.peak("bf16")

    @property
    def vmem_bandwidth(self) -> float | None:
        """A TPU's VMEM bandwidth where the database has one (else VMEM bytes count at HBM speed)."""
        space = self.memory.get("vmem")
        return space.bandwidth if space is not None else None

    @property
    def mxu_width(self) -> int:
        """The systolic array's width (0 where the chip has no MXU shape)."""
        return self.mxu[0] if self.mxu else 0

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
            calibration=self.calibration.shared(n),
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


def _slug(name: str) -> str:
    return re.sub(r"[^0-9a-z]+", "-", name.lower()).strip("-")
