"""An array a TPU fusion expands and folds inside itself: the elements its loop computes that no
operand or result holds.

A fusion that broadcasts its operands to a larger array, computes on it and reduces it back (a
selective scan's discretisation ``exp(dt[..., None] * A) * x[..., None]`` summed over the state
dimension, a GNN's per-edge messages summed per node) never reads or writes that array, so the
result-or-operand count of :func:`hlo_roofline.cost.tpu.units.vector_elements` misses it; but its
loop computes every element. XLA:TPU charges those elements at a rate of its own, about the same
number of cycles on every chip (``calibrated.expanded_elements``), well below the loop rate of
v6e and 7x: the report's ``expanded_elements`` column counts them, and the expected model
charges them (:func:`hlo_roofline.judge.compute.expanded_loops`). Folds over major dimensions
only (a router's one-hot summed over its two picks) are the vector loop's own
(:func:`hlo_roofline.cost.tpu.units.folded_intermediate`) and are not counted here.
"""

from __future__ import annotations

from hlo_roofline.cost.linalg import in_vmem
from hlo_roofline.cost.tpu.units import root_reduces
from hlo_roofline.hlo import attrs
from hlo_roofline.hlo.ir import DTYPE_BYTES, Instruction

WORD_BYTES = 4  # a vector register's lane holds one 32-bit word: two bf16 values, four int8


def expanded_elements(fusion: Instruction) -> float:
    """Elements of the largest array a fusion's root reduces fold, where it is larger than every
    array the fusion reads or writes (an expansion the fusion computes and folds) and the fold
    takes in the operand's lanes or sublanes, in 32-bit words (a bf16 expansion, a router's
    one-hot, two elements to a word, as the loop packs them); 0 for other ops."""
    return max((_words(r.operands[0].shape) for r in _expansion_folds(fusion)), default=0.0)


def sublane_fold_results(fusion: Instruction) -> float:
    """Result elements, in 32-bit words, of a fusion that folds an expansion over its sublanes
    (its second-minor dimension, the lanes kept) where XLA:TPU tiled the loop into column strips
    (``window_config.output_window_bounds``, one entry per dimension of the expansion, major to
    minor: one 128-lane tile wide, one index of every dimension above the rows, e.g.
    ``[1, 512, 1, 1]`` over ``[B, L, N, D]``); 0 for other ops.

    Such a loop walks one strip of rows at a time, folds each row's sublanes apart and assembles
    the folded rows into result registers eight at a time, so XLA:TPU's charge follows the
    result's elements, not the expansion's: a selective scan's ``[B, L, D, N]`` summed over N
    costs the same per result element at N = 8 and N = 16, about 6.5 results a cycle per
    TensorCore on every chip (``calibrated.sublane_fold``,
    :func:`hlo_roofline.judge.compute.sublane_folds`). Tiled in blocks instead (several lane tiles
    or several batch rows a step, ``[2, 108, 1, 4]``), the same fusion is charged per expanded
    element (``calibrated.expanded_elements``) and 2-4× less per result."""
    window = attrs.output_window(fusion)
    if len(window) < 3 or window[-1] != 1 or any(w != 1 for w in window[:-3]):
        return 0.0
    found = 0.0
    for reduce in _expansion_folds(fusion):
        order = _minor_to_major(reduce.operands[0].shape)
        reduced = set(attrs.ints(reduce, "dimensions"))
        if len(order) >= 2 and order[0] not in reduced and order[1] in reduced:
            found = max(found, sum(_words(leaf) for leaf in reduce.shape.leaves()))
    return found


def second_pass_elements(fusion: Instruction) -> float:
    """Elements, in 32-bit words, of an array a fusion computes, folds over a whole row and uses
    again elementwise (a softmax's ``exp(x - max)``, summed by a row-spanning ``reduce-window``
    that XLA writes for the row sum broadcast back, then divided by it), where the fusion streams
    an operand from HBM; 0 for other ops.

    The row's fold must finish before any element of the row can be divided by it, so the loop
    passes over the array twice: once to fold the row, once to finish each element. XLA:TPU
    charges both passes (1.6-2.5 loop passes' time on every chip where an operand streams from
    HBM) but one where every operand is in VMEM (0.9-1.6), so only the former are counted. The
    expected model charges them at the loop rate (no rate of their own:
    :func:`hlo_roofline.judge.compute.second_passes`)."""
    if fusion.opcode != "fusion" or not fusion.called:
        return 0.0
    if all(in_vmem(leaf) for op in fusion.operands for leaf in op.shape.leaves()):
        return 0.0
    found = 0.0
    for instr in fusion.called[0].instructions:
        if instr.opcode != "reduce-window" or not instr.operands or instr.shape.is_tuple:
            continue
        operand = instr.operands[0]
        if operand.opcode == "parameter" or not _spans_a_row(instr):
            continue  # folded as read: one pass
        found = max(found, _words(operand.shape))
    return found


def _spans_a_row(reduce_window: Instruction) -> bool:
    """Each output of the window is its whole row's fold: one dimension's window is twice the
    dimension less one, padded by the dimension less one each side (a reduce broadcast back)."""
    dims = reduce_window.shape.dims
    window = attrs.window(reduce_window)
    return len(window) == len(dims) and any(
        w.size > 1 and w.pad_low == w.pad_high == dims[i] - 1 and w.size == 2 * dims[i] - 1
        for i, w in enumerate(window)
    )


def _expansion_folds(fusion: Instruction) -> list[Instruction]:
    """The fusion's root reduces whose operand is larger than every array at its boundary and
    which fold that operand's lanes or sublanes."""
    if fusion.opcode != "fusion":
        return []
    boundary = [leaf.elements for op in fusion.operands for leaf in op.shape.leaves()]
    boundary += [leaf.elements for leaf in fusion.shape.leaves()]
    largest = max(boundary, default=0)
    found = []
    for reduce in root_reduces(fusion):
        operand = reduce.operands[0].shape if reduce.operands else None
        if operand is None or not operand.is_array or operand.elements <= largest:
            continue
        if _folds_minor(reduce):
            found.append(reduce)
    return found


def _words(shape) -> float:
    """An array's elements in 32-bit words (16-bit values two to a word)."""
    if not shape.is_array:
        return 0.0
    return shape.elements * min(DTYPE_BYTES.get(shape.dtype, 4), WORD_BYTES) / WORD_BYTES


def _minor_to_major(shape) -> list[int]:
    layout = shape.layout
    if layout and layout.minor_to_major:
        return list(layout.minor_to_major)
    return list(range(len(shape.dims) - 1, -1, -1))


def _folds_minor(reduce: Instruction) -> bool:
    """The reduce folds its operand's lanes or sublanes (its two minor-most dimensions)."""
    order = _minor_to_major(reduce.operands[0].shape)
    reduced = set(attrs.ints(reduce, "dimensions"))
    return bool(reduced & set(order[:2]))
