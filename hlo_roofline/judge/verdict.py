"""Roofline verdicts: each op's FLOPs and bytes against one chip's peaks, links and ridge, in two
models with one job each.

The bound, from hardware facts only: ``intensity = flops / bytes``; the peak it runs at
(matmul-class ops at the rate of their input dtype, f32 ones at the rate their precision asks for;
other ops at the vector rate); ``t_compute = (flops + transcendentals) / peak`` (MXU tiles padded),
``t_memory = bytes / HBM bandwidth`` (bytes in a TPU's VMEM at its own bandwidth, where the
database has one), ``t_comm`` from the book's collective model; ``t_bound = max`` of the three and
the ``bound`` that sets it. ``step_bound_s``: each unit, memory and link queue busy for the sum of
its ops' times, the step at least the busiest.

The expectation: ``t_expected`` is the bound and every calibrated effect of the chip's
:class:`~hlo_roofline.chips.Calibration` (XLA:TPU's charges, the measured per-op floor), never
below the bound; ``step_expected_s`` walks XLA's schedule with it (:mod:`hlo_roofline.judge.schedule`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from hlo_roofline import chips, schema
from hlo_roofline.chips import Chip
from hlo_roofline.cost.collectives import device_group
from hlo_roofline.judge import interconnect, schedule
from hlo_roofline.judge.compute import (
    COMPUTE_UNITS,
    charged_times,
    column,
    compute_times,
    fills,
    kernel_mxu_flops,
    loop_reads,
    major_reduces,
    matmul_pipeline,
    mxu_padding,
    op_floors,
    streams_columns,
)
from hlo_roofline.judge.hints import hint_columns, hint_text
from hlo_roofline.judge.step import (
    LOOP_FIELDS,
    REMAT,
    RIDGE_DTYPES,
    check_model_flops,
    chip_summary,
    loop_table,
    loops_summary,
    model_flops_summary,
    remat_summary,
)
from hlo_roofline.judge.xla_gap import BELOW_MEMORY_FLOOR, XLA_GAPS, xla_estimate, xla_gaps
from hlo_roofline.schema import BOUNDS

__all__ = [  # the time model's own names, and those its parts own (imported from here before)
    "BELOW_MEMORY_FLOOR",
    "BOUNDS",
    "COMPUTE_UNITS",
    "LOOP_FIELDS",
    "NO_RATE",
    "REMAT",
    "RIDGE_DTYPES",
    "VERDICT_COLUMNS",
    "XLA_GAPS",
    "check_model_flops",
    "classify",
    "fills",
    "hint_text",
    "loop_table",
    "loops_summary",
    "matmul_peak",
    "model_flops_summary",
    "mxu_padding",
    "remat_summary",
    "streams_columns",
    "vector_peak",
    "walk_schedule",
]

VERDICT_COLUMNS = schema.VERDICT_COLUMNS
NO_RATE = "compute time unknown: "  # how a row whose matmul dtype the chip has no rate for begins
# The rates ops run at are the chip's (see Chip.matmul_peak); the names stay here for callers.
matmul_peak = Chip.matmul_peak
vector_peak = Chip.vector_peak


def _matmul_rate(chip: Chip, dtype: str, precision: str) -> tuple[float, str]:
    """(peak, "") for a matmul's dtype and precision, or (NaN, why) when the chip has no rate for
    it (an element type without a rate class, such as s2 or f6e3m2fn, or a chip with no fallback)."""
    try:
        return chip.matmul_peak(dtype, precision or "default"), ""
    except ValueError:
        return math.nan, f"{NO_RATE}{chip.name} has no rate for {dtype} matmuls"


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


def classify(
    ops: pd.DataFrame, chip: Chip | str, topology=None, model_flops: float | None = None
) -> tuple[pd.DataFrame, schema.VerdictSummary]:
    """Add the verdict columns for ``chip`` to a report's ops; return them and summary entries.

    ``model_flops``: the user's analytic count of the model's FLOPs per device and step (MaxText's
    ``calculate_tflops_training_per_device`` × 1e12): the summary then gives the MFU against it
    beside the HLO's (see :func:`model_flops_summary`).

    ``topology`` places the program's devices for the collective model: an
    :class:`~hlo_roofline.judge.interconnect.Topology`, a mesh (or its devices in partition order), or
    a report's stored one; None infers it from the chip and the groups (see
    :mod:`hlo_roofline.judge.interconnect`).
    """
    chip = chips.get(chip) if isinstance(chip, str) else chip
    if not isinstance(chip, Chip):
        raise ValueError(f"chip must be a chip's name or a Chip, not {type(chip).__name__}")
    chip = chip.per_device()  # an HLO module runs on one JAX device (one TensorCore of a 7x)
    ops = ops.drop(columns=[c for c in VERDICT_COLUMNS if c in ops.columns])
    hbm = chip.hbm_bandwidth
    vector = chip.vector_peak()
    if "precision" not in ops:  # a report written before the column existed
        ops = ops.assign(precision=np.where(ops["mm_k"].to_numpy() > 0, "default", ""))
    matmul = ops["mm_k"].to_numpy() > 0
    # A matmul runs at its dtype's MXU peak; so does a custom kernel's matrix-unit work (an
    # attention kernel: its peak is the one its ridge is drawn against).
    rates: dict[tuple[str, str], tuple[float, str]] = {}  # (dtype, precision) -> (peak, problem)
    for key in set(zip(ops["dtype"][matmul], ops["precision"][matmul], strict=True)):
        rates[key] = _matmul_rate(chip, *key)
    kernel_mxu = np.where(matmul, 0.0, kernel_mxu_flops(ops))
    kernel_rates = {
        d: _matmul_rate(chip, d, "default")[0] for d in set(ops["dtype"][kernel_mxu > 0])
    }
    kernel_mxu[np.isnan(ops["dtype"].map(kernel_rates).to_numpy(dtype=float))] = 0.0  # no rate
    kernel = kernel_mxu > 0
    peaks = np.array(
        [
            rates[d, p][0] if mm else kernel_rates[d] if k else vector
            for d, p, mm, k in zip(
                ops["dtype"].to_numpy(), ops["precision"].to_numpy(), matmul, kernel, strict=True
            )
        ],
        dtype=float,
    )
    no_rate = np.isnan(peaks)
    flops = ops["flops"].to_numpy(dtype=float)
    data = ops["bytes_accessed"].to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        intensity = np.where(data > 0, flops / data, np.nan)
    padding = mxu_padding(ops, chip)  # the MXU work each matmul does per FLOP it asks for
    t_compute, compute_unit, unit_times = compute_times(
        ops, chip, matmul, np.where(no_rate, 1.0, peaks), padding, kernel_mxu
    )
    t_compute[no_rate], compute_unit[no_rate] = 0.0, ""
    for unit in unit_times.values():  # no rate, no time on any unit (nor in a queue's sum)
        unit[no_rate] = 0.0
    t_memory = data / hbm
    own_memory = t_memory  # at the op's own placement, no prefetch charged (XLA's view)
    t_vmem = np.zeros(len(ops))  # the part of t_memory spent on VMEM bytes
    hbm_bytes = data
    vmem_bandwidth = chip.vmem_bandwidth
    if vmem_bandwidth and "vmem_bytes" in ops:  # arrays XLA placed in VMEM move at its speed
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
        t_memory = hbm_bytes / hbm + t_vmem
    t_comm, topology = _comm_times(ops, chip, topology)
    times = np.stack([t_compute, t_memory, t_comm])
    # the bound: hardware facts only, each op at the slowest of its units, memory and links
    t_bound = times.max(axis=0)
    bound = np.array(BOUNDS[:3])[times.argmax(axis=0)].astype(object)
    bound[t_bound == 0] = "none"
    bound[ops["unknown"].to_numpy(dtype=bool) & (flops == 0)] = "unknown"
    bound[no_rate] = "unknown"
    # the expectation: the bound and every calibrated effect, each never below it
    effects = expected_effects(ops, chip, matmul, no_rate, unit_times, hbm_bytes, t_memory, t_vmem)
    t_expected, expected_by = _expected(t_bound, effects)
    step = float(t_expected.sum())
    is_collective = ops["collective"].to_numpy() != ""
    scheduled = walk_schedule(ops, chip.kind, t_expected)
    with np.errstate(divide="ignore", invalid="ignore"):  # seconds per byte this op moves
        per_byte = np.where(data > 0, t_memory / data, 1 / hbm)
    ops = ops.assign(
        intensity=intensity,
        critical_intensity=peaks * per_byte,  # peak / HBM bandwidth, unless bytes sit in VMEM
        bound=bound,
        t_compute_s=t_compute,
        compute_unit=compute_unit,
        t_memory_s=t_memory,
        t_comm_s=t_comm,
        t_bound_s=t_bound,
        t_expected_s=t_expected,
        expected_by=expected_by,
        share=t_expected / step if step else 0.0,
        t_exposed_s=scheduled.exposed_s,
        xla_estimate_s=xla_estimate(ops, chip),
    )
    ops["xla_gap"] = xla_gaps(
        ops, chip, t_expected, ops["xla_estimate_s"].to_numpy(), padding, own_memory
    )
    ops = ops.assign(**hint_columns(ops, matmul, no_rate, rates, chip, padding))
    ops = ops.assign(**_roof_columns(ops, t_compute, t_memory, t_vmem, flops, data))
    ops = ops[schema.ordered(ops.columns)]  # the report's columns in the schema's order
    upper = float(np.maximum(times.sum(axis=0), t_expected).sum())
    step_bound = busiest_queue(ops, unit_times, t_memory - t_vmem, t_vmem, t_comm)
    # the expected step is XLA's schedule of the expected ops, and never below what the hardware
    # allows (the walk does not see the HBM or units that async transfers share with the stream)
    expected = max(scheduled.step_s, step_bound)
    summary = chip_summary(ops, chip, step, upper, step_bound, expected)
    comm = float(t_expected[is_collective].sum())
    exposed = float(scheduled.exposed_s[is_collective].sum())
    floors = effects.get("floor", np.zeros(len(ops)))
    summary.update(
        floor_share=float((np.maximum(t_bound, floors) - t_bound).sum()) / step if step else 0.0,
        step_time_min_s=scheduled.least_s,
        step_expected_s=expected,
        comm_time_s=comm,
        exposed_comm_s=exposed,
        exposed_comm_share=exposed / expected if expected else 0.0,
        topology=topology.to_dict() if topology is not None else None,
        loops=loops_summary(ops),
        **remat_summary(ops, step),
        **model_flops_summary(float(flops.sum()), model_flops, chip, expected),
    )
    return ops, summary


def expected_effects(
    ops: pd.DataFrame,
    chip: Chip,
    matmul: np.ndarray,
    no_rate: np.ndarray,
    unit_times: dict[str, np.ndarray],
    hbm_bytes: np.ndarray,
    t_memory: np.ndarray,
    t_vmem: np.ndarray,
) -> dict[str, np.ndarray]:
    """Each calibrated effect's time per op (:data:`schema.EXPECTED_EFFECTS`), from the chip's
    :class:`~hlo_roofline.chips.Calibration` alone: what XLA:TPU's cost model charges beyond the
    hardware's work and the per-op floor. Zero where the chip has no such calibration (every
    chip of the ``book`` profile)."""
    rows, zero, cal = np.arange(len(ops)), np.zeros(len(ops)), chip.calibration
    charged = charged_times(ops, cal)
    pipeline = matmul_pipeline(
        chip, matmul & ~no_rate, unit_times, hbm_bytes, t_vmem, column(ops, "tile_steps", rows, 0.0),
        column(ops, "tile_reread_bytes", rows, 0.0),
        (column(ops, "tile_k_steps", rows, 0.0), column(ops, "epilogue_elements", rows, 0.0)),
        column(ops, "prologue_elements", rows, 0.0),
    )  # fmt: skip
    priced = np.where(no_rate, 0.0, 1.0)  # a row without a rate has no charged compute either
    return {
        "loop": charged["loop"] * priced,
        "fill": charged["fill"] * priced,
        "xlu": charged["xlu"] * priced,
        "floor": op_floors(ops, chip, matmul),
        "pipeline": pipeline,
        "loop_reads": loop_reads(ops, chip, matmul | no_rate, charged["loop"], hbm_bytes),
        "major_reduce": major_reduces(ops, chip, no_rate),
        "matmul_rate": unit_times["mxu"] / cal.matmul_efficiency if cal.matmul_efficiency else zero,
        "memory_rate": (t_memory - t_vmem) / cal.memory_efficiency + t_vmem
        if cal.memory_efficiency
        else zero,
    }


def _expected(t_bound: np.ndarray, effects: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Each op's expected time (the largest of its bound and its calibrated effects) and the
    effect that sets it above the bound ("" where the bound does)."""
    names = np.array(["", *effects], dtype=object)
    times = np.stack([t_bound, *effects.values()])
    return times.max(axis=0), names[times.argmax(axis=0)]


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


