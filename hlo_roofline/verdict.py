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
    "intensity", "critical_intensity", "bound", "t_compute_s", "t_memory_s", "t_comm_s",
    "t_roofline_s", "share", "t_exposed_s", "hint", "xla_estimate_s",
)  # fmt: skip
RIDGE_DTYPES = ("bf16", "fp8", "int8", "tf32", "fp32")


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
    parsed = {t: parse_group_text(t) for t in dict.fromkeys(texts[rows]) if t}
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
    ops = ops.drop(columns=[c for c in VERDICT_COLUMNS if c in ops.columns])
    hbm = chip.hbm_bandwidth
    vector = vector_peak(chip)
    if "precision" not in ops:  # a report written before the column existed
        ops = ops.assign(precision=np.where(ops["mm_k"].to_numpy() > 0, "default", ""))
    matmul = ops["mm_k"].to_numpy() > 0
    peaks = np.array(
        [
            matmul_peak(chip, d, p or "default") if mm else vector
            for d, p, mm in zip(ops["dtype"], ops["precision"], matmul, strict=True)
        ],
        dtype=float,
    )
    flops = ops["flops"].to_numpy(dtype=float)
    work = flops + ops["transcendentals"].to_numpy(dtype=float)
    data = ops["bytes_accessed"].to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        intensity = np.where(data > 0, flops / data, np.nan)
    t_compute = work / peaks
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
    t_roofline = times.max(axis=0)
    bound = np.array(BOUNDS[:3])[times.argmax(axis=0)].astype(object)
    bound[t_roofline == 0] = "none"
    bound[ops["unknown"].to_numpy(dtype=bool) & (flops == 0)] = "unknown"
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
        t_memory_s=t_memory,
        t_comm_s=t_comm,
        t_roofline_s=t_roofline,
        share=t_roofline / step if step else 0.0,
        t_exposed_s=scheduled.exposed_s,
        xla_estimate_s=_xla_estimate(ops, chip),
    )
    ops["hint"] = [
        _hint(row, ci, chip) if mm else ""
        for row, ci, mm in zip(ops.itertuples(), ops["critical_intensity"], matmul, strict=True)
    ]
    if "prefetch_for" in ops:  # the copy row stays, saying whom it feeds
        is_prefetch = ops["prefetch_for"].to_numpy() != ""
        ops.loc[is_prefetch, "hint"] = [
            f"HBM→VMEM prefetch for {names}: its HBM time is charged to them"
            for names in ops.loc[is_prefetch, "prefetch_for"]
        ]
    summary = _summary(ops, chip, step, float(times.sum()))
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
    matmul_flops = ops[ops["mm_k"] > 0].groupby(["dtype", "precision"])["flops"].sum()
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
