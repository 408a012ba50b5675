"""The compute side of the two time models. The bound: which hardware unit runs an op (MXU, vector
unit, EUP) and how long it takes there at the published rates, MXU padding included. The
expectation: what a chip's :class:`~hlo_roofline.chips.Calibration` adds (XLA:TPU's vector loop,
fill and lane-reduce rates, its matmul pipeline, the per-op floor), never read by the bound."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pandas as pd

from hlo_roofline.chips import Calibration, Chip
from hlo_roofline.cost.facts import shape_of
from hlo_roofline.hlo.ir import DTYPE_BYTES
from hlo_roofline.hlo.parser import HloParseError


def column(ops: pd.DataFrame, name: str, rows: np.ndarray, default: float) -> np.ndarray:
    if name not in ops:  # a report written before the column existed
        return np.full(len(rows), default)
    return ops[name].to_numpy(dtype=float)[rows]


def padded(dims: np.ndarray, tile: int) -> np.ndarray:
    return -(-dims // tile) * tile


_FEW_COLUMNS = 8  # N below a vector register's sublanes: the matmul streams N, holds M


def holds_rows(m, n):
    """Where a matmul of M rows and N columns holds its rows in the MXU: N below 8 (NumPy arrays
    or plain numbers)."""
    return (n > 0) & (n < _FEW_COLUMNS) & (m > n)


def streams_columns(ops: pd.DataFrame) -> np.ndarray:
    """The matmuls whose N is below 8 (a decode step's scores, one query against a cache of
    keys): the MXU holds the K×M operand and streams the N columns through it, so M, not N, is
    padded to its width (XLA:TPU's estimates for such products are far below N padded to 128)."""
    m, n, k = (ops[c].to_numpy(dtype=np.int64) for c in ("mm_m", "mm_n", "mm_k"))
    return holds_rows(m, n) & (k > 1)


def mxu_padding(ops: pd.DataFrame, chip: Chip) -> np.ndarray:
    """How much more work each matmul does on the chip's MXUs than it asks for: the K×N weight
    tile padded to the systolic array's width (the M rows stream through it unpadded, as the book
    counts them), or the K×M tile where it streams its few N columns (:func:`streams_columns`);
    1 where the chip has no MXU shape, or the op is a matrix-vector product (a depthwise
    convolution: it runs on the vector unit)."""
    width = chip.mxu_width
    m, n, k = (ops[c].to_numpy(dtype=np.int64) for c in ("mm_m", "mm_n", "mm_k"))
    held = np.where(streams_columns(ops), m, n)  # the operand's dim the array holds
    factor = np.ones(len(ops))
    on_mxu = (held > 1) & (k > 1)
    if width and on_mxu.any():
        asked = (held * k)[on_mxu].astype(float)
        factor[on_mxu] = padded(held[on_mxu], width) * padded(k[on_mxu], width) / asked
    return factor


# The units an op's compute time can come from (the ``compute_unit`` column): hardware only.
COMPUTE_UNITS = {
    "mxu": "matmul FLOPs (padded to the MXU's tiles on a TPU) at the matmul peak",
    "vector": "FLOPs at the vector peak (VPU, CUDA cores)",
    "eup": "transcendentals at the TPU EUP's rate",
}


def compute_times(
    ops: pd.DataFrame,
    chip: Chip,
    matmul: np.ndarray,
    peaks: np.ndarray,
    padding: np.ndarray,
    kernel_mxu: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Each op's time on the units that run it, the unit that sets it (the slowest), and each
    unit's time (by :data:`COMPUTE_UNITS` key).

    The bound's units, at hardware rates only. A matmul: its FLOPs on the MXU with ``padding``
    (:func:`mxu_padding`). Any other op: FLOPs at the vector peak, transcendentals at the EUP's
    rate where the chip has one (else at the vector peak, with the FLOPs). A custom kernel with
    ``kernel_mxu`` FLOPs (an attention kernel's, where the chip has a rate for its dtype): those at
    its MXU peak (``peaks``), the rest of its FLOPs at the vector peak."""
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
        kernel, chip.vector_peak(), peaks
    )
    candidates = {
        "mxu": np.where(
            matmul,
            (flops + transcendentals + mxu_flops * (padding - 1)) / peaks,
            np.where(kernel, kernel_mxu / peaks, 0.0),
        ),
        "vector": np.where(matmul, 0.0, vector),
        "eup": np.where(matmul, 0.0, eup),
    }
    times = np.stack(list(candidates.values()))
    unit = np.array(list(candidates), dtype=object)[times.argmax(axis=0)]
    t_compute = times.max(axis=0)
    unit[t_compute == 0] = ""
    return t_compute, unit, candidates


def charged_times(ops: pd.DataFrame, cal: Calibration) -> dict[str, np.ndarray]:
    """What XLA:TPU's cost model charges an op's elements at its calibrated rates (each 0 where
    the calibration has no such rate): ``loop``, the elements of its vector loop (a matmul's
    result included) at ``calibrated.loop_elements`` (decode's reduced stream at its own rate);
    ``fill``, a fill's elements at ``calibrated.fill``; ``xlu``, a standalone reduce's elements
    across the lanes at ``calibrated.lane_reduce``. The expected model's, never the bound's."""
    zero = np.zeros(len(ops))
    charged = {"loop": zero, "fill": zero, "xlu": zero}
    if cal.vector_elements_rate and "vector_elements" in ops:
        elements = ops["vector_elements"].to_numpy(dtype=float)
        fill = fills(ops) if cal.fill_rate else np.zeros(len(ops), dtype=bool)
        charged["loop"] = np.where(fill, 0.0, elements) / cal.vector_elements_rate
        if cal.reduced_stream_rate and "reduced_stream_words" in ops:
            # the streamed keys of decode's scores fused with their max: XLA:TPU's own rate
            words = ops["reduced_stream_words"].to_numpy(dtype=float)
            charged["loop"] = np.where(words > 0, words / cal.reduced_stream_rate, charged["loop"])
        if cal.fill_rate:
            charged["fill"] = np.where(fill, elements, 0.0) / cal.fill_rate
    if cal.lane_reduce_rate and "lane_reduced_elements" in ops:
        charged["xlu"] = ops["lane_reduced_elements"].to_numpy(dtype=float) / cal.lane_reduce_rate
    return charged


_FILL_READS = 1 / 64  # what a fill may read per byte it writes (a row broadcast down the rows)


def fills(ops: pd.DataFrame) -> np.ndarray:
    """The rows that fill an HBM array from (almost) nothing: a ``broadcast``, or a fusion of
    nothing but one, whose bytes are its result's and at most 1/64 more (a scalar, a row
    repeated down the rows: zeros, ``jnp.full``, a bias spread over a batch). XLA:TPU charges
    those per element written at a rate of their own (the chip's ``calibrated.fill``); a broadcast
    that reads more (into sublanes, 1/8) or lands in VMEM runs as any loop."""
    opcode, fused = ops["opcode"].to_numpy(), ops["fused_ops"].to_numpy()
    broadcast = (opcode == "broadcast") | ((opcode == "fusion") & (fused == "broadcast"))
    if not broadcast.any():
        return broadcast
    itemsize = ops["dtype"].map(DTYPE_BYTES).fillna(0).to_numpy(dtype=float)
    written = ops["vector_elements"].to_numpy(dtype=float) * itemsize
    data = ops["bytes_accessed"].to_numpy(dtype=float)
    vmem = column(ops, "vmem_bytes", np.arange(len(ops)), 0.0)
    return (
        broadcast & (written > 0) & (data <= written * (1 + _FILL_READS)) & (vmem <= data - written)
    )  # the array it writes is in HBM (what it reads may be in VMEM)


def kernel_mxu_flops(ops: pd.DataFrame) -> np.ndarray:
    """Each op's ``kernel_mxu_flops`` (0 where the report predates the column)."""
    if "kernel_mxu_flops" not in ops:
        return np.zeros(len(ops))
    return ops["kernel_mxu_flops"].to_numpy(dtype=float)


def op_floors(ops: pd.DataFrame, chip: Chip, matmul: np.ndarray) -> np.ndarray:
    """The least time each op that runs on the core takes: the chip's per-op overhead (a TPU's,
    where the database has one) once per execution; 0 for ops that only move data by DMA."""
    cal = chip.calibration
    if not cal.op_floor_s or "vector_elements" not in ops:
        return np.zeros(len(ops))
    runs_on_core = (ops["vector_elements"].to_numpy(dtype=float) > 0) | matmul
    return np.where(runs_on_core, cal.op_floor_s * ops["count"].to_numpy(dtype=float), 0.0)


def matmul_pipeline(
    chip: Chip,
    matmul: np.ndarray,
    unit_times: dict[str, np.ndarray],
    hbm_bytes: np.ndarray,
    t_vmem: np.ndarray,
    tile_steps: np.ndarray | None = None,
    reread_bytes: np.ndarray | None = None,
    epilogue: tuple[np.ndarray, np.ndarray] | None = None,
    prologue: np.ndarray | None = None,
) -> np.ndarray:
    """The least time XLA:TPU's cost model gives a matmul (0 for other rows, and on chips
    without its rates): its HBM bytes, with the operand
    tiles its tiling loop reads again (``reread_bytes``:
    :func:`hlo_roofline.cost.tpu.tiling.tile_reread_bytes`), at the rate XLA:TPU streams a
    matmul's operands (``calibrated.matmul_stream``, calibrated against its ``estimated_cycles``); and,
    where XLA:TPU wrote the fusion's tiling loop (``tile_steps``: the steps of its
    ``window_config``), the MXU's time plus each step's fill and drain (``Calibration.tile_step_s``,
    calibrated against its ``estimated_cycles``): a finely tiled matmul pays the pipeline's start
    and end once per tile, not once per op; where that loop splits K (``epilogue``: each row's
    K steps per result tile and the elements of its result-sized arrays, the f32 accumulator
    first: :func:`hlo_roofline.cost.tpu.tiling.epilogue_pass`), also the vector unit's pass over
    those arrays, ``Calibration.epilogue_passes`` loop passes per element, less the one K step of MXU
    time it overlaps, on the chips whose database has that figure (one pass, derived: every
    fixture of the fitting set implies XLA:TPU charges at least that); where the loop keeps K
    whole (``tile_k_steps`` 1) that K step is the whole MXU time, and the vector work (those
    arrays and a relaid operand's windows) is charged ``Calibration.epilogue_passes_k_whole`` passes
    (7x); where the loop splits K and fetches a computed left operand's windows more than once
    (``prologue``: those elements times the fetches,
    :func:`hlo_roofline.cost.tpu.tiling.prologue_elements`), ``Calibration.prologue_passes`` loop passes
    per element after the MXU (calibrated against its ``estimated_cycles``). The elementwise
    chain a fusion computes beside its matmul (SiLU, GELU, softmax backward) is not charged:
    XLA:TPU's estimates price the result-sized arrays, not the chain.
    None of these is the book's roof: the row's bound, intensity and ridge stay on the published
    peak and bandwidth; this only holds its time up where XLA's model of the kernel is slower
    than either roof (docs/validation.md, "Realistic programs")."""
    cal = chip.calibration
    pipelined = np.zeros(len(matmul))
    if not matmul.any() or not cal.vector_elements_rate:
        return pipelined
    mxu = unit_times["mxu"]
    if cal.tile_step_s and tile_steps is not None:
        stepped = np.where(matmul & (tile_steps > 0), mxu + tile_steps * cal.tile_step_s, 0.0)
        if (cal.epilogue_passes or cal.epilogue_passes_k_whole) and epilogue is not None:
            k_steps, elements = epilogue
            with np.errstate(divide="ignore", invalid="ignore"):
                hidden = np.where(k_steps > 0, mxu / k_steps, 0.0)  # the K step it overlaps
            passes = np.where(
                k_steps > 1, cal.epilogue_passes or 0.0, cal.epilogue_passes_k_whole or 0.0
            )  # K split, or whole: the step's vector work against its whole MXU time
            passed = elements * passes / cal.vector_elements_rate
            stepped += np.where(
                matmul & (tile_steps > 0) & (k_steps > 0), np.maximum(passed - hidden, 0.0), 0.0
            )
        if cal.prologue_passes and prologue is not None:  # a computed lhs, per fetch
            computed = prologue * cal.prologue_passes / cal.vector_elements_rate
            stepped += np.where(matmul & (tile_steps > 0), computed, 0.0)
        pipelined = np.maximum(pipelined, stepped)
    if cal.matmul_stream_bandwidth:
        streamed = hbm_bytes if reread_bytes is None else hbm_bytes + reread_bytes
        stream = streamed / cal.matmul_stream_bandwidth + t_vmem
        pipelined = np.maximum(pipelined, np.where(matmul, stream, 0.0))
    return pipelined


@lru_cache(maxsize=4096)
def hbm_result_bytes(shape: str) -> float:
    """Bytes of an op's result (its ``shape`` text, typed by the cost layer: ``shape_of``) that
    land in HBM (leaves without an ``S(n)`` memory space)."""
    typed = shape_of(shape)
    if typed is None:
        raise HloParseError(f"not a shape: {shape!r}")
    return float(
        sum(
            leaf.elements * DTYPE_BYTES.get(leaf.dtype, 4)
            for leaf in typed.leaves()
            if leaf.layout is None or leaf.layout.memory_space == 0
        )
    )


def loop_reads(
    ops: pd.DataFrame, chip: Chip, matmul: np.ndarray, loop: np.ndarray, hbm_bytes: np.ndarray
) -> np.ndarray:
    """The least time XLA:TPU's cost model gives a vector loop that reads more from HBM per
    element than the loop its rate was fitted on (``Calibration.loop_read_bytes``): its loop time plus
    those further reads at the HBM bandwidth, one after the other (0 for other rows and on chips
    without the figure). XLA does not overlap them: on v6e a softmax reading f32 scores (4 B per
    element) is charged 94.6 elements per cycle, one writing bf16 probabilities from them 78.7,
    against 155 for the same loop in VMEM, and a loop's writes are not charged (a cross-entropy
    loop writing f32 from VMEM runs at the loop rate). Like the matmul stream this is no part of
    the book's roof: it only holds the row's time up (docs/validation.md, "Realistic programs")."""
    cal = chip.calibration
    held = np.zeros(len(ops))
    if cal.loop_read_bytes is None or "vector_elements" not in ops:
        return held
    elements = ops["vector_elements"].to_numpy(dtype=float)
    spare = hbm_bytes - cal.loop_read_bytes * elements
    rows = np.flatnonzero(~matmul & (loop > 0) & (spare > 0))
    if not len(rows):
        return held
    shapes = ops["shape"].to_numpy()
    written = np.array([hbm_result_bytes(shapes[i]) for i in rows], dtype=float)
    reads = np.maximum(spare[rows] - written, 0.0)
    held[rows] = np.where(reads > 0, loop[rows] + reads / chip.hbm_bandwidth, 0.0)
    return held


def major_reduces(ops: pd.DataFrame, chip: Chip, no_rate: np.ndarray) -> np.ndarray:
    """The least time XLA:TPU's cost model gives a reduce over major dimensions it pipelines
    deep (the ``major_reduce_results`` column: a router's dispatch and combine masks summed over
    the top-2 dimension): its results at the chip's ``calibrated.major_reduce`` rate (0 for other rows
    and on chips without the rate). XLA charges those 7.9 results a cycle per TensorCore whatever
    the loop over what they fold (12-24x slower than that loop on the MoE's masks); a codegen
    limit XLA models, not the hardware's work, so like the matmul stream this is no part of the
    book's roof: it only holds the row's time up, its bound and compute time unchanged
    (docs/validation.md, "Realistic programs")."""
    cal = chip.calibration
    if not cal.major_reduce_rate or "major_reduce_results" not in ops:
        return np.zeros(len(ops))
    results = ops["major_reduce_results"].to_numpy(dtype=float)
    return np.where(no_rate, 0.0, results / cal.major_reduce_rate)


def depthwise_convs(ops: pd.DataFrame, chip: Chip) -> np.ndarray:
    """The least time XLA:TPU's cost model gives an op holding a depthwise convolution (the
    ``depthwise_taps`` column: one multiply-add per output element and tap of its window, on the
    vector unit; :mod:`hlo_roofline.cost.depthwise`): its taps at the chip's
    ``calibrated.depthwise_taps`` rate (0 for other rows and on chips without the rate). A
    mechanism, not a per-program constant: the window's size sets the work (a 5×5 window 25 taps
    per output element, a 3×3 one 9), which the result's elements alone do not see (an MBConv
    fusion was 0.05-0.44x XLA's estimate at the loop rate). The rate is fitted on the fit half of
    fixtures/tpu_heldout (``python -m hlo_roofline.calibrate``); like the other charges, no part
    of the bound."""
    cal = chip.calibration
    if not cal.depthwise_tap_rate or "depthwise_taps" not in ops:
        return np.zeros(len(ops))
    return ops["depthwise_taps"].to_numpy(dtype=float) / cal.depthwise_tap_rate


def expanded_loops(ops: pd.DataFrame, chip: Chip) -> np.ndarray:
    """The least time XLA:TPU's cost model gives a fusion that expands an array and folds it
    inside itself (the ``expanded_elements`` column: a selective scan's ``[B, L, D, N]`` computed
    from ``[B, L, D]`` and ``[D, N]`` and summed over N; :mod:`hlo_roofline.cost.intermediates`):
    those elements at the chip's ``calibrated.expanded_elements`` rate (0 for other rows and on
    chips without it). The loop computes every element of the expansion though no array at the
    fusion's boundary holds them, so the boundary's elements (what the loop rate prices) were
    0.06-0.20x XLA's estimate. XLA:TPU charges them about the same cycles on every chip (86-97 a
    cycle per TensorCore on v5e's fit half of fixtures/tpu_heldout, 148-210 on v6e's and 7x's),
    below v6e's and 7x's loop rates, so they have a rate of their own; no part of the bound. A
    fusion tiled into column strips is charged by its result instead (:func:`sublane_folds`),
    not by this."""
    cal = chip.calibration
    if not cal.expanded_elements_rate or "expanded_elements" not in ops:
        return np.zeros(len(ops))
    expanded = ops["expanded_elements"].to_numpy(dtype=float)
    if cal.sublane_fold_rate and "sublane_fold_results" in ops:
        expanded = np.where(ops["sublane_fold_results"].to_numpy(dtype=float) > 0, 0.0, expanded)
    return expanded / cal.expanded_elements_rate


def sublane_folds(ops: pd.DataFrame, chip: Chip) -> np.ndarray:
    """The least time XLA:TPU's cost model gives a fusion that folds an expansion over its
    sublanes in a loop tiled one lane tile wide (the ``sublane_fold_results`` column;
    :func:`hlo_roofline.cost.intermediates.sublane_fold_results`): its result elements at the
    chip's ``calibrated.sublane_fold`` rate (0 for other rows and on chips without it). Each
    result register is assembled from eight rows folded apart, so the charge follows the result,
    not the expansion: a selective scan summed over N = 8 and over N = 16 costs the same per
    result element on every chip (about 6.5 a cycle per TensorCore), where the loop rate alone was
    0.06-0.10x XLA's estimate on v6e and 7x and one rate per expanded element 2-4x apart.
    Fitted on the fit half of fixtures/tpu_heldout; like the other charges, no part of the
    bound."""
    cal = chip.calibration
    if not cal.sublane_fold_rate or "sublane_fold_results" not in ops:
        return np.zeros(len(ops))
    return ops["sublane_fold_results"].to_numpy(dtype=float) / cal.sublane_fold_rate


def second_passes(ops: pd.DataFrame, loop: np.ndarray, chip: Chip) -> np.ndarray:
    """The least time XLA:TPU's cost model gives a fusion that folds an array over a whole row
    and then uses it elementwise, streaming an operand from HBM (the ``second_pass_elements``
    column; :func:`hlo_roofline.cost.intermediates.second_pass_elements`: a softmax whose row sum
    is a row-spanning ``reduce-window``): its loop (``loop``, the charged loop time) and a second
    pass over the folded array at the same rate, ``calibrated.loop_elements`` (0 for other rows).
    No rate is fitted: the count of passes is the mechanism. At one pass these fusions were
    0.46-0.71x XLA's estimate on v5e and v5p; no part of the bound."""
    rate = chip.calibration.vector_elements_rate
    if not rate or "second_pass_elements" not in ops:
        return np.zeros(len(ops))
    again = ops["second_pass_elements"].to_numpy(dtype=float)
    return np.where(again > 0, loop + again / rate, 0.0)


def folded_products(ops: pd.DataFrame, chip: Chip) -> np.ndarray:
    """The least time XLA:TPU's cost model gives a matmul fusion that folds its own product
    (the ``folded_product_elements`` column; :func:`hlo_roofline.cost.tpu.units.folded_product_
    elements`: attention's scores written with their row max): the product's elements at the
    chip's ``calibrated.folded_product`` rate (0 for other rows and on chips without it). The
    fold takes the product one 32-bit value an element, where the loop counts a matmul's result
    two to a word; no part of the bound."""
    rate = chip.calibration.folded_product_rate
    if not rate or "folded_product_elements" not in ops:
        return np.zeros(len(ops))
    return ops["folded_product_elements"].to_numpy(dtype=float) / rate


def relayouts(ops: pd.DataFrame, chip: Chip) -> np.ndarray:
    """The least time XLA:TPU's cost model gives a copy that moves its lanes (the
    ``relaid_elements`` column; :func:`hlo_roofline.cost.tpu.units.relaid_tile_elements`: each
    element of each side in HBM, padded lanes included): those elements at the chip's
    ``calibrated.relayout`` rate (0 for other rows and on chips without it). The lane layout is
    hardware geometry, but the rate is XLA's charge, so this is no part of the bound."""
    rate = chip.calibration.relayout_rate
    if not rate or "relaid_elements" not in ops:
        return np.zeros(len(ops))
    return ops["relaid_elements"].to_numpy(dtype=float) / rate


def held_weight_elements(ops: pd.DataFrame, chip: Chip) -> np.ndarray:
    """The elements of the operand each matmul holds in the MXUs (its K×N weights, or K×M where it
    streams its few N columns: :func:`streams_columns`), padded to the array's tiles, per batch;
    0 for other rows, matrix-vector products and depthwise convolutions (the vector unit's)."""
    width = chip.mxu_width or 1
    m, n, k = (ops[c].to_numpy(dtype=np.int64) for c in ("mm_m", "mm_n", "mm_k"))
    batch = np.maximum(ops["mm_batch"].to_numpy(dtype=np.int64), 1) if "mm_batch" in ops else 1
    held = np.where(streams_columns(ops), m, n)
    on_mxu = (np.minimum(n, k) > 1) & (held > 1)
    if "depthwise_taps" in ops:  # a depthwise convolution runs on the vector unit
        on_mxu &= ops["depthwise_taps"].to_numpy(dtype=float) == 0
    return np.where(on_mxu, padded(held, width) * padded(k, width) * batch, 0).astype(float)


def weight_loads(ops: pd.DataFrame, chip: Chip, matmul: np.ndarray) -> np.ndarray:
    """The least time XLA:TPU's cost model gives a matmul by loading its weights (0 for other rows
    and on chips without the rate): the MXU is weight-stationary, so each held weight tile is
    loaded once whatever the rows streamed through it, and a matmul with few rows (a recurrent
    step's M = 8-64) takes its weights' load, not its rows' MXU time: the held elements
    (:func:`held_weight_elements`) at the chip's ``calibrated.weight_load`` rate, plus its
    ``calibrated.weight_load_overhead`` once per execution. XLA's rate, not the hardware's: no
    part of the bound."""
    cal = chip.calibration
    if not cal.weight_load_rate or "mm_k" not in ops:
        return np.zeros(len(ops))
    held = held_weight_elements(ops, chip)
    per_op = held / cal.weight_load_rate + (cal.weight_load_overhead_s or 0.0)
    return np.where(matmul & (held > 0), per_op * ops["count"].to_numpy(dtype=float), 0.0)


def unfolded_loops(ops: pd.DataFrame, loop: np.ndarray, chip: Chip) -> np.ndarray:
    """The charged ``loop`` time, 0 on the rows whose loop is their folded product's pass (its
    ``vector_elements`` the product's two to a word, nothing larger): the fold charges those
    elements one a value at its own rate (:func:`folded_products`), in place of the loop's. A
    chip without that rate keeps the loop's charge (nothing would take its place)."""
    if not chip.calibration.folded_product_rate or "folded_product_elements" not in ops:
        return loop
    product = ops["folded_product_elements"].to_numpy(dtype=float)
    elements = ops["vector_elements"].to_numpy(dtype=float)
    return np.where((product > 0) & (elements <= product / 2 * (1 + 1e-9)), 0.0, loop)
