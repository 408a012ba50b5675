"""Loops, branches, calls and async wrappers: the cost of what they run.

XLA counts a while body once and a conditional as the per-quantity maximum of its branches. The
roofline model multiplies a body by the trip count XLA proved, and takes the branch with the most
work; either way the container's own bookkeeping (tuples passed in and out) costs nothing.
"""

from __future__ import annotations

from typing import NamedTuple

from hlo_roofline.cost.base import (
    UNKNOWN_TRIP_COUNT,
    ZERO,
    Cost,
    CostContext,
    callee,
    rule,
    simple_cost,
)
from hlo_roofline.cost.collectives import COLLECTIVES
from hlo_roofline.cost.inplace import VIEWS
from hlo_roofline.hlo import attrs
from hlo_roofline.hlo.ir import Computation, Instruction, Module

INFERRED_TRIP_COUNT = "trip count inferred from the loop's counter"
# What passes a loop counter's value on unchanged: views, copies, reshapes and converts (an
# integer constant keeps its value through them), not only buffer views (``inplace.VIEWS``).
_SAME_VALUE = VIEWS | {"copy", "convert", "reshape"}


def trip_count(instr: Instruction, ctx: CostContext) -> tuple[int | None, bool]:
    """(trip count, inferred?): XLA's proven count, else one read off a simple counted loop."""
    n = attrs.known_trip_count(instr)
    if n is not None:
        return n, False
    try:
        n = _infer_trip_count(instr, callee(instr, ctx, "body"), callee(instr, ctx, "condition"))
    except (ValueError, IndexError, KeyError):
        n = None
    return n, n is not None


def _through_views(instr: Instruction) -> Instruction:
    while instr.opcode in _SAME_VALUE and len(instr.operands) == 1:
        instr = instr.operands[0]
    return instr


def _int_constant(instr: Instruction) -> int | None:
    instr = _through_views(instr)
    if instr.opcode != "constant" or instr.shape.dims:
        return None
    try:
        return int(instr.payload)
    except ValueError:
        return None


def _counter_index(instr: Instruction) -> int | None:
    """The tuple index ``instr`` reads from its computation's parameter, if it is such a read."""
    instr = _through_views(instr)
    if instr.opcode == "get-tuple-element" and instr.operands[0].opcode == "parameter":
        return attrs.int_attr(instr, "index", -1)
    return None


