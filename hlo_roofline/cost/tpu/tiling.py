"""XLA:TPU's tiling loops, read from the ``window_config`` its code generation writes in an op's
``backend_config``: the operand tiles a matmul fusion's loop fetches again, the vector unit's
passes of a K-split loop's epilogue and prologue, and the results of a deeply pipelined major
reduce. Only a TPU compile writes these; docs/cost-model.md says how each is counted.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterable

from hlo_roofline.cost.linalg import VMEM_SPACE, MatmulIO, computed_in_fusion, fused_matmul, in_vmem
from hlo_roofline.cost.tpu.units import folds_major_only
from hlo_roofline.hlo import attrs
from hlo_roofline.hlo.ir import Instruction, Shape

# window_config.buffering_level at which XLA:TPU charges a major reduce per result
DEEP_BUFFERING = 6


def major_reduce_results(reduces: Iterable[Instruction], config: dict | None) -> float:
    """Results ``reduces`` (a standalone reduce, or a fusion's root reduces) write by folding
    major dimensions only (:func:`folds_major_only`: a top-2 dispatch's two slots), where
    XLA:TPU pipelines the op's loop ``DEEP_BUFFERING`` deep (``config``: the op's decoded
    ``backend_config``); 0 elsewhere. XLA charges those at a rate per result of its own
    (``calibrated.major_reduce``, 7.9 a cycle per TensorCore on v5p, v6e and 7x: the MoE's dispatch
    masks) whatever the reduced size, dtype or reduction, far below the loop over what they
    fold; at shallower buffering, the loop's rate (docs/validation.md). A reduce of an array in
    VMEM (a prefetched operand) is left out: XLA charges some of those 3x less."""
    window = config.get("window_config") if isinstance(config, dict) else None
    try:
        level = int(window.get("buffering_level", 0)) if isinstance(window, dict) else 0
    except (TypeError, ValueError):
        return 0.0
    if level < DEEP_BUFFERING:
        return 0.0
    total = 0.0
    for reduce in reduces:
        operand = reduce.operands[0].shape if reduce.operands else None
        layout = operand.layout if operand is not None else None
        if layout is not None and layout.memory_space == VMEM_SPACE:
            continue
        if folds_major_only(reduce):
            total += sum(leaf.elements for leaf in reduce.shape.leaves())
    return total


_OPERAND_WINDOWS = ("input_window_bounds", "kernel_window_bounds")  # a matmul's lhs, rhs


def _operand_windows(matmul: Instruction, config: dict) -> list[int]:
    """Windows of each of a fused matmul's operands (lhs, rhs) in its tiling loop (``config``:
    the fusion's ``window_config``); 0 for one whose bounds do not describe it."""
    return [
        _windows(op.shape, config.get(key))
        for op, key in zip(matmul.operands, _OPERAND_WINDOWS, strict=False)
    ]


_MOST_ROLES = 6  # moving loop dimensions whose roles are tried together (4**6 ways at most)


def tile_reread_bytes(
    fusion: Instruction, io: MatmulIO, memo: dict | None = None, config: dict | None = None
) -> float:
    """HBM bytes a TPU matmul fusion's tiling loop reads beyond one read of each operand.

    XLA:TPU writes the loop in the fusion's ``window_config``: ``iteration_bounds`` (the loop's
    dimensions, the last innermost) and the windows of the result and of each operand
    (``output_window_bounds``, ``input_window_bounds``, ``kernel_window_bounds``, in layout
    tiles). Each loop dimension walks M (the lhs and the result), N (the rhs and the result), K
    (both operands) or a batch (all three); the roles are those whose bounds multiply to each
    array's number of windows. An operand's window is fetched again each time a dimension it
    depends on moves, so an operand of t windows whose innermost dimension is the i-th is read
    prod(bounds[:i + 1]) / t times: a weight gradient tiled over its result rereads one input
    once per window of the other, a K split innermost rereads both every step. Where several
    roles fit, the fewest rereads count (a lower bound); operands read from VMEM (``S(1)``) are
    free. ``config``: the fusion's decoded ``backend_config`` where the caller has it (fusions
    share their texts: decoded once each)."""
    config = (attrs.backend_config(fusion) if config is None else config).get("window_config")
    if not isinstance(config, dict):
        return 0.0
    try:
        bounds = [int(b) for b in config.get("iteration_bounds", [])]
    except (TypeError, ValueError):
        return 0.0
    matmul = fused_matmul(fusion, memo)
    if matmul is None or math.prod(bounds) <= 1 or len(matmul.operands) < 2:
        return 0.0
    result = fusion.shape.leaves()[0] if fusion.shape.leaves() else fusion.shape
    windows = _operand_windows(matmul, config)
    out_windows = _windows(result, config.get("output_window_bounds"))
    if not all(windows):
        return 0.0
    body_reads_vmem = any(  # most bodies take nothing from VMEM: no operand's walk back is needed
        in_vmem(p.shape)
        for p in fusion.called[0].parameters
        if p.shape.is_array
    )
    sizes = [
        0.0 if body_reads_vmem and _reads_vmem(op, op.shape.elements) else op.shape.elements * width
        for op, width in zip(matmul.operands, io[:2], strict=False)
    ]
    best = None
    for lhs, rhs in _operand_dims(tuple(bounds), windows[0], windows[1], out_windows):
        reread = 0.0
        for dims, tiles, size in ((lhs, windows[0], sizes[0]), (rhs, windows[1], sizes[1])):
            if dims is None:
                continue
            reads = _fetches(bounds, dims) if dims else 1
            reread += max(reads - tiles, 0) * size / tiles
        best = reread if best is None else min(best, reread)
    return best or 0.0


def _fetches(bounds: tuple[int, ...] | list[int], dims: tuple[int, ...]) -> int:
    """Times a tiling loop (``bounds``, the last innermost) fetches an operand whose windows
    move with the loop dimensions ``dims``: once each time one of them moves, so the product of
    the bounds down to the innermost of them."""
    return math.prod(bounds[: max(dims) + 1])


@functools.lru_cache(maxsize=1024)
def _operand_dims(
    bounds: tuple[int, ...], lhs: int, rhs: int, out: int
) -> list[tuple[tuple[int, ...] | None, tuple[int, ...] | None]]:
    """The loop dimensions each operand's windows move with, for every way of giving each moving
    dimension a role (M, N, K or a batch) under which the lhs, rhs and result have ``lhs``,
    ``rhs`` and ``out`` windows; without a result's count (0), each operand's own fits."""
    moving = [i for i, b in enumerate(bounds) if b > 1]
    found = []
    if out and len(moving) <= _MOST_ROLES:
        for roles in itertools.product("MNKB", repeat=len(moving)):
            on = {side: tuple(i for i, r in zip(moving, roles, strict=True) if r in side)
                  for side in ("MKB", "NKB", "MNB")}  # fmt: skip
            if all(math.prod(bounds[i] for i in on[side]) == count
                   for side, count in (("MKB", lhs), ("NKB", rhs), ("MNB", out))):  # fmt: skip
                found.append((on["MKB"], on["NKB"]))
        if found:
            return found
    own = [
        [dims for size in range(len(moving) + 1) for dims in itertools.combinations(moving, size)
         if math.prod(bounds[i] for i in dims) == count]
        for count in (lhs, rhs)
    ]  # fmt: skip
    # an operand no set of dimensions fits is counted as read once (None)
    return [(a, b) for a in own[0] or [None] for b in own[1] or [None]]


def _windows(shape: Shape, window: object) -> int:
    """How many windows of ``window`` (one bound per dimension, major to minor, the minor ones
    in units of the layout's tile) cover an array; 0 where they do not describe it."""
    layout = shape.layout
    if not shape.is_array or layout is None or not isinstance(window, list):
        return 0
    order = list(reversed(layout.minor_to_major)) if layout.minor_to_major else []
    if len(order) != len(window) or not order:
        return 0
    tile = layout.tiles[0] if layout.tiles else ()
    count = 1
    for position, (dim, bound) in enumerate(zip(order, window, strict=True)):
        try:
            size = int(bound)
        except (TypeError, ValueError):
            return 0
        from_minor = len(order) - position  # 1: the minor-most dimension
        if from_minor <= len(tile):
            size *= tile[-from_minor]
        if size <= 0:
            return 0
        count *= -(-shape.dims[dim] // size)
    return count


def _reads_vmem(value: Instruction, elements: int) -> bool:
    """Every array of at least half ``elements`` that ``value`` is computed from within its
    fusion (the fusion's parameters, through nested fusions) sits in VMEM."""
    params = _source_parameters([value], limit=256)
    large = [p for p in params if p.shape.is_array and 2 * p.shape.elements >= elements]
    return bool(large) and all(in_vmem(p.shape) for p in large)


# K steps per result tile from which the epilogue pass and the prologue's recompute are counted:
# the fitting set's epilogue and expert products split K 4 to 16 ways; at 2 XLA:TPU hides more of
# the pass than one K step (on v6e ViT's products split 2 ways came out at 1.4x with it), so the
# count stays within them.
_FEWEST_K_STEPS = 4


def _splits_k(steps: int, tiles: int) -> bool:
    """A tiling loop of ``steps`` over ``tiles`` result windows splits K evenly,
    ``_FEWEST_K_STEPS`` or more ways per window."""
    return steps >= _FEWEST_K_STEPS * tiles and steps % tiles == 0


def epilogue_pass(
    fusion: Instruction, memo: dict | None = None, config: dict | None = None
) -> tuple[float, float]:
    """(K steps per result tile, epilogue elements) of a TPU matmul fusion whose tiling loop
    splits K 4 or more ways, or keeps K whole (1 step per tile); (0, 0) for any other op, or
    where the compiler wrote no tiling.

    XLA:TPU's loop (``window_config``) walks the result's tiles (``output_window_bounds``) and,
    where its steps outnumber them, slices of K within each tile: the MXU's partial products of
    a tile are summed in an f32 accumulator finished only at the tile's last K step. The vector
    unit then passes, once per element, every array of the result's size: the results (the
    first is the accumulator's own pass: one element per result element, whatever the result's
    type) and the fused operands only the epilogue reads (SwiGLU backward's gate and up
    activations), whatever the arithmetic between them. XLA:TPU's estimates charge that pass
    after the MXU, overlapping it with only one K step of the next tile
    (:func:`hlo_roofline.judge.compute.matmul_pipeline`; docs/cost-model.md: a plain product's
    accumulator and 1-4 such arrays alike, no dependence on the number of elementwise ops).
    With K whole the one K step is the tile's whole MXU time: the vector unit's work per step
    (those arrays, and an operand the fusion relays into another dimension order, e.g. a GShard
    MoE's dispatched tokens, relaid again for every step that reads its window) costs only
    where it exceeds the MXU's. ``config``: the fusion's decoded ``backend_config``."""
    config = (attrs.backend_config(fusion) if config is None else config).get("window_config")
    matmul = fused_matmul(fusion, memo)
    loop, tiles = _tiling(fusion, matmul, config)
    if not tiles:
        return 0.0, 0.0
    steps = math.prod(loop)
    whole = steps == tiles
    if not whole and not _splits_k(steps, tiles):
        return 0.0, 0.0
    size = matmul.shape.elements
    fed = _feeds(matmul)
    results = sum(leaf.elements for leaf in fusion.shape.leaves() if leaf.elements == size)
    inputs = sum(
        p.shape.elements for p in fusion.called[0].parameters
        if p.shape.is_array and p.shape.elements == size and id(p) not in fed
    )  # fmt: skip
    relaid = 0.0
    if whole:  # a relaid operand's window is relaid each time the loop fetches it
        windows = _operand_windows(matmul, config)
        for side, operand in enumerate(matmul.operands[:2]):
            if not windows[side] or not _relaid(operand):
                continue
            relaid += operand.shape.elements * _fetches_per_window(loop, windows, tiles, side)
    return steps / tiles, float(results + inputs) + relaid


def _tiling(
    fusion: Instruction, matmul: Instruction | None, config: object
) -> tuple[tuple[int, ...], int]:
    """(iteration bounds, windows of the result) of a matmul fusion's tiling loop
    (``config``: its ``window_config``); ((), 0) where the compiler wrote none that describes it."""
    if not isinstance(config, dict) or matmul is None or not fusion.shape.leaves():
        return (), 0
    try:
        loop = tuple(int(b) for b in config.get("iteration_bounds", []))
    except (TypeError, ValueError):
        return (), 0
    bounds = config.get("output_window_bounds")
    # the bounds describe the matmul's result as laid out, or as the fusion writes it (a bitcast)
    tiles = _windows(matmul.shape, bounds) or _windows(fusion.shape.leaves()[0], bounds)
    return (loop, tiles) if tiles and loop else ((), 0)


def prologue_elements(
    fusion: Instruction, memo: dict | None = None, config: dict | None = None
) -> float:
    """Elements of a TPU matmul fusion's left operand (the M side: SwiGLU's ``silu(gate) * up``
    feeding the down projection, an RMS-normalised input) its vector unit computes again each
    time the tiling loop fetches a window of it: the operand's elements times the fetches
    (:func:`_fetches_per_window`), where the fusion computes the operand
    (:func:`linalg.computed_in_fusion`), the loop splits K (:func:`_splits_k`) and fetches each
    window twice or more. XLA:TPU's estimates grow with that count (SwiGLU's down projection at
    N = 1024-16384: 1-10 fetches) and charge none at one fetch (the operand computed once,
    beside the MXU: :func:`linalg.fused_operand_words`).

    0 otherwise, where XLA:TPU's estimates charge nothing per fetch: an operand computed from
    arrays in VMEM or merged from padded windows, a right operand (ViT's layer-normalised weight
    gradients), a loop that keeps K whole or splits it 2-3 ways (the vocabulary projection
    refetching its normalised input 501 times). ``config``: the fusion's decoded
    ``backend_config``."""
    config = (attrs.backend_config(fusion) if config is None else config).get("window_config")
    matmul = fused_matmul(fusion, memo)
    loop, tiles = _tiling(fusion, matmul, config)
    if not tiles or not _splits_k(math.prod(loop), tiles) or len(matmul.operands) < 2:
        return 0.0
    lhs = matmul.operands[0]
    elements = lhs.shape.elements
    if not computed_in_fusion(lhs) or _reads_vmem(lhs, elements):
        return 0.0
    windows = _operand_windows(matmul, config)
    fetches = _fetches_per_window(loop, windows, tiles, 0) if windows[0] else 1.0
    return float(elements) * fetches if fetches >= 2 else 0.0


def _fetches_per_window(loop: tuple[int, ...], windows: list[int], tiles: int, side: int) -> float:
    """Times a tiling loop (``loop``: its bounds; the result in ``tiles`` windows) fetches each
    window of the matmul's operand ``side`` (0: lhs, 1: rhs; ``windows``: each operand's count):
    the fewest any reading of the loop dimensions' roles gives (:func:`_operand_dims`), at
    least once; once where the other operand's windows are unknown."""
    if len(windows) < 2 or not all(windows):
        return 1.0
    fetches = min(
        _fetches(loop, dims[side]) if dims[side] else windows[side]
        for dims in _operand_dims(loop, windows[0], windows[1], tiles)
    )  # fmt: skip
    return max(fetches, windows[side]) / windows[side]


def _relaid(operand: Instruction) -> bool:
    """Whether a fused matmul's operand is its fusion's parameter copied into another dimension
    order (same dimensions, another ``minor_to_major``) inside the fusion: a transposing copy the
    vector unit does, not a bitcast."""
    item = operand
    while item.opcode != "parameter" and len(item.operands) == 1:
        item = item.operands[0]
    before, after = item.shape.layout, operand.shape.layout
    return (
        item is not operand and item.opcode == "parameter" and item.shape.is_array
        and before is not None and after is not None and item.shape.dims == operand.shape.dims
        and before.minor_to_major != after.minor_to_major
    )  # fmt: skip


def _feeds(matmul: Instruction) -> set[int]:
    """Ids of the fused parameters a matmul's operands are computed from (through nested
    fusions' operands too): a prologue's inputs, not the epilogue's."""
    return {id(p) for p in _source_parameters(matmul.operands, limit=4096)}


def _source_parameters(values: Iterable[Instruction], limit: int) -> list[Instruction]:
    """The fused parameters ``values`` are computed from within their fusion (nested fusions'
    operands followed too), walking at most ``limit`` instructions."""
    params: list[Instruction] = []
    stack, seen = list(values), set()
    while stack and len(seen) < limit:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if item.opcode == "parameter":
            params.append(item)
        else:
            stack.extend(item.operands)
    return params
