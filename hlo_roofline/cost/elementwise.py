"""Elementwise ops: one FLOP (or one transcendental) per output element, default bytes."""

from __future__ import annotations

from hlo_roofline.cost.base import Cost, CostContext, rule, simple_cost
from hlo_roofline.hlo.ir import Instruction

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
