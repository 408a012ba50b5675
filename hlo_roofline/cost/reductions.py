"""Ops that apply a small computation many times: reduce, reduce-window, map, select-and-scatter."""

from __future__ import annotations

import math

from hlo_roofline.cost.base import Cost, CostContext, callee, rule
from hlo_roofline.hlo import attrs
from hlo_roofline.hlo.ir import Instruction


def _applied(instr: Instruction, ctx: CostContext, key: str, times: float) -> Cost:
    """The FLOPs of the ``key=`` computation applied ``times`` times (its bytes are not copied)."""
    sub = ctx.computation(callee(instr, ctx, key))
    return Cost(flops=sub.flops * times, transcendentals=sub.transcendentals * times)


def _first_array(instr: Instruction):
    return instr.shape.tuple_shapes[0] if instr.shape.is_tuple else instr.shape


@rule("reduce")
def reduce(instr: Instruction, ctx: CostContext) -> Cost:
    """The reducer runs once per input element that is folded away: E(in) − E(out)."""
    times = instr.operands[0].shape.elements - _first_array(instr).elements
    return _applied(instr, ctx, "to_apply", times).replace(bytes_accessed=ctx.default_bytes(instr))


@rule("reduce-window")
def reduce_window(instr: Instruction, ctx: CostContext) -> Cost:
    """(window size − 1) reductions per output element, padding included (as XLA counts).

    A window that spans a whole padded dimension (a reduce followed by a broadcast, as XLA emits for
    cumulative sums) is counted as that reduce instead.
    """
    return _reduce_window(instr, ctx, scans=False)


@rule("reduce-window", model="roofline")
def reduce_window_scan(instr: Instruction, ctx: CostContext) -> Cost:
    """A cumulative window (``jnp.cumsum`` on TPU) is a scan: ceil(log2 n) combines per element (a
    parallel prefix), not the n − 1 of a window of n; a sliding max or min of n (a local
    attention's row max) is ceil(log2 n) combines per element too (windows doubled, overlapping:
    the combine is idempotent)."""
    return _reduce_window(instr, ctx, scans=True)


def _reduce_window(instr: Instruction, ctx: CostContext, scans: bool) -> Cost:
    """XLA's count; with ``scans`` a cumulative window counted as a parallel prefix."""
    window = attrs.window(instr)
    out = _first_array(instr)
    window_elements = math.prod(w.size for w in window)
    times = (window_elements - 1) * out.elements
    reduced = [w for w in window if w.size != 1]
    padded = [w for w in window if w.pad_low or w.pad_high]
    if len(reduced) == 1 and len(padded) == 1 and not instr.shape.is_tuple:
        for i, w in enumerate(window):
            if (
                w.size != 1
                and w.pad_low
                and w.pad_low == w.pad_high
                and w.size == 2 * w.pad_low + 1
                and w.pad_low == out.dims[i] - 1
            ):
                span = out.dims[i]
                times = out.elements // span + span - 1
    span = _prefix_span(window, instr.operands[0].shape, out) if scans else 0
    sliding = _sliding_span(window) if scans and span <= 1 and _idempotent(instr, ctx) else 0
    if sliding > 1:  # a sliding max or min: windows doubled (never more than XLA's count)
        times = min(times, out.elements * (sliding - 1).bit_length())
    if span > 1:
        # A cumulative sum: a scan takes ceil(log2 n) shifted combines per element (Hillis and
        # Steele's parallel prefix, the form a vector unit runs), not the n − 1 of a window of n.
        times = out.elements * (span - 1).bit_length()
    return _applied(instr, ctx, "to_apply", times).replace(bytes_accessed=ctx.default_bytes(instr))


_IDEMPOTENT = frozenset({"maximum", "minimum", "and", "or"})  # x ∘ x = x: overlaps fold freely


def _idempotent(instr: Instruction, ctx: CostContext) -> bool:
    """The window's combine is one idempotent op (max, min, and, or)."""
    try:
        root = callee(instr, ctx, "to_apply").root
    except (KeyError, AttributeError):
        return False
    return root is not None and root.opcode in _IDEMPOTENT


def _sliding_span(window) -> int:
    """n where the window slides n wide along one dimension, stride 1, undilated (every output
    the combination of n neighbours); 0 for any other window. With an idempotent combine, m(2k)
    = m(k) ∘ m(k) shifted by k covers it in ceil(log2 n) combines per output (the last step's
    windows overlapping)."""
    wide = [w for w in window if w.size != 1]
    if len(wide) != 1:
        return 0
    w = wide[0]
    plain = w.stride == 1 and w.base_dilation == w.window_dilation == 1
    return w.size if plain else 0


def _prefix_span(window, operand, out) -> int:
    """n where the window makes every output the combination of the n elements up to it along one
    dimension (a cumulative sum or product: window n, n − 1 of padding on one side, stride 1, the
    operand's size); 0 for any other window."""
    if operand.is_tuple or len(window) != len(out.dims) or operand.dims != out.dims:
        return 0
    spans = [
        w.size for i, w in enumerate(window)
        if w.size != 1 and w.stride == 1 and w.base_dilation == w.window_dilation == 1
        and w.size == out.dims[i] and {w.pad_low, w.pad_high} == {0, w.size - 1}
    ]  # fmt: skip
    others = [w for w in window if w.size != 1]
    return spans[0] if len(spans) == 1 and len(others) == 1 else 0


@rule("select-and-scatter")
def select_and_scatter(instr: Instruction, ctx: CostContext) -> Cost:
    """Per source element: (window − 1) selects and one scatter."""
    source = instr.operands[1].shape.elements
    window_elements = math.prod(w.size for w in attrs.window(instr))
    cost = _applied(instr, ctx, "select", source * (window_elements - 1)) + _applied(
        instr, ctx, "scatter", source
    )
    return cost.replace(bytes_accessed=ctx.default_bytes(instr))


@rule("map")
def map_(instr: Instruction, ctx: CostContext) -> Cost:
    times = instr.shape.elements
    return _applied(instr, ctx, "to_apply", times).replace(bytes_accessed=ctx.default_bytes(instr))


@rule("rng")
def rng(instr: Instruction, ctx: CostContext) -> Cost:
    """XLA prices a random number like one transcendental."""
    return Cost(transcendentals=instr.shape.elements, bytes_accessed=ctx.default_bytes(instr))


@rule("rng-bit-generator")
def rng_bit_generator(instr: Instruction, ctx: CostContext) -> Cost:
    elements = sum(leaf.elements for leaf in instr.shape.leaves())
    return Cost(transcendentals=elements, bytes_accessed=ctx.default_bytes(instr))
