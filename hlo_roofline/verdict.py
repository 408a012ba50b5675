"""Roofline verdicts: each op's FLOPs and bytes against one chip's peaks, links and ridge.

For every op: ``intensity = flops / bytes``; the peak it runs at (matmul-class ops at the rate of
their input dtype, f32 ones at the rate their precision asks for; other ops at the vector rate);
``t_compute = (flops + transcendentals) / peak``, ``t_memory = bytes / HBM bandwidth`` (bytes in a
TPU's VMEM at its own bandwidth, where the database has one), ``t_comm``
from the book's collective model; ``t_roofline = max`` of the three (perfect overlap) and the bound
that sets it. The step is predicted between Σ max (lower bound) and Σ sum (no overlap at all), as in
"How to Scale Your Model".
"""

from __future__ import annotations

import contextlib
import math
import warnings

import numpy as np
import pandas as pd

from hlo_roofline import chips, interconnect, schedule
from hlo_roofline.chips import Chip
from hlo_roofline.cost.collectives import parse_group_text

BOUNDS = ("compute", "memory", "communication", "unknown", "none")
VERDICT_COLUMNS = (
    "intensity", "critical_intensity", "bound", "t_compute_s", "compute_unit", "t_memory_s", "t_comm_s",
    "t_roofline_s", "share", "t_exposed_s", "hint", "xla_estimate_s", "xla_gap",
)  # fmt: skip
RIDGE_DTYPES = ("bf16", "fp8", "int8", "tf32", "fp32")
NO_RATE = "compute time unknown: "  # how a row whose matmul dtype the chip has no rate for begins


def _peak(chip: Chip, dtype: str) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", chips.RateFallbackWarning)
        return chip.peak_flops(dtype)


# Passes of the bf16 MXU a TPU makes for an f32 dot at each precision (JAX: HIGH is "bfloat16_3x";
# XLA:TPU compiles the BF16_BF16_F32_X6 algorithm to HIGHEST).
_TPU_F32_PASSES = {"default": 1, "high": 3, "highest": 6}


def matmul_peak(chip: Chip, dtype: str, precision: str = "default") -> float:
    """The rate a matmul runs at: its input dtype's, except that f32 inputs run at the rate their
    precision asks for — TF32 tensor cores on NVIDIA unless ``highest`` (JAX's default), one to
    six bf16 passes on a TPU — and an explicit algorithm (``dot_bf16_bf16_f32_x3``) at its own."""
    if precision.startswith("dot_"):
        parts = precision.split("_")  # dot_<lhs>_<rhs>_<accumulator>[_x<passes>]
        passes = int(parts[-1][1:]) if parts[-1][:1] == "x" and parts[-1][1:].isdigit() else 1
        with contextlib.suppress(ValueError):
            return _peak(chip, parts[1]) / passes
    if dtype != "f32":
        return _peak(chip, dtype)
    if chip.kind == "gpu" and precision != "highest" and chip.has_rate("tf32"):
        return _peak(chip, "tf32")
    if chip.kind == "tpu":
        return _peak(chip, "bf16") / _TPU_F32_PASSES.get(precision, 1)
    return _peak(chip, dtype)


def _matmul_rate(chip: Chip, dtype: str, precision: str) -> tuple[float, str]:
    """(peak, "") for a matmul's dtype and precision, or (NaN, why) when the chip has no rate for
    it (an element type without a rate class, such as s2 or f6e3m2fn, or a chip with no fallback)."""
    try:
        return matmul_peak(chip, dtype, precision or "default"), ""
    except ValueError:
        return math.nan, f"{NO_RATE}{chip.name} has no rate for {dtype} matmuls"


def _vmem_bandwidth(chip: Chip) -> float | None:
    """A TPU's VMEM bandwidth where the database has one (else VMEM bytes count at HBM speed)."""
    space = chip.memory.get("vmem")
    return space.bandwidth if space is not None else None


