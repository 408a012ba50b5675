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

from hlo_roofline import chips, interconnect, schedule, schema
from hlo_roofline.chips import Chip
from hlo_roofline.cost.collectives import dcn_slices, parse_group_text
from hlo_roofline.hlo.ir import DTYPE_BYTES
from hlo_roofline.hlo.parser import HloParseError, parse_shape

BOUNDS = ("compute", "memory", "communication", "unknown", "none")
VERDICT_COLUMNS = schema.VERDICT_COLUMNS
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
            parsed[text] = parse_group_text(text) if text and not dcn_slices(text) else None
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
        if dcn_slices(text):  # across slices: the data-centre network, not the slice's links
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


_FEW_COLUMNS = 8  # N below a vector register's sublanes: the matmul streams N, holds M


def _holds_rows(m, n):
    """Where a matmul of M rows and N columns holds its rows in the MXU: N below 8 (NumPy arrays
    or plain numbers)."""
    return (n > 0) & (n < _FEW_COLUMNS) & (m > n)


def streams_columns(ops: pd.DataFrame) -> np.ndarray:
    """The matmuls whose N is below 8 (a decode step's scores, one query against a cache of
    keys): the MXU holds the K×M operand and streams the N columns through it, so M, not N, is
    padded to its width (XLA:TPU's estimates for such products are far below N padded to 128)."""
    m, n, k = (ops[c].to_numpy(dtype=np.int64) for c in ("mm_m", "mm_n", "mm_k"))
    return _holds_rows(m, n) & (k > 1)


def mxu_padding(ops: pd.DataFrame, chip: Chip) -> np.ndarray:
    """How much more work each matmul does on the chip's MXUs than it asks for: the K×N weight
    tile padded to the systolic array's width (the M rows stream through it unpadded, as the book
    counts them), or the K×M tile where it streams its few N columns (:func:`streams_columns`);
    1 where the chip has no MXU shape, or the op is a matrix-vector product (a depthwise
    convolution: it runs on the vector unit)."""
    width = _mxu_width(chip)
    m, n, k = (ops[c].to_numpy(dtype=np.int64) for c in ("mm_m", "mm_n", "mm_k"))
    held = np.where(streams_columns(ops), m, n)  # the operand's dim the array holds
    factor = np.ones(len(ops))
    on_mxu = (held > 1) & (k > 1)
    if width and on_mxu.any():
        asked = (held * k)[on_mxu].astype(float)
        factor[on_mxu] = _padded(held[on_mxu], width) * _padded(k[on_mxu], width) / asked
    return factor


# The units an op's compute time can come from (the ``compute_unit`` column).
COMPUTE_UNITS = {
    "mxu": "matmul FLOPs (padded to the MXU's tiles on a TPU) at the matmul peak",
    "vector": "FLOPs at the vector peak (VPU, CUDA cores)",
    "eup": "transcendentals at the TPU EUP's rate",
    "loop": "elements through a TPU vector loop at the rate XLA:TPU's cost model charges",
    "fill": "elements a TPU fill (a broadcast of a scalar: zeros) writes, at its own rate",
    "xlu": "elements a standalone TPU reduce folds across lanes (XLU)",
}


