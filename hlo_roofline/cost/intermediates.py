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

from hlo_roofline.cost.tpu.units import root_reduces
from hlo_roofline.hlo import attrs
from hlo_roofline.hlo.ir import DTYPE_BYTES, Instruction

WORD_BYTES = 4  # a vector register's lane holds one 32-bit word: two bf16 values, four int8


def expanded_elements(fusion: Instruction) -> float:
    """Elements of the largest array a fusion's root reduces fold, where it is larger than every
    array the fusion reads or writes (an expansion the fusion computes and folds) and the fold
    takes in the operand's lanes or sublanes, in 32-bit words (a bf16 expansion, a router's
    one-hot, two elements to a word, as the loop packs them); 0 for other ops."""
    if fusion.opcode != "fusion":
        return 0.0
    boundary = [leaf.elements for op in fusion.operands for leaf in op.shape.leaves()]
    boundary += [leaf.elements for leaf in fusion.shape.leaves()]
    largest = max(boundary, default=0)
    found = 0.0
    for reduce in root_reduces(fusion):
        operand = reduce.operands[0].shape if reduce.operands else None
        if operand is None or not operand.is_array or operand.elements <= largest:
            continue
        if _folds_minor(reduce):
            width = min(DTYPE_BYTES.get(operand.dtype, 4), WORD_BYTES)
            found = max(found, operand.elements * width / WORD_BYTES)
    return found


def _folds_minor(reduce: Instruction) -> bool:
    """The reduce folds its operand's lanes or sublanes (its two minor-most dimensions)."""
    operand = reduce.operands[0].shape
    layout = operand.layout
    order = (
        list(layout.minor_to_major)
        if layout and layout.minor_to_major
        else list(range(len(operand.dims) - 1, -1, -1))
    )
    reduced = set(attrs.ints(reduce, "dimensions"))
    return bool(reduced & set(order[:2]))