def vector_peak(chip: Chip) -> float:
    """Where elementwise work runs: the VPU where published, else CUDA-core fp32, else the MXU."""
    if chip.vpu_flops:
        return chip.vpu_flops
    if chip.kind == "gpu" and chip.has_rate("f32"):
        return _peak(chip, "f32")
    return _peak(chip, "bf16")


def _comm_times(ops: pd.DataFrame, chip: Chip, topology) -> tuple[np.ndarray, object]:
    """Each row's link time on the topology its groups span (and that topology, or None)."""
    comm = ops["comm_bytes"].to_numpy(dtype=float)
    t_comm = np.zeros(len(ops))
    rows = np.flatnonzero(comm > 0)
    if not len(rows):
        return t_comm, None
    texts = ops["replica_group"].to_numpy() if "replica_group" in ops else np.full(len(ops), "")
    parsed = {}
    for text in dict.fromkeys(texts[rows]):
        with contextlib.suppress(ValueError):  # unreadable: that collective is priced as one ring
            parsed[text] = parse_group_text(text) if text else None
    parsed = {t: p for t, p in parsed.items() if p is not None}
    topology = _topology(chip, topology, parsed.values())
    spans: dict[str, interconnect.Span | None] = {}
    collective, group_size = ops["collective"].to_numpy(), ops["group_size"].to_numpy()
    count = ops["count"].to_numpy(dtype=float)
    for i in rows:
        text = texts[i]
        if text not in spans:
            spans[text] = _span(topology, parsed.get(text))
        per_run = comm[i] / count[i] if count[i] else comm[i]  # the link time of one execution
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
    devices = max((total for _, _, total in groups), default=0)
    ids = [g for g, _, _ in groups if g]
    return interconnect.infer(chip, devices, ids)


def _span(topology, parsed) -> interconnect.Span | None:
    if topology is None or parsed is None:
        return None
    ids, pairs, _ = parsed
    return topology.pair_span(pairs) if pairs is not None else topology.span(ids)


def _mxu_width(chip: Chip) -> int:
    return chip.mxu[0] if chip.mxu else 0


