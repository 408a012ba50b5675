"""Elementwise ops: one FLOP (or one transcendental) per output element, default bytes."""

from __future__ import annotations

import operator

from hlo_roofline.cost.base import Cost, CostContext, rule, simple_cost
from hlo_roofline.hlo.ir import Computation, Instruction

TRANSCENDENTAL = (
    "exponential", "exponential-minus-one", "log", "log-plus-one", "logistic", "power", "sqrt",
    "cbrt", "rsqrt", "tanh", "tan", "sine", "cosine", "atan2", "erf",
    "acos", "acosh", "asin", "asinh", "atanh", "cosh", "sinh",
)  # fmt: skip
ARITHMETIC = (
    "add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "abs", "negate",
    "sign", "floor", "ceil", "round-nearest-afz", "round-nearest-even", "compare", "select",
    "clamp", "convert", "and", "or", "xor", "not", "shift-left", "shift-right-arithmetic",
    "shift-right-logical", "popcnt", "count-leading-zeros", "clz", "is-finite", "real", "imag",
    "complex", "reduce-precision", "stochastic-convert", "bitcast-convert",
)  # fmt: skip


@rule(*TRANSCENDENTAL)
def transcendental(instr: Instruction, ctx: CostContext) -> Cost:
    return simple_cost(0.0, instr.shape.elements, ctx.default_bytes(instr))


@rule(*ARITHMETIC)
def arithmetic(instr: Instruction, ctx: CostContext) -> Cost:
    return simple_cost(instr.shape.elements, 0.0, ctx.default_bytes(instr))


@rule("convert", model="roofline")
def convert_where_gathered(instr: Instruction, ctx: CostContext) -> Cost:
    """A fused convert read only by gathers (through bitcasts) is computed where they gather: a
    fusion computes per output element, so a cross-entropy's logits converted to f32 before one
    element per token is picked cost that element, not the array (measured on an H100)."""
    elements = instr.shape.elements
    body = instr.computation
    if body is not None and body.is_fusion and _gathers(body, ctx):
        gathered = _gathered_elements(instr, ctx)
        if gathered is not None:
            elements = min(elements, gathered)
    return simple_cost(elements, 0.0, ctx.default_bytes(instr))


def _gathers(body: Computation, ctx: CostContext) -> bool:
    """The fused body holds a gather (most do not: their converts are priced whole without a
    look at their users). Found once per body."""
    key = ("gathers", id(body))
    found = ctx.memo.get(key)
    if found is None:
        found = ctx.memo[key] = "gather" in map(_opcode, body.instructions)
    return found


_opcode = operator.attrgetter("opcode")


def _gathered_elements(value: Instruction, ctx: CostContext, depth: int = 0) -> int | None:
    """Elements gathers take from ``value`` when nothing else reads it, else None."""
    users = ctx.users(value.computation).get(id(value), ())
    if not users or value.is_root or depth > 8:
        return None
    total = 0
    for user in users:
        if user.opcode == "gather" and user.operands[0] is value and user.operands[1] is not value:
            total += user.shape.elements
        elif user.opcode == "bitcast":
            inner = _gathered_elements(user, ctx, depth + 1)
            if inner is None:
                return None
            total += inner
        else:
            return None
    return total