def walk_schedule(ops: pd.DataFrame, kind: str, durations: np.ndarray) -> schedule.Scheduled:
    """The step as scheduled (:func:`hlo_roofline.judge.schedule.walk`) for ops on a chip of ``kind``.

    On a TPU torus a collective's device group names the links it uses (another mesh axis is
    another ring of links); a GPU's collectives share its NVLink and network ports. A SparseCore
    offload queues on the SparseCore (the ``offload`` column)."""
    waits_for = ops["waits_for"].to_numpy() if "waits_for" in ops else np.full(len(ops), "")
    links = ops["replica_group"].to_numpy() if kind == "tpu" and "replica_group" in ops else None
    return schedule.walk(
        ops["name"].to_numpy(),
        ops["opcode"].to_numpy(),
        waits_for,
        ops["collective"].to_numpy() != "",
        durations,
        links,
        ops["offload"].to_numpy() if "offload" in ops else None,
    )


def _roof_columns(
    ops: pd.DataFrame,
    t_compute: np.ndarray,
    t_memory: np.ndarray,
    t_vmem: np.ndarray,
    flops: np.ndarray,
    data: np.ndarray,
) -> dict[str, np.ndarray]:
    """The roof behind each verdict, so a face draws it without arithmetic on the model: the
    FLOP/s the op's compute side reaches on its binding unit, the bandwidth its bytes move at,
    and the unit whose roof its bound point lies on. The bound's point (intensity, flops ÷
    ``t_bound_s``) lies on min(compute roof, intensity × memory roof) unless its link time sets
    it; the expected point (flops ÷ ``t_expected_s``) on or under it."""
    with np.errstate(divide="ignore", invalid="ignore"):
        roof_flops = np.where((flops > 0) & (t_compute > 0), flops / t_compute, np.nan)
        roof_bytes = np.where((data > 0) & (t_memory > 0), data / t_memory, np.nan)
    bound = ops["bound"].to_numpy()
    memory = np.where(t_vmem > t_memory - t_vmem, "vmem", "hbm")
    unit = np.select(
        [bound == "none", bound == "compute", bound == "memory", bound == "communication"],
        ["", ops["compute_unit"].to_numpy(dtype=object), memory, "link"],
        "",
    ).astype(object)
    return {"roof_flops_per_s": roof_flops, "roof_bytes_per_s": roof_bytes, "roof_unit": unit}