def _padded(dims: np.ndarray, tile: int) -> np.ndarray:
    return -(-dims // tile) * tile


def mxu_padding(ops: pd.DataFrame, chip: Chip) -> np.ndarray:
    """How much more work each matmul does on the chip's MXUs than it asks for: the K×N weight
    tile padded to the systolic array's width (the M rows stream through it unpadded, as the book
    counts them); 1 where the chip has no MXU shape, or the op is a matrix-vector product (a
    depthwise convolution: it runs on the vector unit)."""
    width = _mxu_width(chip)
    n, k = (ops[c].to_numpy(dtype=np.int64) for c in ("mm_n", "mm_k"))
    factor = np.ones(len(ops))
    on_mxu = (n > 1) & (k > 1)
    if width and on_mxu.any():
        asked = (n * k)[on_mxu].astype(float)
        factor[on_mxu] = _padded(n[on_mxu], width) * _padded(k[on_mxu], width) / asked
    return factor


# The units an op's compute time can come from (the ``compute_unit`` column).
COMPUTE_UNITS = {
    "mxu": "matmul FLOPs (padded to the MXU's tiles on a TPU) at the matmul peak",
    "vector": "FLOPs at the vector peak (VPU, CUDA cores)",
    "eup": "transcendentals at the TPU EUP's rate",
    "loop": "elements through a TPU vector loop at the rate XLA:TPU's cost model charges",
    "xlu": "elements a standalone TPU reduce folds across lanes (XLU)",
}


def _compute_times(
    ops: pd.DataFrame, chip: Chip, matmul: np.ndarray, peaks: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each op's time on the units that run it, and the unit that sets it (the slowest).

    A matmul: its FLOPs on the MXU with padding (:func:`mxu_padding`), and the elements of its
    result through the vector unit. Any other op: FLOPs at the vector peak, transcendentals at the
    EUP's rate where the chip has one (else at the vector peak, with the FLOPs), and the elements of
    its loop through the vector unit where the chip has that rate (TPUs), a standalone reduce's
    elements across the lanes at the XLU's."""
    flops = ops["flops"].to_numpy(dtype=float)
    transcendentals = ops["transcendentals"].to_numpy(dtype=float)
    mxu_flops = (
        2.0
        * ops["count"].to_numpy(dtype=float)
        * np.prod(
            [ops[c].to_numpy(dtype=float) for c in ("mm_batch", "mm_m", "mm_n", "mm_k")], axis=0
        )
    )
    padding = mxu_padding(ops, chip) - 1.0
    zero = np.zeros(len(ops))
    eup = transcendentals / chip.eup_rate if chip.eup_rate else zero
    vector = (flops if chip.eup_rate else flops + transcendentals) / peaks
    candidates = {
        "mxu": np.where(matmul, (flops + transcendentals + mxu_flops * padding) / peaks, 0.0),
        "vector": np.where(matmul, 0.0, vector),
        "eup": np.where(matmul, 0.0, eup),
        "loop": zero,
        "xlu": zero,
    }
    if chip.vector_elements_rate and "vector_elements" in ops:
        elements = ops["vector_elements"].to_numpy(dtype=float)
        candidates["loop"] = elements / chip.vector_elements_rate
    if chip.lane_reduce_rate and "lane_reduced_elements" in ops:
        candidates["xlu"] = (
            ops["lane_reduced_elements"].to_numpy(dtype=float) / chip.lane_reduce_rate
        )
    times = np.stack(list(candidates.values()))
    unit = np.array(list(candidates), dtype=object)[times.argmax(axis=0)]
    t_compute = times.max(axis=0)
    unit[t_compute == 0] = ""
    return t_compute, unit


def _op_floors(ops: pd.DataFrame, chip: Chip, matmul: np.ndarray) -> np.ndarray:
    """The least time each op that runs on the core takes: the chip's per-op overhead (a TPU's,
    where the database has one) once per execution; 0 for ops that only move data by DMA."""
    if not chip.op_floor_s or "vector_elements" not in ops:
        return np.zeros(len(ops))
    runs_on_core = (ops["vector_elements"].to_numpy(dtype=float) > 0) | matmul
    return np.where(runs_on_core, chip.op_floor_s * ops["count"].to_numpy(dtype=float), 0.0)


# Why XLA:TPU's estimate sits far above every roof of an op, as far as the model can tell.
XLA_GAPS = {
    "tiny_op": "XLA charges each op a fixed overhead; the op's work is a small part of it",
    "mxu_padding": "N or K far below the MXU width: XLA pays for whole tiles",
    "mxu_weight_loads": "few rows (M) per weight tile: XLA charges each K×N tile's load",
    "vector_matmul": "a matrix-vector product (depthwise convolution): no MXU, vector loop",
    "layout_change": "a transpose or layout-changing copy: XLA charges more than its bytes",
    "lane_reduction": "a reduction across lanes: XLA charges more than its elements",
    "unexplained": "no unit the model has explains XLA's time",
}
_FAR_ABOVE = 2.0  # XLA's estimate over the roofline at which a row names the gap


def _xla_gaps(ops: pd.DataFrame, chip: Chip, t_roofline: np.ndarray, xla: np.ndarray):
    """For each op whose XLA:TPU estimate is over twice its roofline time, the likely reason (a
    key of :data:`XLA_GAPS`); "" elsewhere. Information for the user, never fitted away."""
    gaps = np.full(len(ops), "", dtype=object)
    with np.errstate(divide="ignore", invalid="ignore"):
        far = np.flatnonzero(xla > _FAR_ABOVE * t_roofline)
    if not len(far):
        return gaps
    padding = mxu_padding(ops, chip)
    width = _mxu_width(chip)
    floor = (chip.op_floor_s or 0.0) * ops["count"].to_numpy(dtype=float)
    columns = ("opcode", "fused_ops", "mm_m", "mm_n", "mm_k")
    opcode, fused, m, n, k = (ops[c].to_numpy() for c in columns)
    for i in far:
        if k[i] > 0:
            reason = (
                "vector_matmul" if min(n[i], k[i]) == 1
                else "mxu_padding" if padding[i] >= 1.5
                else "mxu_weight_loads" if width and m[i] < 8 * width
                else "unexplained"
            )  # fmt: skip
        elif opcode[i] in ("copy", "transpose") or "transpose" in fused[i] or "copy" in fused[i]:
            reason = "layout_change"
        elif opcode[i] == "reduce" or "reduce" in fused[i]:
            reason = "lane_reduction"
        elif t_roofline[i] <= _FAR_ABOVE * floor[i]:
            reason = "tiny_op"
        else:
            reason = "unexplained"
        gaps[i] = reason
    return gaps


def _hint(row, critical: float, chip: Chip) -> str:
    """What would move a matmul: the lhs rows (M) at which it reaches the ridge, else the
    contracting size (K: the tokens of a weight gradient) at which it would; MXU padding."""
    m, n, k = int(row.mm_m), int(row.mm_n), int(row.mm_k)
    if not k:
        return ""
    b = max(row.bytes_accessed / row.count, 1.0) if row.count else 1.0
    elements = row.mm_batch * (m * k + k * n + m * n)
    per_element = b / elements if elements else 2.0  # bytes per element of the op's tensors
    denominator = 2 * n * k - critical * per_element * (k + n)
    parts = []
    if row.mm_batch > 1:  # batch dims on both operands: each batch element brings its own weights
        state = "compute-bound" if row.intensity >= critical else "memory-bound"
        parts.append(
            f"{state}: batched weights keep intensity at {row.intensity:.3g} FLOP/B whatever the "
            f"batch (ridge {critical:.0f}); cannot reach the ridge by growing the batch"
            if state == "memory-bound"
            else f"{state}: batched matmul at {row.intensity:.3g} FLOP/B (ridge {critical:.0f})"
        )
    elif denominator <= 0:  # no M helps; the contracting dim may (tokens, in a weight gradient)
        k_denominator = 2 * m * n - critical * per_element * (m + n)
        if k_denominator > 0:
            ridge_k = critical * per_element * m * n / k_denominator
            parts.append(
                f"no M reaches the ridge ({critical:.0f} FLOP/B): N·K too small; "
                f"the contracting dim would at K≈{ridge_k:.0f} (K={k})"
            )
        else:
            parts.append(f"cannot reach the ridge ({critical:.0f} FLOP/B) at any M or K")
    else:
        ridge_m = critical * per_element * k * n / denominator
        state = "compute-bound" if m >= ridge_m else "memory-bound"
        parts.append(f"{state} at M={m}; ridge at M≈{ridge_m:.0f}")
    width = _mxu_width(chip)
    if width:  # the MXU holds K×N weight tiles; the M rows stream through, so only N and K pad
        padded = [-(-d // width) * width for d in (n, k)]
        waste = 1 - (n * k) / math.prod(padded) if all(padded) else 0.0
        if waste > 0.01:
            parts.append(f"MXU {width}-padding of N,K={n},{k} wastes {waste:.0%}")
    return "; ".join(parts)


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


def _xla_estimate(ops: pd.DataFrame, chip: Chip) -> np.ndarray:
    """XLA:TPU's own time for each op as compiled: its cycle estimate at the chip's clock (NaN
    where the compiler recorded none, or the chip has no clock). Shown beside the roofline and
    used to check it; never part of it."""
    if "xla_cycles" not in ops or not chip.clock_hz:
        return np.full(len(ops), np.nan)
    return ops["xla_cycles"].to_numpy(dtype=float) / chip.clock_hz


def classify(ops: pd.DataFrame, chip: Chip | str, topology=None) -> tuple[pd.DataFrame, dict]:
    """Add the verdict columns for ``chip`` to a report's ops; return them and summary entries.

    ``topology`` places the program's devices for the collective model: an
    :class:`~hlo_roofline.interconnect.Topology`, a mesh (or its devices in partition order), or
    a report's stored one; None infers it from the chip and the groups (see
    :mod:`hlo_roofline.interconnect`).
    """
    chip = chips.get(chip) if isinstance(chip, str) else chip
    if not isinstance(chip, Chip):
        raise ValueError(f"chip must be a chip's name or a Chip, not {type(chip).__name__}")
    ops = ops.drop(columns=[c for c in VERDICT_COLUMNS if c in ops.columns])
    hbm = chip.hbm_bandwidth
    vector = vector_peak(chip)
    if "precision" not in ops:  # a report written before the column existed
        ops = ops.assign(precision=np.where(ops["mm_k"].to_numpy() > 0, "default", ""))
    matmul = ops["mm_k"].to_numpy() > 0
    rates: dict[tuple[str, str], tuple[float, str]] = {}  # (dtype, precision) -> (peak, problem)
    for key in set(zip(ops["dtype"][matmul], ops["precision"][matmul], strict=True)):
        rates[key] = _matmul_rate(chip, *key)
    peaks = np.array(
        [
            rates[d, p][0] if mm else vector
            for d, p, mm in zip(ops["dtype"], ops["precision"], matmul, strict=True)
        ],
        dtype=float,
    )
    no_rate = np.isnan(peaks)
    flops = ops["flops"].to_numpy(dtype=float)
    data = ops["bytes_accessed"].to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        intensity = np.where(data > 0, flops / data, np.nan)
    t_compute, compute_unit = _compute_times(ops, chip, matmul, np.where(no_rate, 1.0, peaks))
    t_compute[no_rate], compute_unit[no_rate] = 0.0, ""
    t_memory = data / hbm
    vmem_bandwidth = _vmem_bandwidth(chip)
    if vmem_bandwidth and "vmem_bytes" in ops:  # arrays XLA placed in VMEM move at its speed
        vmem = ops["vmem_bytes"].to_numpy(dtype=float)
        hbm_bytes = data - vmem
        prefetch = _prefetch_charges(ops)
        if prefetch is not None:  # a prefetched operand is HBM traffic of the op that reads it
            moved, is_prefetch = prefetch
            moved = np.minimum(moved, vmem)
            hbm_bytes, vmem = hbm_bytes + moved, vmem - moved
            hbm_bytes[is_prefetch] = vmem[is_prefetch] = 0.0  # counted once, in its readers
        t_memory = hbm_bytes / hbm + vmem / vmem_bandwidth
    t_comm, topology = _comm_times(ops, chip, topology)
    times = np.stack([t_compute, t_memory, t_comm])
    # an op takes at least the chip's per-op floor; its bound is the unit that would set it above
    floors = _op_floors(ops, chip, matmul)
    t_roofline = np.maximum(times.max(axis=0), floors)
    bound = np.array(BOUNDS[:3])[times.argmax(axis=0)].astype(object)
    bound[t_roofline == 0] = "none"
    bound[ops["unknown"].to_numpy(dtype=bool) & (flops == 0)] = "unknown"
    bound[no_rate] = "unknown"
    step = float(t_roofline.sum())
    is_collective = ops["collective"].to_numpy() != ""
    waits_for = ops["waits_for"].to_numpy() if "waits_for" in ops else np.full(len(ops), "")
    scheduled = schedule.walk(
        ops["name"].to_numpy(), ops["opcode"].to_numpy(), waits_for, is_collective, t_roofline
    )
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
        t_roofline_s=t_roofline,
        share=t_roofline / step if step else 0.0,
        t_exposed_s=scheduled.exposed_s,
        xla_estimate_s=_xla_estimate(ops, chip),
    )
    ops["xla_gap"] = _xla_gaps(ops, chip, t_roofline, ops["xla_estimate_s"].to_numpy())
    ops["hint"] = [
        _hint(row, ci, chip) if mm and not missing else ""
        for row, ci, mm, missing in zip(
            ops.itertuples(), ops["critical_intensity"], matmul, no_rate, strict=True
        )
    ]
    if ops["note"].str.contains(NO_RATE, regex=False).any():  # judged before, on another chip
        ops["note"] = [
            "; ".join(p for p in note.split("; ") if not p.startswith(NO_RATE)) if NO_RATE in note
            else note for note in ops["note"]
        ]  # fmt: skip
    if no_rate.any():  # the row says why its compute time is missing
        problems = [rates[d, p][1] if missing else "" for d, p, missing in
                    zip(ops["dtype"], ops["precision"], no_rate, strict=True)]  # fmt: skip
        ops["note"] = [
            "; ".join(filter(None, (note, problem)))
            for note, problem in zip(ops["note"], problems, strict=True)
        ]
    if "prefetch_for" in ops:  # the copy row stays, saying whom it feeds
        is_prefetch = ops["prefetch_for"].to_numpy() != ""
        ops.loc[is_prefetch, "hint"] = [
            f"HBM→VMEM prefetch for {names}: its HBM time is charged to them"
            for names in ops.loc[is_prefetch, "prefetch_for"]
        ]
    summary = _summary(ops, chip, step, float(np.maximum(times.sum(axis=0), floors).sum()))
    comm = float(t_roofline[is_collective].sum())
    exposed = float(scheduled.exposed_s[is_collective].sum())
    summary.update(
        step_time_scheduled_s=scheduled.step_s,
        comm_time_s=comm,
        exposed_comm_s=exposed,
        exposed_comm_share=exposed / scheduled.step_s if scheduled.step_s else 0.0,
        topology=topology.to_dict() if topology is not None else None,
    )
    return ops, summary


def _summary(ops: pd.DataFrame, chip: Chip, step: float, upper: float) -> dict:
    time_by_bound = ops.groupby("bound")["t_roofline_s"].sum()
    # MFU against the peak most matmul FLOPs run at (their dtype and precision; bf16 without any)
    priced = (ops["mm_k"] > 0) & (ops["bound"] != "unknown")
    matmul_flops = ops[priced].groupby(["dtype", "precision"])["flops"].sum()
    mfu_dtype, mfu_precision = (
        matmul_flops.idxmax() if len(matmul_flops) and matmul_flops.max() > 0 else ("bf16", "")
    )
    peak = matmul_peak(chip, str(mfu_dtype), str(mfu_precision) or "default")
    flops = float(ops["flops"].sum())
    roofs = {}
    for dtype in RIDGE_DTYPES:
        if chip.has_rate(dtype):
            rate = _peak(chip, dtype)
            roofs[dtype] = {"peak_flops": rate, "critical_intensity": rate / chip.hbm_bandwidth}
    roofs["vector"] = {
        "peak_flops": vector_peak(chip),
        "critical_intensity": vector_peak(chip) / chip.hbm_bandwidth,
    }
    in_vmem = "vmem_bytes" in ops and float(ops["vmem_bytes"].sum()) > 0  # a second memory roof
    return {
        "chip": chip.key,
        "chip_name": chip.name,
        "chip_profile": chip.profile,
        "step_time_lower_s": step,
        "step_time_upper_s": upper,
        "mfu_upper_bound": flops / (peak * step) if step else 0.0,
        "mfu_dtype": (
            f"{mfu_dtype} ({mfu_precision} precision)"
            if mfu_dtype == "f32" and mfu_precision not in ("", "default")
            else str(mfu_dtype)
        ),
        "time_share": {
            b: float(time_by_bound.get(b, 0.0)) / step if step else 0.0 for b in BOUNDS[:4]
        },
        "hbm_bandwidth": chip.hbm_bandwidth,
        "vmem_bandwidth": _vmem_bandwidth(chip) if in_vmem else None,
        "roofs": roofs,
    }
