"""Ops that move or view data without arithmetic: views are free, copies read and write once."""

from __future__ import annotations

from hlo_roofline.cost.base import ZERO, Cost, CostContext, rule, simple_cost
from hlo_roofline.hlo import attrs
from hlo_roofline.hlo.ir import Instruction


@rule(
    "parameter", "constant", "get-tuple-element", "bitcast", "domain", "after-all",
    "add-dependency",
)  # fmt: skip
def free(instr: Instruction, ctx: CostContext) -> Cost:
    """Names, views and ordering tokens: no code runs, no memory is touched."""
    return ZERO


@rule(
    "copy", "reshape", "dynamic-reshape", "reverse", "pad", "concatenate", "iota", "broadcast",
    "opt-barrier", "partition-id", "replica-id", "get-dimension-size", "set-dimension-size",
    "topk", "batch-norm-training", "batch-norm-inference", "batch-norm-grad",
    "rng-get-and-update-state",
)  # fmt: skip
def read_and_write(instr: Instruction, ctx: CostContext) -> Cost:
    """Every operand read once and the result written once (XLA's default accounting)."""
    return simple_cost(0.0, 0.0, ctx.default_bytes(instr))


@rule("tuple")
def tuple_(instr: Instruction, ctx: CostContext) -> Cost:
    """A tuple only writes its table of pointers."""
    return simple_cost(0.0, 0.0, ctx.size(instr.shape))


@rule("transpose")
def transpose(instr: Instruction, ctx: CostContext) -> Cost:
    """Free when the layouts make it a bitcast; otherwise a copy."""
    return ZERO if transpose_is_bitcast(instr) else Cost(bytes_accessed=ctx.default_bytes(instr))


def transpose_is_bitcast(instr: Instruction) -> bool:
    out_layout, in_layout = instr.shape.layout, instr.operands[0].shape.layout
    if out_layout is None or in_layout is None:
        return False
    perm = attrs.ints(instr, "dimensions")
    if len(perm) != len(out_layout.minor_to_major):
        return False
    return tuple(perm[d] for d in out_layout.minor_to_major) == in_layout.minor_to_major


@rule("slice")
def slice_(instr: Instruction, ctx: CostContext) -> Cost:
    """Reads only the slice: the result size twice."""
    return simple_cost(0.0, 0.0, 2 * ctx.size(instr.shape))


@rule("dynamic-slice")
def dynamic_slice(instr: Instruction, ctx: CostContext) -> Cost:
    """The slice read and written, plus the first start index (XLA counts only that one)."""
    index = ctx.size(instr.operands[1].shape) if len(instr.operands) > 1 else 0
    return simple_cost(0.0, 0.0, 2 * ctx.size(instr.shape) + index)


@rule("dynamic-update-slice")
def dynamic_update_slice(instr: Instruction, ctx: CostContext) -> Cost:
    """In place: the update read and written, plus the first start index; the buffer is aliased."""
    update = ctx.size(instr.operands[1].shape)
    index = ctx.size(instr.operands[2].shape) if len(instr.operands) > 2 else 0
    return simple_cost(0.0, 0.0, 2 * update + index)


@rule("gather")
def gather(instr: Instruction, ctx: CostContext) -> Cost:
    """Reads only the gathered rows (the result size) and the indices."""
    return simple_cost(0.0, 0.0, 2 * ctx.size(instr.shape) + ctx.size(instr.operands[1].shape))


@rule("scatter")
def scatter(instr: Instruction, ctx: CostContext) -> Cost:
    """Operand, result and updates touched only where updated (3 × updates) plus the indices;
    the combiner runs once per update element."""
    n = len(instr.operands) // 2  # operands: n inputs, indices, n updates
    updates = instr.operands[n + 1 :]
    update_bytes = sum(ctx.size(u.shape) for u in updates)
    combiner = ctx.computation(instr.called[0]) if instr.called else ZERO
    per_element = updates[0].shape.elements if updates else 0
    return Cost(
        flops=combiner.flops * per_element,
        transcendentals=combiner.transcendentals * per_element,
        bytes_accessed=3 * update_bytes + ctx.size(instr.operands[n].shape),
    )


@rule("infeed")
def infeed(instr: Instruction, ctx: CostContext) -> Cost:
    return simple_cost(0.0, 0.0, ctx.output_bytes(instr.shape))


@rule("outfeed")
def outfeed(instr: Instruction, ctx: CostContext) -> Cost:
    return simple_cost(0.0, 0.0, sum(ctx.output_bytes(op.shape) for op in instr.operands))
