"""The time model of each backend, and the two models over it, each with one job.

A backend's time model (:class:`TimeModel` for a host CPU or a chip of no known kind,
:class:`GpuTimeModel`, :class:`TpuTimeModel`) owns what differs between them: the rates an op's
units run at, where its bytes sit (a TPU's VMEM beside HBM), its links and the queues its
collectives share in XLA's schedule, and the calibrated effects its compiler and kernels add.
:func:`for_chip` picks one per chip, once; no caller tests a ``Chip`` field to decide.

Over it, :class:`BoundModel` (hardware facts only: ``t_bound_s``, ``step_bound_s``) and
:class:`ExpectedModel` (the bound and every calibrated effect, as XLA schedules the step:
``t_expected_s``, ``expected_by``, ``step_expected_s``) are separate objects; only the second
reads the chip's :class:`~hlo_roofline.chips.Calibration`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from hlo_roofline.chips import Chip
from hlo_roofline.cost.collectives import device_group
from hlo_roofline.judge import interconnect, schedule
from hlo_roofline.judge.compute import (
    charged_times,
    column,
    compute_times,
    depthwise_convs,
    expanded_loops,
    folded_products,
    kernel_mxu_flops,
    loop_reads,
    major_reduces,
    matmul_pipeline,
    mxu_padding,
    op_floors,
    relayouts,
    second_passes,
    sublane_folds,
    unfolded_loops,
    weight_loads,
)
from hlo_roofline.schema import BOUNDS, matmul_rows

# a GPU's async starts whose work runs on the device beside the stream, sharing its HBM
HBM_SHARING_STARTS = ("fusion-start", "async-start")
CONV_K_STEP = 8  # the K a tensor-core MMA takes at once (tf32's; 16-bit types take 16)
NO_RATE = "compute time unknown: "  # how a row whose matmul dtype the chip has no rate for begins


@dataclass(frozen=True)
class Rates:
    """The peak each row runs at (``peaks``; NaN where the chip has none: ``no_rate``), which rows
    are matmuls, a custom kernel's matrix-unit FLOPs, each matmul's MXU padding, and each
    (dtype, precision) a matmul asked for with its peak and the problem where there is none."""

    matmul: np.ndarray
    peaks: np.ndarray
    no_rate: np.ndarray
    kernel_mxu: np.ndarray
    padding: np.ndarray
    by_dtype: dict[tuple[str, str], tuple[float, str]]


@dataclass(frozen=True)
class MemoryTimes:
    """Each row's memory time (``t_memory``: the bound's), the part of it on VMEM (``t_vmem``),
    the bytes it moves through HBM, and its time at its own placement with no prefetch charged
    (``own_memory``: XLA's view)."""

    t_memory: np.ndarray
    t_vmem: np.ndarray
    hbm_bytes: np.ndarray
    own_memory: np.ndarray

    @property
    def t_hbm(self) -> np.ndarray:
        """The part of each row's memory time on HBM."""
        return self.t_memory - self.t_vmem


@dataclass(frozen=True)
class Bound:
    """What the bound model found per row: its compute, memory and link times, the unit times
    behind its compute time, its bound time and the ``bound`` that sets it; the topology its
    collectives were priced on."""

    t_compute: np.ndarray
    compute_unit: np.ndarray
    unit_times: dict[str, np.ndarray]
    memory: MemoryTimes
    t_comm: np.ndarray
    t_bound: np.ndarray
    bound: np.ndarray
    topology: interconnect.Topology | None


@dataclass(frozen=True)
class Expected:
    """What the expected model found: each row's time and the effect that sets it above the
    bound ("" where the bound does), every effect's time, and the step as XLA scheduled it."""

    t_expected: np.ndarray
    expected_by: np.ndarray
    effects: dict[str, np.ndarray]
    scheduled: schedule.Scheduled


class TimeModel:
    """A host CPU's time model, and any chip's of a kind without one of its own: FLOPs at the
    chip's matmul and vector peaks, bytes at its main memory's bandwidth, collectives on the links
    the chip has, one interconnect queue in the schedule; the calibrated effects measured on
    whole kernels (the per-op floor, the matmul and memory efficiencies)."""

    kind = "host"

    def __init__(self, chip: Chip) -> None:
        self.chip = chip

    # -- the units' rates (facts) ---------------------------------------------------------------
    def rates(self, ops: pd.DataFrame) -> Rates:
        """The peak each row runs at: a matmul at its dtype's and precision's, a custom kernel's
        matrix-unit work at its dtype's (the peak its ridge is drawn against), the rest at the
        vector peak."""
        chip = self.chip
        vector = chip.vector_peak()
        matmul = matmul_rows(ops)
        dtype, precision = ops["dtype"].to_numpy(), ops["precision"].to_numpy()
        by_dtype: dict[tuple[str, str], tuple[float, str]] = {}
        for key in set(zip(dtype[matmul], precision[matmul], strict=True)):
            by_dtype[key] = self.matmul_rate(*key)
        kernel_mxu = np.where(matmul, 0.0, kernel_mxu_flops(ops))
        kernel_rates = {d: self.matmul_rate(d, "default")[0] for d in set(dtype[kernel_mxu > 0])}
        # no matrix-unit work where its dtype has no rate (rows already at 0 stay so)
        for i in np.flatnonzero(kernel_mxu != 0):
            if math.isnan(kernel_rates.get(dtype[i], math.nan)):
                kernel_mxu[i] = 0.0
        kernel = kernel_mxu > 0
        peaks = np.array(
            [
                by_dtype[d, p][0] if mm else kernel_rates[d] if k else vector
                for d, p, mm, k in zip(dtype, precision, matmul, kernel, strict=True)
            ],
            dtype=float,
        )  # fmt: skip
        padding = mxu_padding(ops, chip)  # the MXU work each matmul does per FLOP it asks for
        return Rates(matmul, peaks, np.isnan(peaks), kernel_mxu, padding, by_dtype)

    def matmul_rate(self, dtype: str, precision: str) -> tuple[float, str]:
        """(peak, "") for a matmul's dtype and precision, or (NaN, why) when the chip has no rate
        for it (an element type without a rate class, such as s2 or f6e3m2fn)."""
        try:
            return self.chip.matmul_peak(dtype, precision or "default"), ""
        except ValueError:
            return math.nan, f"{NO_RATE}{self.chip.name} has no rate for {dtype} matmuls"

    def unit_times(
        self, ops: pd.DataFrame, rates: Rates
    ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """Each row's compute time, the unit that sets it and each unit's time
        (:func:`~hlo_roofline.judge.compute.compute_times`); none where there is no rate."""
        no_rate = rates.no_rate
        t_compute, unit, units = compute_times(
            ops, self.chip, rates.matmul, np.where(no_rate, 1.0, rates.peaks), rates.padding,
            rates.kernel_mxu,
        )  # fmt: skip
        t_compute[no_rate], unit[no_rate] = 0.0, ""
        for times in units.values():  # no rate, no time on any unit (nor in a queue's sum)
            times[no_rate] = 0.0
        return t_compute, unit, units

    # -- memory (facts) -------------------------------------------------------------------------
    def memory_times(self, ops: pd.DataFrame) -> MemoryTimes:
        """Every byte at the main memory's bandwidth."""
        data = ops["bytes_accessed"].to_numpy(dtype=float)
        t_memory = data / self.chip.hbm_bandwidth
        return MemoryTimes(t_memory, np.zeros(len(ops)), data, t_memory)

    # -- links (facts) and the schedule's queues ------------------------------------------------
    def link_times(self, ops: pd.DataFrame, topology) -> tuple[np.ndarray, object]:
        """Each row's link time on the topology its groups span (and that topology, or None):
        the book's collective model on the chip's links, a multi-slice transfer at the chip's
        DCN egress."""
        return _comm_times(ops, self.chip, topology)

    @classmethod
    def link_queues(cls, ops: pd.DataFrame) -> np.ndarray | None:
        """Per row, the links its collective's transfer uses in the schedule (collectives with
        different links run side by side); None: one interconnect for all."""
        return None

    @classmethod
    def walk(cls, ops: pd.DataFrame, durations: np.ndarray) -> schedule.Scheduled:
        """The step as scheduled (:func:`hlo_roofline.judge.schedule.walk`) on this backend's
        queues; a SparseCore offload queues on the SparseCore (the ``offload`` column)."""
        waits_for = ops["waits_for"].to_numpy() if "waits_for" in ops else np.full(len(ops), "")
        return schedule.walk(
            ops["name"].to_numpy(),
            ops["opcode"].to_numpy(),
            waits_for,
            ops["collective"].to_numpy() != "",
            durations,
            cls.link_queues(ops),
            ops["offload"].to_numpy() if "offload" in ops else None,
        )

    # -- calibrated effects (the expected model's alone) ----------------------------------------
    def added_effects(self, ops: pd.DataFrame, bound: Bound) -> dict[str, np.ndarray]:
        """Calibrated times an op takes on top of its run (the stream idle before it), per row:
        none on a host."""
        return {}

    def dispatch(self, ops: pd.DataFrame) -> float:
        """The host's dispatch of one step, where calibrated (a GPU's): none here."""
        return 0.0

    def calibrated_effects(
        self, ops: pd.DataFrame, rates: Rates, bound: Bound
    ) -> dict[str, np.ndarray]:
        """Each calibrated effect's time per row (:data:`schema.EXPECTED_EFFECTS`): the per-op
        floor and the shares of the peaks the chip's kernels reached where measured."""
        return self.measured_effects(ops, rates, bound)

    def measured_effects(
        self, ops: pd.DataFrame, rates: Rates, bound: Bound
    ) -> dict[str, np.ndarray]:
        """The effects measured on whole kernels or steps, on any backend: the per-op floor (once
        per execution of an op that runs on the core), the matrix unit's work at the share of its
        peak the chip's matmul kernels reached, HBM bytes at the share of the bandwidth its
        streaming ops reached."""
        cal, zero = self.chip.calibration, np.zeros(len(ops))
        memory = bound.memory
        return {
            "floor": op_floors(ops, self.chip, rates.matmul),
            "matmul_rate": bound.unit_times["mxu"] / cal.matmul_efficiency
            if cal.matmul_efficiency
            else zero,
            "memory_rate": memory.t_hbm / cal.memory_efficiency + memory.t_vmem
            if cal.memory_efficiency
            else zero,
        }


def cudnn_convolutions(ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The rows that are cuDNN's convolutions (XLA:GPU names its conv custom-calls
    ``cudnn-conv*``), and of those the narrow ones: a contraction that is no whole number of the
    tensor cores' K step (``CONV_K_STEP``). The model's two conv classes, and the sets
    ``calibrate`` fits each class's efficiency on."""
    conv = ops["opcode"].to_numpy() == "custom-call"
    conv &= ops["name"].astype(str).str.startswith("cudnn-conv").to_numpy()
    return conv, conv & (ops["mm_k"].to_numpy() % CONV_K_STEP != 0)


# The fusions XLA:GPU generates a kernel for itself (its loop and input emitters, and Triton's for
# those that are no GEMM), by their ``fusion_kind``; a cuDNN or other custom fusion is a library's.
GENERATED = ("kLoop", "kInput")
TRITON_FUSION = "kCustom:__triton"


def occupancy_limited(ops: pd.DataFrame) -> np.ndarray:
    """Per row, the occupancy of a kernel that keeps its loads in flight through its resident
    warps, or 0: a fusion XLA generates itself (a loop, input or Triton fusion that is no
    matmul: a GEMM's kernel pipelines its loads through shared memory, a library call is
    another's code) whose kernels' occupancy the trace records (the ``occupancy`` column)."""
    if "occupancy" not in ops:
        return np.zeros(len(ops))
    occupancy = np.nan_to_num(ops["occupancy"].to_numpy(dtype=float), nan=0.0)
    kinds = ops["fusion_kind"].astype(str)
    triton = kinds.str.startswith(TRITON_FUSION) & ~kinds.str.contains("gemm")
    generated = (ops["opcode"].to_numpy() == "fusion") & (kinds.isin(GENERATED) | triton).to_numpy()
    return np.where(generated & (occupancy > 0) & (occupancy <= 1), occupancy, 0.0)


def kernel_runs(ops: pd.DataFrame, t_bound: np.ndarray) -> np.ndarray:
    """The GPU rows that launch a kernel of their own: a bound time (a parameter, a tuple, a
    bitcast has none), executed, and no collective (its launch is in its transfer's time). The
    launch gap is charged to these, and fitted over these (``calibrate.timeline``)."""
    runs = (t_bound > 0) & (ops["count"].to_numpy(dtype=float) > 0)
    return runs & (ops["collective"].to_numpy() == "")


def entry_arguments(ops: pd.DataFrame) -> np.ndarray:
    """The rows that are the program's arguments: the parameters of its entry computation (the
    first row's: the walk starts there, with the operands its containers take; a loop body's or
    a branch's parameters are not the host's to pass, and an entry without parameters has no
    arguments). The host's dispatch of a step grows with their count
    (``calibrate.dispatch_fits``)."""
    parameters = ops["opcode"].to_numpy() == "parameter"
    if "loop" in ops:
        parameters &= ops["loop"].to_numpy() == ""
    if not parameters.any():
        return parameters
    computations = ops["computation"].to_numpy()
    return parameters & (computations == computations[0])


class GpuTimeModel(TimeModel):
    """A GPU's: tensor cores at the matmul dtype's peak (f32 on TF32 unless ``highest``), CUDA
    cores for the rest, HBM; collectives on NVLink inside a node and the node's scale-out
    network across nodes, sharing the GPU's NVLink and network ports in the schedule (one
    queue); the per-op floor, the efficiencies measured on the traces of
    ``fixtures/measured_gpu`` (GEMMs, streaming ops, fused attention kernels, cuDNN's
    convolutions) and the stream's idle time between kernels (the host's dispatch of a step
    apart: :meth:`dispatch`); an async copy (not a collective) runs beside the stream's kernels
    on the same HBM, so the stream waits for it."""

    kind = "gpu"

    @classmethod
    def walk(cls, ops: pd.DataFrame, durations: np.ndarray) -> schedule.Scheduled:
        """XLA's schedule, with each asynchronous computation that is not a collective (an async
        fusion: a scanned layer's weight slice, ``fusion-start``; ``async-start``) on the stream:
        it moves its bytes through the HBM the kernels beside it stream from, so it hides nothing
        (gpt_step on H100 and H200: every kernel's time, async copies included, sums to the
        measured step). A ``copy-start`` (to or from the host, over its link) still overlaps."""
        opcodes = ops["opcode"].to_numpy().astype(str)
        local = np.isin(opcodes, HBM_SHARING_STARTS) & (ops["collective"].to_numpy() == "")
        if not local.any():
            return super().walk(ops, durations)
        names = set(ops["name"].to_numpy()[local].tolist())
        waits = ops["waits_for"].to_numpy() if "waits_for" in ops else np.full(len(ops), "")
        on_stream = ops.assign(
            opcode=np.where(local, np.char.replace(opcodes, "-start", ""), opcodes),
            waits_for=[("" if w in names else w) for w in waits.tolist()],
        )
        return super().walk(on_stream, durations)

    def calibrated_effects(
        self, ops: pd.DataFrame, rates: Rates, bound: Bound
    ) -> dict[str, np.ndarray]:
        """The effects measured on whole kernels (:meth:`TimeModel.measured_effects`) and two
        classes of kernel of their own: a fused kernel's matrix work (cuDNN's flash attention,
        priced from its shapes: ``kernel_mxu_flops``) at the share of its bound such kernels
        reached (``calibrated.kernel_efficiency``), and cuDNN's convolutions at theirs: their
        algorithms, chosen per shape, run far below the GEMMs' rate, and further below where the
        contraction (input channels × filter taps) is no whole number of the tensor cores'
        K step (a 3-channel stem: ``calibrated.conv_narrow_efficiency``; the rest:
        ``calibrated.conv_efficiency``). A kernel XLA generates for a fusion that is no matmul
        streams through its resident warps' loads (no software pipeline): where the trace
        records its occupancy (:func:`occupancy_limited`), its HBM bytes go at
        ``calibrated.occupancy_bandwidth`` × that share of the bandwidth (Little's law: the
        bytes in flight over the memory's latency), the streams' share above it where that is
        less."""
        cal, zero = self.chip.calibration, np.zeros(len(ops))
        fused = rates.kernel_mxu > 0
        conv, narrow = cudnn_convolutions(ops)
        # the share of the bandwidth each kernel its occupancy holds back reaches (inf: none)
        occupied = occupancy_limited(ops) * (cal.occupancy_bandwidth or 0.0)
        occupied[occupied == 0] = np.inf
        share = np.full(len(ops), np.inf)  # the share of its bound each conv reaches
        share[conv & ~narrow] = cal.conv_efficiency or np.inf
        share[narrow] = cal.conv_narrow_efficiency or cal.conv_efficiency or np.inf
        return {
            **self.measured_effects(ops, rates, bound),
            "kernel_rate": np.where(fused, bound.t_bound / cal.kernel_efficiency, 0.0)
            if cal.kernel_efficiency
            else zero,
            "conv_rate": bound.t_bound / share,
            "occupancy": bound.memory.t_hbm / occupied,
        }

    def added_effects(self, ops: pd.DataFrame, bound: Bound) -> dict[str, np.ndarray]:
        """The stream's idle time before each kernel's run (``calibrated.launch_gap``: the host's
        launch); none for a row that launches no kernel (a parameter, a tuple, a bitcast: no
        bound time) nor for a collective (its launch is in its transfer's time). The host's
        dispatch of the whole program is not the program's (:meth:`dispatch`)."""
        cal = self.chip.calibration
        launch = np.zeros(len(ops))
        kernel = kernel_runs(ops, bound.t_bound)
        if cal.launch_gap_s:
            launch[kernel] = cal.launch_gap_s * ops["count"].to_numpy(dtype=float)[kernel]
        return {"launch": launch}

    def dispatch(self, ops: pd.DataFrame) -> float:
        """The host's dispatch of one step and its wait for the outputs (``calibrated.dispatch``
        and ``dispatch_per_argument`` times the program's arguments: :func:`entry_arguments`):
        the time before a step's first kernel and after its last, which grows with the buffers
        the host passes in. A step that waits for its outputs (as ``measure`` runs them) takes
        it on top of ``step_expected_s``; a loop that dispatches the next step meanwhile hides
        it behind this one, so the expected step leaves it out."""
        cal = self.chip.calibration
        if not len(ops) or not (cal.dispatch_s or cal.dispatch_per_argument_s):
            return 0.0  # no rows: no program that runs (a step the compiler refused)
        arguments = int(entry_arguments(ops).sum())
        return (cal.dispatch_s or 0.0) + (cal.dispatch_per_argument_s or 0.0) * arguments


class TpuTimeModel(TimeModel):
    """A TPU's: the MXU (its tiles padded), the vector unit and the EUP; HBM and, where the
    database has its bandwidth, VMEM (a prefetched operand is HBM traffic of its reader);
    collectives on the torus's ICI links, each device group's links a queue of their own in the
    schedule, a multi-slice transfer on the data-centre network; XLA:TPU's calibrated charges."""

    kind = "tpu"

    def memory_times(self, ops: pd.DataFrame) -> MemoryTimes:
        """HBM bytes at its bandwidth, bytes XLA placed in VMEM at VMEM's (where the database has
        it); an operand XLA prefetched HBM→VMEM for a reader is that reader's HBM traffic."""
        vmem_bandwidth = self.chip.vmem_bandwidth
        if not vmem_bandwidth or "vmem_bytes" not in ops:
            return super().memory_times(ops)
        hbm = self.chip.hbm_bandwidth
        data = ops["bytes_accessed"].to_numpy(dtype=float)
        vmem = ops["vmem_bytes"].to_numpy(dtype=float)
        hbm_bytes = data - vmem
        own_memory = hbm_bytes / hbm + vmem / vmem_bandwidth
        prefetch = _prefetch_charges(ops)
        if prefetch is not None:  # a prefetched operand is HBM traffic of the op that reads it
            moved, is_prefetch = prefetch
            moved = np.minimum(moved, vmem)
            hbm_bytes, vmem = hbm_bytes + moved, vmem - moved
            hbm_bytes[is_prefetch] = vmem[is_prefetch] = 0.0  # counted once, in its readers
        t_vmem = vmem / vmem_bandwidth
        return MemoryTimes(hbm_bytes / hbm + t_vmem, t_vmem, hbm_bytes, own_memory)

    @classmethod
    def link_queues(cls, ops: pd.DataFrame) -> np.ndarray | None:
        """On a TPU torus a collective's device group names the links it uses (another mesh axis
        is another ring of links)."""
        return ops["replica_group"].to_numpy() if "replica_group" in ops else None

    def calibrated_effects(
        self, ops: pd.DataFrame, rates: Rates, bound: Bound
    ) -> dict[str, np.ndarray]:
        """What XLA:TPU's cost model charges beyond the hardware's work (its vector loop, fill
        and lane-reduce rates, its matmul pipeline, loops' further reads, deep reduces) and the
        per-op floor, from the chip's calibration alone (zero where it has none: every chip of
        the ``book`` profile)."""
        chip, rows, cal = self.chip, np.arange(len(ops)), self.chip.calibration
        matmul, no_rate, memory = rates.matmul, rates.no_rate, bound.memory
        charged = charged_times(ops, cal)
        pipeline = matmul_pipeline(
            chip, matmul & ~no_rate, bound.unit_times, memory.hbm_bytes, memory.t_vmem,
            column(ops, "tile_steps", rows, 0.0), column(ops, "tile_reread_bytes", rows, 0.0),
            (column(ops, "tile_k_steps", rows, 0.0), column(ops, "epilogue_elements", rows, 0.0)),
            column(ops, "prologue_elements", rows, 0.0),
        )  # fmt: skip
        priced = np.where(no_rate, 0.0, 1.0)  # a row without a rate has no charged compute either
        measured = self.measured_effects(ops, rates, bound)
        return {
            "loop": unfolded_loops(ops, charged["loop"], chip) * priced,
            "fill": charged["fill"] * priced,
            "xlu": charged["xlu"] * priced,
            "floor": measured["floor"],
            "pipeline": pipeline,
            "loop_reads": loop_reads(
                ops, chip, matmul | no_rate, charged["loop"], memory.hbm_bytes
            ),
            "major_reduce": major_reduces(ops, chip, no_rate),
            "depthwise": depthwise_convs(ops, chip) * priced,
            "expanded": expanded_loops(ops, chip) * priced,
            "sublane_fold": sublane_folds(ops, chip) * priced,
            "second_pass": second_passes(ops, charged["loop"], chip) * priced,
            "folded_product": folded_products(ops, chip) * priced,
            "relayout": relayouts(ops, chip) * priced,
            "weight_load": weight_loads(ops, chip, matmul & ~no_rate),
            "matmul_rate": measured["matmul_rate"],
            "memory_rate": measured["memory_rate"],
            "dcn": self.dcn_times(ops),
        }

    def dcn_times(self, ops: pd.DataFrame) -> np.ndarray:
        """Each multi-slice transfer's expected time over the data-centre network
        (:func:`~hlo_roofline.judge.interconnect.dcn_expected_time`, once per execution); 0 for
        other rows. Whether it hides behind compute is the schedule's to say."""
        times, cal = np.zeros(len(ops)), self.chip.calibration
        if "replica_group" not in ops or not (cal.dcn_efficiency or cal.dcn_step_s):
            return times
        comm = ops["comm_bytes"].to_numpy(dtype=float)
        texts = ops["replica_group"].to_numpy()
        groups = {t: device_group(t) for t in dict.fromkeys(texts[comm > 0])}  # typed (cost's)
        slices = {t: g.dcn_slices if g is not None else None for t, g in groups.items()}
        count = ops["count"].to_numpy(dtype=float)
        buffer = ops["bytes_accessed"].to_numpy(dtype=float)
        for i in np.flatnonzero(comm > 0):
            n = slices[texts[i]]
            if not n:
                continue
            runs = count[i] or 1.0
            times[i] = runs * interconnect.dcn_expected_time(
                self.chip, comm[i] / runs, buffer[i] / runs, n
            )
        return times


MODELS: dict[str, type[TimeModel]] = {"tpu": TpuTimeModel, "gpu": GpuTimeModel}


def for_kind(kind: str) -> type[TimeModel]:
    """The time model of a chip of ``kind`` (``"tpu"``, ``"gpu"``; any other: the host's)."""
    return MODELS.get(kind, TimeModel)


def for_chip(chip: Chip) -> TimeModel:
    """The time model of one JAX device of ``chip`` (a chip's share where it has several)."""
    device = chip.per_device()
    return for_kind(device.kind)(device)


class BoundModel:
    """Hardware facts only: each op at the slowest of its units, memory and links
    (``t_bound_s``, its ``bound``), and the step no schedule can beat (``step_bound_s``: every
    unit, memory and link queue busy for the sum of its ops' times)."""

    def __init__(self, model: TimeModel) -> None:
        self.model = model

    def judge(self, ops: pd.DataFrame, rates: Rates, topology) -> Bound:
        t_compute, compute_unit, unit_times = self.model.unit_times(ops, rates)
        memory = self.model.memory_times(ops)
        t_comm, topology = self.model.link_times(ops, topology)
        times = np.stack([t_compute, memory.t_memory, t_comm])
        t_bound = times.max(axis=0)
        bound = np.array(BOUNDS[:3])[times.argmax(axis=0)].astype(object)
        bound[t_bound == 0] = "none"
        flops = ops["flops"].to_numpy(dtype=float)
        bound[ops["unknown"].to_numpy(dtype=bool) & (flops == 0)] = "unknown"
        bound[rates.no_rate] = "unknown"
        return Bound(t_compute, compute_unit, unit_times, memory, t_comm, t_bound, bound, topology)

    def step(self, ops: pd.DataFrame, bound: Bound) -> float:
        """``step_bound_s``: the busiest queue (:func:`busiest_queue`)."""
        memory = bound.memory
        return busiest_queue(ops, bound.unit_times, memory.t_hbm, memory.t_vmem, bound.t_comm)


class ExpectedModel:
    """The bound and every calibrated effect (each named with its evidence, never below the
    bound: ``t_expected_s``, ``expected_by``; the largest sets the op's run, and the backend's
    added effects, such as a GPU kernel's launch gap, come on top of it), and the step as XLA
    scheduled those times (``step_expected_s``, never below the bound's step)."""

    def __init__(self, model: TimeModel) -> None:
        self.model = model

    def judge(self, ops: pd.DataFrame, rates: Rates, bound: Bound) -> Expected:
        effects = self.model.calibrated_effects(ops, rates, bound)
        names = np.array(["", *effects], dtype=object)
        times = np.stack([bound.t_bound, *effects.values()])
        t_expected, expected_by = times.max(axis=0), names[times.argmax(axis=0)]
        added = self.model.added_effects(ops, bound)  # on top of the op's run, not instead
        if added:
            extra = np.stack(list(added.values()))
            largest = np.array(list(added), dtype=object)[extra.argmax(axis=0)]
            t_expected = t_expected + extra.sum(axis=0)
            expected_by = np.where(
                (expected_by == "") & (extra.sum(axis=0) > 0), largest, expected_by
            )
            effects = {**effects, **added}
        return Expected(t_expected, expected_by, effects, self.model.walk(ops, t_expected))

    def step(self, expected: Expected, step_bound: float) -> float:
        """XLA's schedule of the expected ops, and never below what the hardware allows (the walk
        does not see the HBM or units that async transfers share with the stream)."""
        return max(expected.scheduled.step_s, step_bound)


def models(chip: Chip) -> tuple[BoundModel, ExpectedModel]:
    """The two models of one device of ``chip``, over its backend's time model."""
    model = for_chip(chip)
    return BoundModel(model), ExpectedModel(model)


# -- the parts ----------------------------------------------------------------------------------


def busiest_queue(
    ops: pd.DataFrame,
    unit_times: dict[str, np.ndarray],
    t_hbm: np.ndarray,
    t_vmem: np.ndarray,
    t_comm: np.ndarray,
) -> float:
    """The step no schedule can beat (``step_bound_s``): every compute unit (MXU, vector unit,
    EUP), memory (HBM, VMEM) and link queue is busy at least the sum of its ops' bound times, so
    the step is at least the longest of them. On a TPU torus a collective's device group names
    its links (other groups may use other links, so each group is a queue: the least they could
    share); a GPU's collectives likewise, by group, over its NVLink and network ports. A program
    offloaded to another core (the ``offload`` column: XLA:TPU's SparseCore) is that core's."""
    offload = ops["offload"].to_numpy().astype(str) if "offload" in ops else np.full(len(ops), "")
    main = offload == ""
    queues = [float(t[main].sum()) for t in unit_times.values()]
    if not main.all():
        elsewhere = np.max(np.stack(list(unit_times.values())), axis=0)[~main]
        queues += [float(v) for v in pd.Series(elsewhere).groupby(offload[~main]).sum()]
    queues += [float(t_hbm.sum()), float(t_vmem.sum())]
    comm = t_comm > 0
    if comm.any():
        groups = ops["replica_group"].to_numpy()[comm] if "replica_group" in ops else None
        if groups is None:
            queues.append(float(t_comm.sum()))
        else:
            per_group = pd.Series(t_comm[comm]).groupby(groups.astype(str)).sum()
            queues += [float(v) for v in per_group]
    return max(queues, default=0.0)


def _comm_times(ops: pd.DataFrame, chip: Chip, topology) -> tuple[np.ndarray, object]:
    """Each row's link time on the topology its groups span (and that topology, or None)."""
    comm = ops["comm_bytes"].to_numpy(dtype=float)
    t_comm = np.zeros(len(ops))
    rows = np.flatnonzero(comm > 0)
    if not len(rows):
        return t_comm, None
    texts = ops["replica_group"].to_numpy() if "replica_group" in ops else np.full(len(ops), "")
    # each distinct text's typed devices, from the cost layer (None: unreadable, one ring)
    groups = {text: device_group(text) for text in dict.fromkeys(texts[rows])}
    across_slices = {text for text, group in groups.items() if group and group.dcn_slices}
    parsed = {t: g for t, g in groups.items() if g is not None and t not in across_slices}
    topology = _topology(chip, topology, parsed.values())
    spans: dict[str, interconnect.Span | None] = {}
    collective, group_size = ops["collective"].to_numpy(), ops["group_size"].to_numpy()
    count = ops["count"].to_numpy(dtype=float)
    for i in rows:
        text = texts[i]
        if text not in spans:
            spans[text] = _span(topology, parsed.get(text))
        per_run = comm[i] / count[i] if count[i] else comm[i]  # the link time of one execution
        if text in across_slices:  # the data-centre network, not the slice's links
            t = interconnect.dcn_time(chip, collective[i], per_run)
        else:
            t = interconnect.collective_time(
                chip, collective[i], per_run, int(group_size[i]), spans[text]
            )
        t_comm[i] = t * (count[i] or 1)
    return np.nan_to_num(t_comm), topology


def _topology(chip: Chip, given, groups) -> interconnect.Topology | None:
    """The topology given (a Topology, a mesh or its devices, a report's stored dict), else the
    one inferred from the devices the groups name."""
    if isinstance(given, interconnect.Topology):
        return given
    if isinstance(given, dict):
        given = interconnect.from_dict(given, chip)
        if given is not None:
            return given
    elif given is not None:
        return interconnect.from_devices(given, chip)
    devices = max((group.devices for group in groups), default=0)
    ids = [group.ids for group in groups if group.ids]
    return interconnect.infer(chip, devices, ids)


def _span(topology, parsed) -> interconnect.Span | None:
    if topology is None or parsed is None:
        return None
    return (
        topology.pair_span(parsed.pairs) if parsed.pairs is not None else topology.span(parsed.ids)
    )


def _prefetch_charges(ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray] | None:
    """For each row, the bytes it reads from a buffer XLA prefetched HBM→VMEM for it (the copy's
    HBM read, split evenly among its readers), and which rows are such prefetches; None if none.

    The copy exists only to feed its readers: the book's roofline for ``x @ w`` counts ``w`` once
    at HBM speed whatever XLA placed in VMEM, so the reader's verdict does too."""
    if "prefetch_for" not in ops:
        return None
    readers = ops["prefetch_for"].to_numpy()
    is_prefetch = readers != ""
    if not is_prefetch.any():
        return None
    row_of = {name: i for i, name in enumerate(ops["name"].to_numpy())}
    moved = np.zeros(len(ops))
    data = ops["bytes_accessed"].to_numpy(dtype=float)
    vmem = ops["vmem_bytes"].to_numpy(dtype=float)
    for i in np.flatnonzero(is_prefetch):
        names = [row_of[n] for n in readers[i].split(",") if n in row_of]
        for j in names:
            moved[j] += (data[i] - vmem[i]) / len(names)  # the copy's HBM read, once per step
    return moved, is_prefetch
