"""The TPU compute model's counts: the elements an op's loop passes through a TensorCore's vector
unit, and those a reduce folds across its lanes or over major dimensions.

These are not XLA's and not a cost: the report's ``vector_elements`` and ``lane_reduced_elements``
columns, which the TPU time model (:mod:`hlo_roofline.judge.compute`, through
:class:`~hlo_roofline.judge.time_model.TpuTimeModel`) runs at the chip's loop rate. They are counted in
``cost/``, not by the judges, because they read what the cost rules read (in-place updates, sliced
reads, matmul prologues); docs/cost-model.md ("Vector work") says how.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable

from hlo_roofline.cost import custom_call
from hlo_roofline.cost.base import BOOKKEEPING, RULE_ERRORS, Cost
from hlo_roofline.cost.control_flow import CONTAINERS
from hlo_roofline.cost.inplace import NOTHING_MOVED, fresh_buffer_results, in_place, moved_by_dma
from hlo_roofline.cost.linalg import (
    comparison_passes,
    in_vmem,
    words,
)
from hlo_roofline.hlo import attrs
from hlo_roofline.hlo.ir import DTYPE_BYTES, Instruction, Shape, tiled_elements

# Ops whose data moves by DMA or that only hand control on: no loop of theirs runs on a vector unit.
_NO_VECTOR_LOOP = BOOKKEEPING | CONTAINERS | {
    "copy-start", "copy-done", "custom-call", "send", "recv", "send-done", "recv-done", "infeed",
    "outfeed", "async-start", "async-update", "async-done", "opt-barrier", "partition-id",
    "replica-id",
}  # fmt: skip
_ASYNC_HALVES = ("-start", "-update", "-done")
_IN_PLACE_OPS = frozenset({"dynamic-update-slice", "scatter", "fusion"})
# Library selections that run on the TensorCore's vector unit: priced by their comparison passes.
_SELECTIONS = frozenset(custom_call.SELECTION_TARGETS) - {"GatherScatterIndicesBitpacked"}


def no_vector_loop(opcode: str, instr: Instruction | None = None) -> bool:
    """No loop of this op's runs on the TensorCore's vector unit: bookkeeping, DMA, control, or
    an async half (``custom-call-start`` of a SparseCore offload, ``call-done``, ...), whose work
    is its called program's, priced where that runs. A library selection (``TopK``) is a custom
    call that does run there."""
    if opcode == "custom-call" and instr is not None:
        return custom_call.target(instr) not in _SELECTIONS
    return opcode in _NO_VECTOR_LOOP or opcode.endswith(_ASYNC_HALVES)


def vector_elements(
    instr: Instruction,
    cost: Cost,
    geometry: tuple[int, int, int, int] | None,
    updates_in_place: bool,
    prologue_words: float = 0.0,
    sliced: dict[int, int] | None = None,
    streamed_words: float = 0.0,
) -> float:
    """Elements the op's loop passes through a vector unit: its largest array, capped by what its
    rule says it reads (a slice of a large operand reads only the slice) or writes. A matmul's
    operands stream into the MXU: only its result passes, two elements to a 32-bit word whatever
    its width (:func:`result_pass`), or the operands a fused prologue computes
    (``prologue_words``: :func:`linalg.fused_operand_words`), or its wide operand where that
    streams through the vector registers (``streamed_words``: :func:`linalg.streamed_operand_words`:
    a decode step's attention scores), whichever is more (the kernel pipelines the streams, so
    each alone is a lower bound). A
    buffer updated in place (:func:`inplace.in_place`: a dynamic-update-slice's or scatter's,
    fused or not) does not pass: only the update and the indices do; an operand a fusion reads
    only through slices passes only its largest slice (``sliced``: :func:`inplace.sliced_reads`). A sort or
    top-k passes its keys once per comparison pass (:func:`linalg.comparison_passes`). An op on
    scalars alone (loop counters, cache positions) runs on the scalar unit: none (XLA:TPU
    estimates none of them either)."""
    results = instr.shape.leaves()
    operands = [leaf for op in instr.operands for leaf in op.shape.leaves()]
    # (maps of C getters, not generators: a row of most fusions and ops runs this)
    if (
        max(map(_elements, results), default=0) <= 1
        and max(map(_elements, operands), default=0) <= 1
    ):
        return 0.0  # scalars only (a loop counter, an index): the scalar unit's, not a vector loop
    # a fused collective's results and the buffers passed on beside it: DMA's (or nothing moves)
    moved = moved_by_dma(instr) if instr.opcode == "fusion" else NOTHING_MOVED
    if moved.results:
        results = [leaf for i, leaf in enumerate(results) if i not in moved.results]
        operands = [
            leaf for i, op in enumerate(instr.operands) if i not in moved.operands
            for leaf in op.shape.leaves()
        ]  # fmt: skip
    aliases = in_place(instr) if instr.opcode in _IN_PLACE_OPS else {}
    if aliases:
        buffers = {alias.operand for alias in aliases.values()} | moved.operands
        results = [
            leaf for i, leaf in enumerate(instr.shape.leaves())
            if i not in aliases and i not in moved.results
        ]  # fmt: skip
        results += [u for alias in aliases.values() for u in alias.updates if u.is_array]
        operands = [
            leaf for i, op in enumerate(instr.operands) if i not in buffers
            for leaf in op.shape.leaves()
        ]  # fmt: skip
    elif updates_in_place or instr.opcode == "dynamic-update-slice":
        buffers = {(leaf.dtype, leaf.dims) for leaf in results} & {
            (leaf.dtype, leaf.dims) for leaf in operands
        }
        results = [leaf for leaf in results if (leaf.dtype, leaf.dims) not in buffers]
        operands = [leaf for leaf in operands if (leaf.dtype, leaf.dims) not in buffers]
        fresh = fresh_buffer_results(instr)  # a slice written into a buffer it allocates
        if fresh:
            results = [leaf for i, leaf in enumerate(instr.shape.leaves()) if i not in fresh
                       and (leaf.dtype, leaf.dims) not in buffers]  # fmt: skip
    if geometry is not None:
        result_words = max((result_pass(leaf) for leaf in results), default=0.0)
        return float(max(result_words, prologue_words, streamed_words))
    if instr.operands and (  # (keys to compare: a mutant may give a top-k none)
        instr.opcode == "sort"
        or (instr.opcode == "custom-call" and not no_vector_loop("custom-call", instr))
    ):
        return float(instr.operands[0].shape.elements * comparison_passes(instr))
    leaves = [*results, *operands]
    if not leaves:
        return 0.0
    sliced = sliced if sliced and not aliases else {}
    written_elements = max(map(register_elements, results), default=0)
    if sliced:  # an operand read only through slices passes only its largest slice
        unsliced = [
            leaf.elements for i, op in enumerate(instr.operands) if i not in sliced
            for leaf in op.shape.leaves()
        ]  # fmt: skip
        return float(max([written_elements, *unsliced, *sliced.values()]))
    # a result passes as its tile fills the registers; an operand is read at full rows, except
    # by a reduction, which folds the operand's own registers (:func:`_folds_registers`)
    largest_operand = max(map(_elements, operands), default=0)
    per_register = 1.0  # registers an operand element takes, relative to a full 8-row tile
    if written_elements < largest_operand and _folds_registers(instr):
        folded = max(operands, key=_elements)
        per_register = register_elements(folded) / folded.elements
        largest_operand *= per_register
    largest = max(written_elements, largest_operand)
    width = DTYPE_BYTES.get
    smallest_item = min([width(leaf.dtype, 1) for leaf in leaves]) or 1
    written = sum([leaf.elements * width(leaf.dtype, 1) for leaf in results])
    read = max(cost.bytes_accessed - written, 0.0) / smallest_item * per_register  # the most read
    passed = min(largest, max(read, written_elements))
    # an array the fusion computes and folds over a major dimension (a one-hot broadcast to
    # [G, T, 2, E, C] and summed over the 2) passes whole, however little is read or written
    return float(max(passed, folded_intermediate(instr)))


_elements = operator.attrgetter("elements")


def _folds_registers(instr: Instruction) -> bool:
    """A reduce, or a fusion whose root is one (a softmax's sum of exponentials, a routing
    mask's count): its loop computes on the operand where it lies, in the operand's own
    registers, and folds them into a smaller result, so the operand passes as its tile fills the
    registers (:func:`register_elements`). A relayout instead converts what it reads into the tile
    it writes, and is counted by that."""
    if instr.opcode == "reduce":
        return True
    if instr.opcode != "fusion" or not instr.called:
        return False
    root = instr.called[0].root
    roots = root.operands if root.opcode == "tuple" else (root,)
    return any(r.opcode == "reduce" for r in roots)


SUBLANES = 8  # rows of a TPU vector register (each 128 lanes of 32-bit words)


def register_elements(leaf: Shape) -> float:
    """Elements a result passes through the vector unit as, in whole registers of 8 sublanes: an
    array whose layout tile has fewer rows (``T(1,128)``, ``T(2,128)(2,1)``, ``T(4,128)(2,1)``: a
    row of a ``[1, 14336]`` slice, routing indices, per-row statistics) fills only r of them,
    packed or not, so each of its rows costs a register's 8: 8/r times its elements. XLA:TPU
    charges such loops about 1/8 and 2/8 of an 8-row one's rate per element (MaxText's
    ``T(1,128)`` weight copies, ``T(2,128)`` broadcasts and ``T(2,128)(2,1)`` slices, on every
    chip; no loop-bound op of the report set checks ``T(4,128)``). It charges a relayout by the
    tile it writes, not the one it reads (a copy out of ``T(2,128)(2,1)`` into ``T(8,128)(2,1)``
    costs its elements), so only results are counted this way. The rows a tile pads (a ``[1,
    ...]`` bf16 array in ``T(2,128)(2,1)``) are not counted, so this stays a lower bound: XLA
    charges those 1.1-1.3x more. Nor are the lanes a narrow minor dimension pads: XLA charges
    them 3x (a copy into a minor dimension of 8) to 14x (the MoE's routing masks), no one rule."""
    layout = leaf.layout
    if layout is None or not layout.tiles or len(layout.tiles[0]) != 2 or len(leaf.dims) < 2:
        return leaf.elements
    rows = layout.tiles[0][0]
    if rows >= SUBLANES or rows <= 0:
        return leaf.elements
    return leaf.elements * SUBLANES / rows


def result_pass(leaf) -> float:
    """Words a matmul's result passes through the vector unit as: its elements two to a word,
    whatever its width. XLA:TPU charges an f32 result (attention's scores, 8.6 GB of them in
    fixtures/tpu_programs' prefill) per element as it does a bf16 one, 1.1-1.4x the loop rate's
    words on every chip; at f32 width the score fusion came out 1.42x XLA's estimate on 7x."""
    return min(words(leaf), leaf.elements / 2)


def lane_reduced_elements(reduce: Instruction) -> float:
    """Elements a standalone reduce folds across the lanes: its operand's when the reduced
    dimensions include the operand's minor-most one (the 128 lanes of a TPU vector register)."""
    folds = _folds_lanes(reduce)
    return float(reduce.operands[0].shape.elements) if folds else 0.0


def major_reduced_elements(reduces: Iterable[Instruction]) -> float:
    """Elements ``reduces`` (a standalone reduce, or the reduces of one fused computation) fold
    over dimensions other than the lanes (a top-2 dispatch's two slots, experts, rows): their
    operands', where none of them folds its operand's minor-most dimension; 0 otherwise. The
    vector unit adds such registers elementwise; XLA:TPU's estimate of these reduces can be
    several times that of the same sum written as slices and adds (docs/validation.md)."""
    total = 0.0
    for reduce in reduces:
        folds = _folds_lanes(reduce)
        if folds is None or folds:
            return 0.0
        total += reduce.operands[0].shape.elements
    return total


def folded_intermediate(instr: Instruction) -> float:
    """Elements of the largest array a fusion computes and its root's reduces fold over major
    dimensions only (:func:`folds_major_only`), in whole registers (:func:`register_elements`);
    0 for other ops. A router's one-hot (``[G, T, 2, E, C]`` from ``[G, T, 2, E]`` indices and an
    iota) is twice the masks it sums into and is never read or written, but the loop computes
    every element of it: XLA:TPU charges it the loop rate per element of the one-hot on every
    chip where it buffers the loop shallowly (fixtures/tpu_estimates/dispatch_mask on v5e:
    docs/validation.md). A reduce that also folds the sublanes (the same one-hot summed over
    experts and slots, the combine's gradient) is charged less than that and is not counted."""
    folded = [
        register_elements(r.operands[0].shape) for r in root_reduces(instr) if folds_major_only(r)
    ]  # fmt: skip
    return max(folded, default=0.0)


def root_reduces(fusion: Instruction) -> tuple[Instruction, ...]:
    """The reduces a fusion returns: its root, or the elements of its root tuple, that are
    reduces; none for any other op."""
    if fusion.opcode != "fusion" or not fusion.called or fusion.called[0].root is None:
        return ()
    root = fusion.called[0].root
    roots = root.operands if root.opcode == "tuple" else (root,)
    return tuple(r for r in roots if r.opcode == "reduce")


def folds_major_only(reduce: Instruction) -> bool:
    """A reduce whose dimensions are all major: neither its operand's lanes (minor-most) nor its
    sublanes (second-minor) fold, so each result is a vector add of whole registers."""
    if reduce.opcode != "reduce" or not reduce.operands:
        return False
    operand = reduce.operands[0].shape
    if not operand.is_array or len(operand.dims) < 3:
        return False
    layout = operand.layout
    order = (
        list(layout.minor_to_major) if layout and layout.minor_to_major
        else list(range(len(operand.dims) - 1, -1, -1))
    )  # fmt: skip
    try:
        reduced = attrs.ints(reduce, "dimensions")
    except RULE_ERRORS:
        return False
    return bool(reduced) and not set(order[:2]) & set(reduced)


def _folds_lanes(reduce: Instruction) -> bool | None:
    """Whether a reduce's dimensions include its operand's minor-most one; None where it has no
    array operand or its dimensions cannot be read."""
    if not reduce.operands or not reduce.operands[0].shape.is_array:
        return None
    operand = reduce.operands[0].shape
    if not operand.dims:
        return None
    layout = operand.layout
    minor = layout.minor_to_major[0] if layout and layout.minor_to_major else len(operand.dims) - 1
    try:
        reduced = attrs.ints(reduce, "dimensions")
    except RULE_ERRORS:
        return None
    return minor in reduced


_PRODUCTS = frozenset({"convolution", "dot"})
_MAX_TILE_ROWS = 8  # rows of a (8, 128) tile: the relayout count's evidence (docs/validation.md)


def folded_product_elements(fusion: Instruction) -> float:
    """Elements of a matmul's product that its own fusion folds: a reduce inside the fusion
    whose operand is computed from the product (attention's scores and their row max, written
    together); 0 for other ops. The fold runs on the vector unit over every product element as a
    32-bit value (the product converted from bf16 to f32 first), so the product cannot pass it
    two to a word as a matmul's result otherwise does (:func:`result_pass`). XLA:TPU charges
    such fusions per product element at a rate of its own (``calibrated.folded_product``,
    :func:`hlo_roofline.judge.compute.folded_products`); at the loop rate over half the product
    they were 0.45-0.49x its estimate on v5e and v5p. A depthwise convolution's fusion (its taps
    priced apart) is counted by its taps, not here."""
    if fusion.opcode != "fusion" or not fusion.called:
        return 0.0
    body = fusion.called[0].instructions
    reduces = [i for i in body if i.opcode == "reduce" and i.operands]
    if not reduces:
        return 0.0
    found = 0.0
    for reduce in reduces:
        product = _product_under(reduce.operands[0])
        if product is not None and product.shape.is_array:
            found = max(found, float(product.shape.elements))
    return found


def _product_under(value: Instruction) -> Instruction | None:
    """The matmul (a ``dot``/``convolution``, or a nested fusion computing one) that ``value`` is
    computed from inside one fused body, or None where it reads none."""
    stack, seen = [value], set()
    while stack:
        instr = stack.pop()
        if id(instr) in seen:
            continue
        seen.add(id(instr))
        if instr.opcode in _PRODUCTS or (
            instr.opcode == "fusion"
            and instr.called
            and any(i.opcode in _PRODUCTS for i in instr.called[0].instructions)
        ):
            return instr
        stack.extend(instr.operands)
    return None


def relaid_tile_elements(copy: Instruction) -> float:
    """Elements, as their layouts' tiles store them, of the arrays a copy that moves its lanes
    reads from and writes to HBM: a ``copy`` whose result's minor-most (lane) dimension is not
    its operand's (a transpose XLA:TPU lays out as a relayout: attention's scores turned
    heads-minor, an image's channels moved first); 0 for other ops. Each element of such a copy
    leaves its lane alone, so XLA:TPU charges it per element of each side in HBM, the lanes a
    narrow minor dimension pads included (a 40-wide channel dimension fills 128 lanes), and not a
    side in VMEM (a copy between two VMEM arrays is charged almost nothing): at the rate
    ``calibrated.relayout`` (:func:`hlo_roofline.judge.compute.relayouts`), whatever the element
    type (bf16 and f32 alike). Counted only where each side's tile has at most 8 rows: 7x's bf16
    ``T(16,128)`` copies are charged 2-3x less per element, not modelled."""
    if copy.opcode != "copy" or not copy.operands:
        return 0.0
    source, result = copy.operands[0].shape, copy.shape
    if not (source.is_array and result.is_array) or len(source.dims) < 2:
        return 0.0
    if _lane_dimension(source) == _lane_dimension(result):
        return 0.0
    sides = (source, result)
    if any(s.layout and s.layout.tiles and s.layout.tiles[0][0] > _MAX_TILE_ROWS for s in sides):
        return 0.0
    return float(sum(_stored_elements(s) for s in sides if not in_vmem(s)))


def _lane_dimension(shape: Shape) -> int:
    layout = shape.layout
    return layout.minor_to_major[0] if layout and layout.minor_to_major else len(shape.dims) - 1


def _stored_elements(shape: Shape) -> int:
    layout = shape.layout
    if layout is None or not layout.tiles or len(layout.tiles[0]) != 2:
        return shape.elements
    return tiled_elements(shape.dims, layout)