def _compute_times(
    ops: pd.DataFrame,
    chip: Chip,
    matmul: np.ndarray,
    peaks: np.ndarray,
    padding: np.ndarray,
    kernel_mxu: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Each op's time on the units that run it, and the unit that sets it (the slowest).

    A matmul: its FLOPs on the MXU with ``padding`` (:func:`mxu_padding`), and the elements of its
    result through the vector unit. Any other op: FLOPs at the vector peak, transcendentals at the
    EUP's rate where the chip has one (else at the vector peak, with the FLOPs), and the elements of
    its loop through the vector unit where the chip has that rate (TPUs), a standalone reduce's
    elements across the lanes at the XLU's. A custom kernel with ``kernel_mxu`` FLOPs (an
    attention kernel's, where the chip has a rate for its dtype): those at its MXU peak
    (``peaks``), the rest of its FLOPs at the vector peak."""
    flops = ops["flops"].to_numpy(dtype=float)
    transcendentals = ops["transcendentals"].to_numpy(dtype=float)
    kernel = kernel_mxu > 0
    mxu_flops = (
        2.0
        * ops["count"].to_numpy(dtype=float)
        * np.prod(
            [ops[c].to_numpy(dtype=float) for c in ("mm_batch", "mm_m", "mm_n", "mm_k")], axis=0
        )
    )
    zero = np.zeros(len(ops))
    eup = transcendentals / chip.eup_rate if chip.eup_rate else zero
    on_vector = np.where(kernel, flops - kernel_mxu, flops)
    vector = (on_vector if chip.eup_rate else on_vector + transcendentals) / np.where(
        kernel, vector_peak(chip), peaks
    )
    candidates = {
        "mxu": np.where(
            matmul,
            (flops + transcendentals + mxu_flops * (padding - 1)) / peaks,
            np.where(kernel, kernel_mxu / peaks, 0.0),
        ),
        "vector": np.where(matmul, 0.0, vector),
        "eup": np.where(matmul, 0.0, eup),
        "loop": zero,
        "fill": zero,
        "xlu": zero,
    }
    if chip.vector_elements_rate and "vector_elements" in ops:
        elements = ops["vector_elements"].to_numpy(dtype=float)
        fill = fills(ops) if chip.fill_rate else np.zeros(len(ops), dtype=bool)
        candidates["loop"] = np.where(fill, 0.0, elements) / chip.vector_elements_rate
        if chip.fill_rate:
            candidates["fill"] = np.where(fill, elements, 0.0) / chip.fill_rate
    if chip.lane_reduce_rate and "lane_reduced_elements" in ops:
        candidates["xlu"] = (
            ops["lane_reduced_elements"].to_numpy(dtype=float) / chip.lane_reduce_rate
        )
    times = np.stack(list(candidates.values()))
    unit = np.array(list(candidates), dtype=object)[times.argmax(axis=0)]
    t_compute = times.max(axis=0)
    unit[t_compute == 0] = ""
    return t_compute, unit


_FILL_READS = 1 / 64  # what a fill may read per byte it writes (a row broadcast down the rows)


def fills(ops: pd.DataFrame) -> np.ndarray:
    """The rows that fill an HBM array from (almost) nothing: a ``broadcast``, or a fusion of
    nothing but one, whose bytes are its result's and at most 1/64 more (a scalar, a row
    repeated down the rows: zeros, ``jnp.full``, a bias spread over a batch). XLA:TPU charges
    those per element written at a rate of their own (the chip's ``vpu.fill``); a broadcast
    that reads more (into sublanes, 1/8) or lands in VMEM runs as any loop."""
    opcode, fused = ops["opcode"].to_numpy(), ops["fused_ops"].to_numpy()
    broadcast = (opcode == "broadcast") | ((opcode == "fusion") & (fused == "broadcast"))
    if not broadcast.any():
        return broadcast
    itemsize = ops["dtype"].map(DTYPE_BYTES).fillna(0).to_numpy(dtype=float)
    written = ops["vector_elements"].to_numpy(dtype=float) * itemsize
    data = ops["bytes_accessed"].to_numpy(dtype=float)
    vmem = _column(ops, "vmem_bytes", np.arange(len(ops)), 0.0)
    return (
        broadcast & (written > 0) & (data <= written * (1 + _FILL_READS)) & (vmem <= data - written)
    )  # the array it writes is in HBM (what it reads may be in VMEM)


def _kernel_mxu_flops(ops: pd.DataFrame) -> np.ndarray:
    """Each op's ``kernel_mxu_flops`` (0 where the report predates the column)."""
    if "kernel_mxu_flops" not in ops:
        return np.zeros(len(ops))
    return ops["kernel_mxu_flops"].to_numpy(dtype=float)


def _op_floors(ops: pd.DataFrame, chip: Chip, matmul: np.ndarray) -> np.ndarray:
    """The least time each op that runs on the core takes: the chip's per-op overhead (a TPU's,
    where the database has one) once per execution; 0 for ops that only move data by DMA."""
    if not chip.op_floor_s or "vector_elements" not in ops:
        return np.zeros(len(ops))
    runs_on_core = (ops["vector_elements"].to_numpy(dtype=float) > 0) | matmul
    return np.where(runs_on_core, chip.op_floor_s * ops["count"].to_numpy(dtype=float), 0.0)


# Why XLA:TPU's estimate sits outside the roofline's reach (``xla_gap``): owned by the schema.
XLA_GAPS = schema.XLA_GAPS
BELOW_MEMORY_FLOOR = schema.BELOW_MEMORY_FLOOR
_FAR_ABOVE = 2.0  # XLA's estimate over the roofline at which a row names the gap


def _xla_gaps(
    ops: pd.DataFrame,
    chip: Chip,
    t_roofline: np.ndarray,
    xla: np.ndarray,
    padding: np.ndarray,
    own_memory: np.ndarray,
):
    """For each op whose XLA:TPU estimate the roofline cannot meet, why (a key of
    :data:`XLA_GAPS`); "" elsewhere. Information for the user, never fitted away.

    Below: XLA's estimate under ``own_memory``, the time the op's own bytes take where XLA
    placed them (HBM, or VMEM at its bandwidth; a prefetch it reads is not charged, as XLA's
    per-op number does not see it). No lower bound can sit under that, so the row is XLA's
    implausibility, not the roofline's: ``below_memory_floor``. Above: XLA's estimate over
    twice the roofline, the likely reason."""
    gaps = np.full(len(ops), "", dtype=object)
    with np.errstate(invalid="ignore"):
        gaps[xla < own_memory] = BELOW_MEMORY_FLOOR
    with np.errstate(divide="ignore", invalid="ignore"):
        far = np.flatnonzero(xla > _FAR_ABOVE * t_roofline)
    if not len(far):
        return gaps
    width = _mxu_width(chip)
    floor = (chip.op_floor_s or 0.0) * ops["count"].to_numpy(dtype=float)
    columns = ("opcode", "fused_ops", "mm_m", "mm_n", "mm_k")
    opcode, fused, m, n, k = (ops[c].to_numpy() for c in columns)
    streamed = np.where(streams_columns(ops), n, m)  # the rows each held weight tile sees
    for i in far:
        if k[i] > 0:
            reason = (
                "vector_matmul" if min(n[i], k[i]) == 1
                else "mxu_padding" if padding[i] >= 1.5
                else "mxu_weight_loads" if width and streamed[i] < 8 * width
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


def _column(ops: pd.DataFrame, name: str, rows: np.ndarray, default: float) -> np.ndarray:
    if name not in ops:  # a report written before the column existed
        return np.full(len(rows), default)
    return ops[name].to_numpy(dtype=float)[rows]


def _hints(
    ops: pd.DataFrame, rows: np.ndarray, ridge: np.ndarray, chip: Chip, padding: np.ndarray
) -> dict[str, np.ndarray]:
    """The hint fields of the matmul rows ``rows`` (``ridge``: the intensity at which each one's
    compute time meets its memory time; ``padding``: :func:`mxu_padding` of those rows), from its
    geometry and how its arrays cross HBM.

    From the op as it is, one more lhs row (M) adds ``2·N·K`` FLOPs and ``K·lhs + N·out`` bytes
    per batch element, each array at its own element size (s8 in, s32 out: 1 and 4 B), and its
    share of the bytes a fusion moves besides the matmul's arrays (result-shaped: an activation
    saved, a weight update); the weights and other FLOPs (a fused convert) stay. Where that line
    crosses the ridge is the M at which the verdict flips: exact for a single matmul, and on the
    row's own verdict for any op. Along K (the extras fixed) it gives the contracting size where
    no M reaches the ridge. Per-batch weights (batch dims on both operands) keep the intensity
    whatever the batch, so M and K are per batch element; a split-K GEMM is solved as the one
    unsplit GEMM it computes (weights and result once), which is what XLA compiles at a larger
    M."""
    count = _column(ops, "count", rows, 1.0)
    count = np.where(count > 0, count, 1.0)
    flops, data = _column(ops, "flops", rows, 0.0), _column(ops, "bytes_accessed", rows, 0.0)
    batch = np.maximum(_column(ops, "mm_batch", rows, 1.0), 1.0)
    m, n, k = (_column(ops, c, rows, 0.0) for c in ("mm_m", "mm_n", "mm_k"))
    slices = np.maximum(_column(ops, "mm_split_k", rows, 1.0), 1.0)
    batch, k_total = batch / slices, k * slices  # a split-K GEMM as the one GEMM it computes
    sizes = [
        _column(ops, c, rows, np.nan) for c in ("mm_lhs_bytes", "mm_rhs_bytes", "mm_out_bytes")
    ]
    with np.errstate(divide="ignore", invalid="ignore"):
        elements = count * batch * (m * k_total + k_total * n + m * n)
        average = np.where(elements > 0, data / elements, 2.0)  # no element sizes: their mean
    lhs, rhs, out = (np.where(np.isnan(e) | (e <= 0), average, e) for e in sizes)
    split = slices > 1
    per = count * batch  # matmuls of this shape per step
    row_bytes = per * (k_total * lhs + n * out)  # an lhs row and a result row
    weights, results = per * k_total * n * rhs, per * m * n * out
    with np.errstate(divide="ignore", invalid="ignore"):  # fused extras: result-shaped, ∝ M
        extra = np.where(m > 0, np.maximum(data - m * row_bytes - weights, 0) / m, 0)
    # The MXU pads N and K to its width (mxu_padding): the work it does, not the FLOPs asked
    # for, meets the memory time at the ridge. Along M that padding is fixed; along K it changes,
    # so K is solved with N's padding alone: from that K on the row is compute-bound (below it,
    # only at a K the padding inflates).
    padding = np.where(split, 1.0, padding)
    n_padding = np.ones(len(rows))
    width = _mxu_width(chip)
    if width:
        held = np.where(_holds_rows(m, n), m, n)  # the dim the array holds besides K
        n_padding = np.where(padding > 1, _padded(held, width) / np.maximum(held, 1), 1.0)
    mxu = 2 * per * m * n * k_total  # the matmul's own FLOPs (unpadded)
    # a split-K GEMM from nothing: its weights (along M) or its result (along K) once
    ridge_m = _solve(np.where(split, 0.0, m), np.where(split, 0.0, flops + mxu * (padding - 1)),
                     np.where(split, weights, data), 2 * per * n * k_total * padding,
                     row_bytes + np.where(split, 0.0, extra), ridge)  # fmt: skip
    ridge_k = _solve(np.where(split, 0.0, k_total),
                     np.where(split, 0.0, flops + mxu * (n_padding - 1)),
                     np.where(split, results, data), 2 * per * m * n * n_padding,
                     per * (m * lhs + n * rhs), ridge)  # fmt: skip
    ridge_k[~np.isnan(ridge_m)] = np.nan  # said only where no M reaches the ridge
    ridge_k[ridge_k <= k_total] = np.nan  # past it already: a longer K would not reach it
    reason = np.where(
        ~np.isnan(ridge_m), "ridge_m", np.where(~np.isnan(ridge_k), "ridge_k", "unreachable")
    )
    reason = np.where(batch > 1, "batched_weights", reason)
    reason = np.where(split, "split_k", reason).astype(object)
    waste = 1 - 1 / padding  # the share of the MXU's work that is padding
    return {"hint_reason": reason, "ridge_m": ridge_m, "ridge_k": ridge_k, "mxu_waste": waste}


def _row_tiles(ops: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """The rows each matmul's result is stored in tiles of, by its layout's first tile (a TPU's
    ``T(8,128)``: 8), where its M rows are its second-minor dim; 0 where untiled (a GPU, HLO
    without layouts): the bytes are counted as stored, so the crossover is for that array."""
    tiles = np.zeros(len(rows), dtype=int)
    if "shape" not in ops:
        return tiles
    m = _column(ops, "mm_m", rows, 0.0)
    # Each distinct (shape, M) once: a big program repeats a few hundred of them.
    pairs = pd.DataFrame({"shape": ops["shape"].to_numpy()[rows], "m": m})
    codes, uniques = pd.factorize(pd.MultiIndex.from_frame(pairs), sort=False)
    found = np.zeros(len(uniques), dtype=int)
    for k, (text, rows_m) in enumerate(uniques):
        with contextlib.suppress(HloParseError, ValueError, IndexError, TypeError):
            leaf = parse_shape(text).leaves()[0]
            layout = leaf.layout
            if layout is None or not layout.tiles or len(layout.tiles[0]) < 2:
                continue
            order = layout.minor_to_major or tuple(range(len(leaf.dims) - 1, -1, -1))
            if len(order) >= 2 and leaf.dims[order[1]] == rows_m:
                found[k] = layout.tiles[0][-2]
    known = codes >= 0  # a missing shape: untiled
    tiles[known] = found[codes[known]]
    return tiles


def _solve(
    size: np.ndarray,
    flops: np.ndarray,
    data: np.ndarray,
    flops_per_unit: np.ndarray,
    bytes_per_unit: np.ndarray,
    ridge: np.ndarray,
) -> np.ndarray:
    """The size x at which ``flops + (x − size)·flops_per_unit`` over ``data + (x − size)·
    bytes_per_unit`` is ``ridge``: where a row of ``size`` would cross it by growing. NaN where
    growing does not raise the intensity to the ridge."""
    with np.errstate(divide="ignore", invalid="ignore"):
        denominator = flops_per_unit - ridge * bytes_per_unit
        x = size + (ridge * data - flops) / denominator
    return np.where((flops_per_unit > 0) & (denominator > 0), np.maximum(x, 0.0), np.nan)


def hint_text(
    reason: str,
    bound: str,
    *,
    m: int = 0,
    n: int = 0,
    k: int = 0,
    batch: int = 1,
    ridge_m: float = math.nan,
    ridge_k: float = math.nan,
    intensity: float = math.nan,
    ridge: float = math.nan,
    mxu_waste: float = 0.0,
    mxu_width: int = 0,
    row_tile: int = 0,
    detail: str = "",
) -> str:
    """A row's hint in words, from its fields: the one place a hint is written. ``bound`` opens
    it (so it never contradicts the row's verdict); ``batch`` is the batch elements with their
    own weights, or for ``split_k`` the slices of K; ``detail`` is the text of a ``prefetch``
    (the readers) or ``no_rate`` (the problem) row. ``row_tile``: the rows of the lhs's storage
    tile on a TPU; where M is not a multiple of it, the array as stored has more rows than M, its
    bytes are the stored ones, and the hint says that its crossover is for that array."""
    if reason == "prefetch":
        return f"HBM→VMEM prefetch for {detail}: its HBM time is charged to them"
    if reason == "no_rate" or not reason:
        return detail
    state = f"{bound}-bound"
    if reason == "vector_loop":
        return (
            f"{state}: the loop over its result on the vector unit is slower than its MXU work "
            "and its bytes (XLA:TPU's loop rate); a larger M or K would not change that"
        )
    per = " per batch element" if reason == "batched_weights" else ""
    if ridge_m < 1:  # even one row is past it (NaN compares False): no M to name
        reaches = f"every M{per} reaches the ridge ({ridge:.0f} FLOP/B)"
    elif not math.isnan(ridge_m):
        reaches = f"ridge at M≈{ridge_m:.0f}{' rows' + per if per else ''}"
    elif not math.isnan(ridge_k):
        whole_k = k * batch if reason == "split_k" else k
        reaches = (
            f"no M{per} reaches the ridge ({ridge:.0f} FLOP/B): N·K too small; the contracting "
            f"dim{per} would at K≈{ridge_k:.0f} (K={whole_k})"
        )
    elif bound == "compute":  # past the ridge, and a larger M or K would not raise it further
        reaches = f"past the ridge ({ridge:.0f} FLOP/B) at this M and K{per}"
    else:
        reaches = f"cannot reach the ridge ({ridge:.0f} FLOP/B) at any M or K{per}"
    if reason == "batched_weights":
        text = (
            f"{state}: {batch} batch elements with their own weights keep the intensity at "
            f"{intensity:.3g} FLOP/B whatever the batch; {reaches}"
            + (f" (M={m})" if not math.isnan(ridge_m) else "")
        )
    elif reason == "split_k":
        text = (
            f"{state} at M={m}: a split-K GEMM (K={k * batch} cut into {batch} slices summed "
            f"after); as one GEMM, {reaches}"
        )
    elif reason == "ridge_m":
        text = f"{state} at M={m}; {reaches}"
        if row_tile and m % row_tile and not math.isnan(ridge_m) and ridge_m >= 1:
            text += " for the lhs as stored (its rows padded to the layout's tile)"
    else:
        text = f"{state}: {reaches}"
    if mxu_waste > 0.01:
        held = f"M,K={m},{k}" if _holds_rows(m, n) else f"N,K={n},{k}"
        text += f"; MXU {mxu_width}-padding of {held} wastes {mxu_waste:.0%}"
    return text


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


def classify(
    ops: pd.DataFrame, chip: Chip | str, topology=None, model_flops: float | None = None
) -> tuple[pd.DataFrame, schema.VerdictSummary]:
    """Add the verdict columns for ``chip`` to a report's ops; return them and summary entries.

    ``model_flops``: the user's analytic count of the model's FLOPs per device and step (MaxText's
    ``calculate_tflops_training_per_device`` × 1e12): the summary then gives the MFU against it
    beside the HLO's (see :func:`model_flops_summary`).

    ``topology`` places the program's devices for the collective model: an
    :class:`~hlo_roofline.interconnect.Topology`, a mesh (or its devices in partition order), or
    a report's stored one; None infers it from the chip and the groups (see
    :mod:`hlo_roofline.interconnect`).
    """
    chip = chips.get(chip) if isinstance(chip, str) else chip
    if not isinstance(chip, Chip):
        raise ValueError(f"chip must be a chip's name or a Chip, not {type(chip).__name__}")
    chip = chip.per_device()  # an HLO module runs on one JAX device (one TensorCore of a 7x)
    ops = ops.drop(columns=[c for c in VERDICT_COLUMNS if c in ops.columns])
    hbm = chip.hbm_bandwidth
    vector = vector_peak(chip)
    if "precision" not in ops:  # a report written before the column existed
        ops = ops.assign(precision=np.where(ops["mm_k"].to_numpy() > 0, "default", ""))
    matmul = ops["mm_k"].to_numpy() > 0
    # A matmul runs at its dtype's MXU peak; so does a custom kernel's matrix-unit work (an
    # attention kernel: its peak is the one its ridge is drawn against).
    rates: dict[tuple[str, str], tuple[float, str]] = {}  # (dtype, precision) -> (peak, problem)
    for key in set(zip(ops["dtype"][matmul], ops["precision"][matmul], strict=True)):
        rates[key] = _matmul_rate(chip, *key)
    kernel_mxu = np.where(matmul, 0.0, _kernel_mxu_flops(ops))
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
    t_compute, compute_unit = _compute_times(
        ops, chip, matmul, np.where(no_rate, 1.0, peaks), padding, kernel_mxu
    )
    t_compute[no_rate], compute_unit[no_rate] = 0.0, ""
    t_memory = data / hbm
    own_memory = t_memory  # at the op's own placement, no prefetch charged (XLA's view)
    t_vmem = np.zeros(len(ops))  # the part of t_memory spent on VMEM bytes
    vmem_bandwidth = _vmem_bandwidth(chip)
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
    # an op takes at least the chip's per-op floor; its bound is the unit that would set it above
    floors = _op_floors(ops, chip, matmul)
    t_roofline = np.maximum(times.max(axis=0), floors)
    bound = np.array(BOUNDS[:3])[times.argmax(axis=0)].astype(object)
    bound[t_roofline == 0] = "none"
    bound[ops["unknown"].to_numpy(dtype=bool) & (flops == 0)] = "unknown"
    bound[no_rate] = "unknown"
    step = float(t_roofline.sum())
    is_collective = ops["collective"].to_numpy() != ""
    scheduled = walk_schedule(ops, chip.kind, t_roofline)
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
    ops["xla_gap"] = _xla_gaps(
        ops, chip, t_roofline, ops["xla_estimate_s"].to_numpy(), padding, own_memory
    )
    ops = ops.assign(**_hint_columns(ops, matmul, no_rate, rates, chip, padding))
    ops = ops.assign(**_roof_columns(ops, t_compute, t_memory, t_vmem, floors, flops, data))
    ops = ops[schema.ordered(ops.columns)]  # the report's columns in the schema's order
    upper = float(np.maximum(times.sum(axis=0), floors).sum())
    summary = _summary(ops, chip, step, upper, scheduled.least_s)
    comm = float(t_roofline[is_collective].sum())
    exposed = float(scheduled.exposed_s[is_collective].sum())
    summary.update(
        floor_share=float((t_roofline - times.max(axis=0)).sum()) / step if step else 0.0,
        step_time_min_s=scheduled.least_s,
        step_time_scheduled_s=scheduled.step_s,
        comm_time_s=comm,
        exposed_comm_s=exposed,
        exposed_comm_share=exposed / scheduled.step_s if scheduled.step_s else 0.0,
        topology=topology.to_dict() if topology is not None else None,
        loops=loops_summary(ops),
        **remat_summary(ops, step),
        **model_flops_summary(float(flops.sum()), model_flops, chip, scheduled.step_s),
    )
    return ops, summary


def walk_schedule(ops: pd.DataFrame, kind: str, t_roofline: np.ndarray) -> schedule.Scheduled:
    """The step as scheduled (:func:`hlo_roofline.schedule.walk`) for ops on a chip of ``kind``.

    On a TPU torus a collective's device group names the links it uses (another mesh axis is
    another ring of links); a GPU's collectives share its NVLink and network ports."""
    waits_for = ops["waits_for"].to_numpy() if "waits_for" in ops else np.full(len(ops), "")
    links = ops["replica_group"].to_numpy() if kind == "tpu" and "replica_group" in ops else None
    return schedule.walk(
        ops["name"].to_numpy(),
        ops["opcode"].to_numpy(),
        waits_for,
        ops["collective"].to_numpy() != "",
        t_roofline,
        links,
    )


def _roof_columns(
    ops: pd.DataFrame,
    t_compute: np.ndarray,
    t_memory: np.ndarray,
    t_vmem: np.ndarray,
    floors: np.ndarray,
    flops: np.ndarray,
    data: np.ndarray,
) -> dict[str, np.ndarray]:
    """The roof behind each verdict, so a face draws it without arithmetic on the model: the
    FLOP/s the op's compute side reaches (its binding unit, or the per-op floor where that holds
    it), the bandwidth its bytes move at, and the unit whose roof its point lies on. A predicted
    point (intensity, flops ÷ ``t_roofline_s``) lies on min(compute roof, intensity × memory
    roof) unless its link time sets it."""
    held = np.maximum(t_compute, floors)
    with np.errstate(divide="ignore", invalid="ignore"):
        roof_flops = np.where((flops > 0) & (held > 0), flops / held, np.nan)
        roof_bytes = np.where((data > 0) & (t_memory > 0), data / t_memory, np.nan)
    bound = ops["bound"].to_numpy()
    on_floor = (floors > 0) & (floors >= ops["t_roofline_s"].to_numpy(dtype=float)) & (
        floors > np.maximum(t_compute, t_memory)
    )
    memory = np.where(t_vmem > t_memory - t_vmem, "vmem", "hbm")
    unit = np.select(
        [bound == "none", on_floor, bound == "compute", bound == "memory",
         bound == "communication"],
        ["", "floor", ops["compute_unit"].to_numpy(dtype=object), memory, "link"],
        "",
    ).astype(object)  # fmt: skip
    return {"roof_flops_per_s": roof_flops, "roof_bytes_per_s": roof_bytes, "roof_unit": unit}


LOOP_FIELDS = ("parent", "trip_count", "iterations", "ops", "flops", "bytes_accessed",
               "t_roofline_s", "share", "flops_per_iteration", "bytes_per_iteration",
               "time_per_iteration_s")  # fmt: skip


def loop_table(ops: pd.DataFrame) -> pd.DataFrame:
    """Each while loop (a ``lax.scan`` over layers is one), indexed by its ``loop`` path: its
    trip count, iterations per step, totals over everything it runs (nested loops included) and
    those totals per iteration: one layer of a scanned stack.

    From the rows alone: every op of a loop's body runs ``iterations`` times per step (its
    ``count``; the condition's ops once more), so the least positive count among the rows
    directly in the loop is its iterations, and over its parent's the trip count. A loop whose
    trip count is unknown (its rows are ``lower_bound``: counted once) has none. The times are
    there once the report is classified."""
    columns = list(LOOP_FIELDS)
    if "loop" not in ops or not (ops["loop"] != "").any():
        return pd.DataFrame(columns=columns, index=pd.Index([], name="loop"))
    loop = ops["loop"].to_numpy()
    count = ops["count"].to_numpy(dtype=float)
    short = ops["lower_bound"].to_numpy(dtype=bool)
    found = {p for p in set(loop) if p}
    paths = sorted(
        {"/".join(p.split("/")[: i + 1]) for p in found for i in range(p.count("/") + 1)}
    )
    timed = "t_roofline_s" in ops
    step = float(ops["t_roofline_s"].sum()) if timed else 0.0

    def iterations(path: str) -> float:
        if not path:
            return 1.0
        direct = count[(loop == path) & (count > 0)]
        return float(direct.min()) if len(direct) else 0.0

    rows = {}
    for path in paths:
        parent = path.rpartition("/")[0]
        runs, outer = iterations(path), iterations(parent)
        inside = (loop == path) | np.char.startswith(loop.astype(str), path + "/")
        unknown = bool(short[loop == path].any())
        totals = {c: float(ops[c].to_numpy(dtype=float)[inside].sum())
                  for c in ("flops", "bytes_accessed", "t_roofline_s") if c in ops}  # fmt: skip
        time_s = totals.get("t_roofline_s", math.nan)
        with np.errstate(divide="ignore", invalid="ignore"):
            rows[path] = {
                "parent": parent,
                "trip_count": math.nan if unknown or not outer else runs / outer,
                "iterations": runs,
                "ops": int(inside.sum()),
                "flops": totals["flops"],
                "bytes_accessed": totals["bytes_accessed"],
                "t_roofline_s": time_s,
                "share": time_s / step if step else math.nan,
                "flops_per_iteration": totals["flops"] / runs if runs else math.nan,
                "bytes_per_iteration": totals["bytes_accessed"] / runs if runs else math.nan,
                "time_per_iteration_s": time_s / runs if runs else math.nan,
            }
    table = pd.DataFrame.from_dict(rows, orient="index", columns=columns)
    table.index.name = "loop"
    if timed:
        table = table.sort_values("t_roofline_s", ascending=False, kind="stable")
    return table


def loops_summary(ops: pd.DataFrame) -> list[dict]:
    """The summary's ``loops``: :func:`loop_table` as records, slowest first."""
    table = loop_table(ops)
    keep = ("trip_count", "iterations", "time_per_iteration_s", "flops_per_iteration",
            "bytes_per_iteration", "t_roofline_s", "share")  # fmt: skip
    return [
        {"name": name, "parent": row["parent"],
         **{k: None if not math.isfinite(row[k]) else float(row[k]) for k in keep}}
        for name, row in table.iterrows()
    ]  # fmt: skip


REMAT = "rematted_computation"  # the name scope JAX gives what jax.checkpoint recomputes


def remat_summary(ops: pd.DataFrame, step: float) -> dict[str, float]:
    """What the backward pass recomputes (``jax.checkpoint``/``remat``): the FLOPs and roofline
    time of the ops whose ``op_name`` lies inside a rematted computation, and their shares of the
    step's FLOPs and of Σ ``t_roofline_s`` (a fusion counts wholly where its own op_name is)."""
    if "op_name" not in ops:  # a report without names: nothing known to be recomputed
        inside = np.zeros(len(ops), dtype=bool)
    else:
        inside = ops["op_name"].astype(str).str.contains(REMAT, regex=False).to_numpy()
    flops = ops["flops"].to_numpy(dtype=float)
    remat_flops, total = float(flops[inside].sum()), float(flops.sum())
    remat_time = float(ops["t_roofline_s"].to_numpy(dtype=float)[inside].sum())
    return {
        "remat_flops": remat_flops,
        "remat_flops_share": remat_flops / total if total else 0.0,
        "remat_time_s": remat_time,
        "remat_time_share": remat_time / step if step else 0.0,
    }


def check_model_flops(model_flops) -> float | None:
    """A model FLOP count as a float; ValueError unless it is a positive finite number."""
    if model_flops is None:
        return None
    try:
        value = float(model_flops)
    except (TypeError, ValueError):
        value = math.nan
    if isinstance(model_flops, bool) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"model_flops must be a positive number of FLOPs, not {model_flops!r}")
    return value


def model_flops_summary(
    hlo_flops: float, model_flops: float | None, chip: Chip, step_scheduled: float
) -> dict[str, float | None]:
    """MFU against the user's own FLOP count: ``model_flops / (step as scheduled × bf16 peak)``
    (MaxText's convention: its MFU is against the bf16 peak), and how many FLOPs the compiled
    program runs per model FLOP (above 1: rematerialization, padding, the optimizer, ...)."""
    model_flops = check_model_flops(model_flops)
    if model_flops is None:
        return {"model_flops": None, "mfu_model": None, "hlo_flops_per_model_flop": None}
    peak = _peak(chip, "bf16")
    return {
        "model_flops": model_flops,
        "mfu_model": model_flops / (step_scheduled * peak) if step_scheduled else None,
        "hlo_flops_per_model_flop": hlo_flops / model_flops,
    }


def _hint_columns(
    ops: pd.DataFrame,
    matmul: np.ndarray,
    no_rate: np.ndarray,
    rates: dict,
    chip: Chip,
    padding: np.ndarray,
) -> dict[str, object]:
    """The hint columns of classified ops: fields for matmuls that have a verdict (NumPy over
    those rows), the text rendered from them, and the rows that say why they have no verdict
    (no rate for the dtype) or no time (a prefetch)."""
    size = len(ops)
    reason = np.full(size, "", dtype=object)
    hint = np.full(size, "", dtype=object)
    ridge_m, ridge_k, waste = np.full(size, np.nan), np.full(size, np.nan), np.zeros(size)
    bound = ops["bound"].to_numpy()
    rows = np.flatnonzero(matmul & ~no_rate & np.isin(bound, BOUNDS[:3]))
    if len(rows):
        intensity = ops["intensity"].to_numpy(dtype=float)[rows]
        ridge = ops["critical_intensity"].to_numpy(dtype=float)[rows]
        fields = _hints(ops, rows, ridge, chip, padding[rows])
        unit = ops["compute_unit"].to_numpy()[rows]
        loop = (bound[rows] == "compute") & (unit != "mxu")  # its result's loop, not the MXU
        fields["hint_reason"][loop] = "vector_loop"
        fields["ridge_m"][loop] = fields["ridge_k"][loop] = np.nan
        reason[rows] = fields["hint_reason"]
        ridge_m[rows], ridge_k[rows] = fields["ridge_m"], fields["ridge_k"]
        waste[rows] = fields["mxu_waste"]
        split = reason[rows] == "split_k"
        geometry = ops[["mm_m", "mm_n", "mm_k", "mm_batch"]].to_numpy()[rows]
        batch = np.where(split, ops["mm_split_k"].to_numpy()[rows] if "mm_split_k" in ops else 1,
                         geometry[:, 3])  # fmt: skip
        width = _mxu_width(chip)
        tiles = _row_tiles(ops, rows)
        hint[rows] = [
            hint_text(r, b, m=int(g[0]), n=int(g[1]), k=int(g[2]), batch=int(nb),
                      ridge_m=rm, ridge_k=rk, intensity=i, ridge=ri, mxu_waste=w, mxu_width=width,
                      row_tile=t)
            for r, b, g, nb, rm, rk, i, ri, w, t in zip(
                reason[rows], bound[rows], geometry, batch, fields["ridge_m"], fields["ridge_k"],
                intensity, ridge, fields["mxu_waste"], tiles, strict=True)
        ]  # fmt: skip
    for i in np.flatnonzero(no_rate):  # the row says why its compute time is missing
        reason[i] = "no_rate"
        hint[i] = hint_text(
            "no_rate", bound[i], detail=rates[ops["dtype"].iat[i], ops["precision"].iat[i]][1]
        )
    if "prefetch_for" in ops:  # the copy row stays, saying whom it feeds
        readers = ops["prefetch_for"].to_numpy()
        for i in np.flatnonzero(readers != ""):
            reason[i] = "prefetch"
            hint[i] = hint_text("prefetch", bound[i], detail=readers[i])
    return {"hint": hint, "hint_reason": reason, "ridge_m": ridge_m, "ridge_k": ridge_k,
            "mxu_waste": waste}  # fmt: skip


def _summary(ops: pd.DataFrame, chip: Chip, step: float, upper: float, least: float) -> dict:
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
        "mfu_upper_bound": flops / (peak * least) if least else 0.0,
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