def _infer_trip_count(loop: Instruction, body: Computation, cond: Computation) -> int | None:
    """Trip count of ``for (i = a; i < b; i += s)`` as XLA lays it out (when it left it unstated)."""
    if cond.root.opcode != "compare" or not loop.operands:
        return None
    direction = cond.root.attrs.get("direction", "")
    lhs, rhs = cond.root.operands
    index, limit = _counter_index(lhs), _int_constant(rhs)
    if index is None or limit is None:
        index, limit = _counter_index(rhs), _int_constant(lhs)
        direction = {"LT": "GT", "GT": "LT", "LE": "GE", "GE": "LE"}.get(direction, direction)
    init_tuple = _through_views(loop.operands[0])
    if (
        index is None
        or limit is None
        or init_tuple.opcode != "tuple"
        or body.root.opcode != "tuple"
    ):
        return None
    start = _int_constant(init_tuple.operands[index])
    update = _through_views(body.root.operands[index])
    if start is None or update.opcode not in ("add", "subtract"):
        return None
    a, b = update.operands
    step = _int_constant(b) if _counter_index(a) == index else None
    if step is None and update.opcode == "add" and _counter_index(b) == index:
        step = _int_constant(a)
    if not step:
        return None
    step = step if update.opcode == "add" else -step
    span = {
        "LT": limit - start,
        "LE": limit - start + 1,
        "GT": limit - start,
        "GE": limit - start - 1,
    }
    if direction in ("LT", "LE") and step > 0:
        return max(0, -(-span[direction] // step))
    if direction in ("GT", "GE") and step < 0:
        return max(0, -(-span[direction] // step))
    return None


# The containers the analysis opens into rows (their bodies' ops are rows of their own).
CONTAINERS = frozenset({"while", "call", "conditional"})


def loop_paths(module: Module) -> dict[int, str]:
    """For each computation whose ops are report rows (the entry, and what while, call and
    conditional run), the while loops it runs in: their names, outermost first, joined by ``/``
    (``while.3/while.7``); ``""`` outside any loop. Keyed by ``id`` of the computation."""
    paths: dict[int, str] = {id(module.entry): ""}
    pending = [module.entry]
    while pending:
        comp = pending.pop()
        path = paths[id(comp)]
        for instr in comp.instructions:
            if instr.opcode not in CONTAINERS:
                continue
            inner = f"{path}/{instr.name}".lstrip("/") if instr.opcode == "while" else path
            for called in instr.called:
                if id(called) not in paths:  # one caller each in an optimized module
                    paths[id(called)] = inner
                    pending.append(called)
    return paths


class LoopCount(NamedTuple):
    """How often a while loop's body and condition run, and what the count rests on."""

    body: float
    condition: float
    note: str | None
    lower_bound: bool  # the trip count is unknown: the body counted once


def loop_multipliers(instr: Instruction, ctx: CostContext) -> LoopCount:
    """The executions of a while loop's body and condition under the context's model (its
    ``loop_trip_counts`` hook; XLA counts each once)."""
    if not ctx.cost_model.loop_trip_counts:
        return LoopCount(1, 1, None, False)
    n, inferred = trip_count(instr, ctx)
    if n is None:
        return LoopCount(1, 1, UNKNOWN_TRIP_COUNT, True)
    return LoopCount(n, n + 1, INFERRED_TRIP_COUNT if inferred else None, False)


@rule("while")
def while_(instr: Instruction, ctx: CostContext) -> Cost:
    loop = loop_multipliers(instr, ctx)
    body = ctx.computation(callee(instr, ctx, "body")).scaled(loop.body)
    cost = body + ctx.computation(callee(instr, ctx, "condition")).scaled(loop.condition)
    if loop.lower_bound:
        cost = cost.replace(lower_bound=True)
    return cost.with_note(loop.note) if loop.note else cost


def branches(instr: Instruction, ctx: CostContext) -> list[Computation]:
    if "branch_computations" in instr.attrs:
        return [c for c in instr.called]
    return [callee(instr, ctx, "true_computation"), callee(instr, ctx, "false_computation")]


def heaviest_branch(instr: Instruction, ctx: CostContext) -> int:
    """The branch with the most work (FLOPs + transcendentals + bytes): the roofline model's pick."""
    costs = [ctx.computation(b) for b in branches(instr, ctx)]
    work = [c.flops + c.transcendentals + c.bytes_accessed for c in costs]
    return max(range(len(work)), key=work.__getitem__)


@rule("conditional")
def conditional(instr: Instruction, ctx: CostContext) -> Cost:
    """XLA: the per-quantity maximum over the branches."""
    comps = branches(instr, ctx)
    cost = ctx.computation(comps[0])
    for comp in comps[1:]:
        cost = cost.maximum(ctx.computation(comp))
    return cost


@rule("conditional", model="roofline")
def heaviest_conditional(instr: Instruction, ctx: CostContext) -> Cost:
    """The branch with the most work (FLOPs + transcendentals + bytes), not a per-quantity maximum
    that may mix branches (the walk opens a conditional instead: hook ``open_conditionals``)."""
    return ctx.computation(branches(instr, ctx)[heaviest_branch(instr, ctx)])


@rule("call")
def call(instr: Instruction, ctx: CostContext) -> Cost:
    return ctx.computation(callee(instr, ctx, "to_apply"))


def wrapped_op(instr: Instruction) -> Instruction:
    """The op a sugared ``X-start`` wraps, e.g. the reduce-scatter inside ``reduce-scatter-start``."""
    shape = instr.shape
    result = shape.tuple_shapes[1] if shape.is_tuple and len(shape.tuple_shapes) > 1 else shape
    opcode = instr.opcode.removesuffix("-start")
    # The start's attributes: split where they already are, or where the op is a collective (its
    # row reads them from the start again); else as text, split only if the op's rule asks (a
    # slice's does not), so that the rows split each distinct text once.
    text = instr.attr_text
    attributes = instr.attrs if text is None or opcode in COLLECTIVES else text
    return Instruction.stand_in(instr, opcode, result, attributes)


def async_start(instr: Instruction, ctx: CostContext) -> Cost:
    """An async wrapper costs what it wraps: a called computation, or the sugared op (a
    ``custom-call-start`` is its custom call: a SparseCore offload's is priced by the custom-call
    rule as the program its ``called_computations`` name)."""
    if instr.opcode == "async-start" or _calls(instr):
        return ctx.computation(instr.called[0])
    return ctx.cost(wrapped_op(instr))


def _calls(instr: Instruction) -> bool:
    """The start names a called computation (``calls=``): looked for in its text first, whose
    split would otherwise be made for this alone."""
    text = instr.attr_text
    return "calls" in instr.attrs if text is None or "calls=" in text else False


def async_done(instr: Instruction, ctx: CostContext) -> Cost:
    """XLA charges an async done (or update) its operand table and result again."""
    return simple_cost(0.0, 0.0, ctx.default_bytes(instr))


def async_done_free(instr: Instruction, ctx: CostContext) -> Cost:
    """Nothing: an async pair is counted once, at its start."""
    return ZERO


rule("async-start", "*-start")(async_start)
rule("async-update", "async-done", "*-update", "*-done")(async_done)
rule("async-update", "async-done", "*-update", "*-done", model="roofline")(async_done_free)


@rule("copy-start")
def copy_start(instr: Instruction, ctx: CostContext) -> Cost:
    """A prefetch: XLA's default counts the (dst, src, context) result, the buffer twice."""
    return simple_cost(0.0, 0.0, ctx.default_bytes(instr))


@rule("copy-start", model="roofline")
def copy_start_once(instr: Instruction, ctx: CostContext) -> Cost:
    """A prefetch reads its operand and writes its destination once (not XLA's whole
    (dst, src, context) result)."""
    destination = instr.shape.tuple_shapes[0] if instr.shape.is_tuple else instr.shape
    return simple_cost(0.0, 0.0, ctx.read_and_written(instr, destination))
