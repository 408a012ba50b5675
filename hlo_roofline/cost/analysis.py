"""Walk a module and price every executed op: one row per non-container instruction.

Containers (while, call, and conditional where the model's ``open_conditionals`` hook says so) are
opened and their bodies walked with an execution count; everything else, fusions included, is one
row whose cost comes from the rule registered for its opcode. The rows' columns are the
extractors' (:mod:`hlo_roofline.cost.table`).
"""

from __future__ import annotations

import collections
import math
from collections.abc import Generator, Iterable, Iterator

from hlo_roofline import schema
from hlo_roofline.cost.base import (
    BOOKKEEPING,
    COST_MODELS,
    COSTS_KEPT,
    POINTER_BYTES,
    RULE_ERRORS,
    ZERO,
    Cost,
    CostContext,
    callee,
)
from hlo_roofline.cost.control_flow import CONTAINERS, branches, heaviest_branch, loop_multipliers
from hlo_roofline.cost.row import PricedOp
from hlo_roofline.hlo.ir import Computation, Instruction, Module

_priced_op = tuple.__new__  # PricedOp(...) without its keyword-handling constructor (one per row)


def price(instr: Instruction, ctx: CostContext) -> Cost:
    """The rule's cost, or a flagged unknown cost if the rule cannot make sense of the op."""
    try:
        cost = ctx.cost(instr)
        if cost is ZERO:  # names, views, an async pair's done half: nothing to check
            return cost
        # Sums and reports use floats: a cost past their range (absurd windows, trip counts) is
        # flagged here rather than overflowing later.
        values = (
            float(cost.flops), float(cost.transcendentals), float(cost.bytes_accessed),
            float(cost.comm_bytes),
        )  # fmt: skip
        if min(values) < 0:  # e.g. a reduce whose result has more elements than its input
            return Cost(unknown=True, notes=(f"{instr.opcode}: its shapes and attributes "
                                             "disagree (a cost came out negative)",))  # fmt: skip
        return cost
    except RecursionError:
        return Cost(unknown=True, notes=("computation nesting too deep to price",))
    except RULE_ERRORS as exc:
        return Cost(unknown=True, notes=(f"could not price {instr.opcode}: {exc!r}",))


def walk(
    module: Module,
    cost_model: str = "roofline",
    pad_to_tiles: bool = False,
    tuple_pointer_bytes: int = POINTER_BYTES,
) -> list[PricedOp]:
    """Every executed op of the module's entry, with nested bodies opened."""
    return list(priced(module, cost_model, pad_to_tiles, tuple_pointer_bytes))


def priced(
    module: Module,
    cost_model: str = "roofline",
    pad_to_tiles: bool = False,
    tuple_pointer_bytes: int = POINTER_BYTES,
) -> Iterator[PricedOp]:
    """:func:`walk`'s ops one at a time, each priced as it is asked for: a consumer that keeps
    only what it makes of them (:func:`~hlo_roofline.cost.table.rows`, :func:`tallied`) never
    holds them all. Shapes sized as ``pad_to_tiles`` and ``tuple_pointer_bytes`` say
    (:func:`~hlo_roofline.cost.base.shape_sizes` gives a model's)."""
    if cost_model not in COST_MODELS:
        raise ValueError(f"cost_model must be one of {COST_MODELS}, not {cost_model!r}")
    walker = _Walk(CostContext(module, cost_model, pad_to_tiles, tuple_pointer_bytes))
    return walker.visit(module.entry, 1, None, False, 0)


class _Walk:
    """The state of one :func:`walk`: the context and the computations opened so far.

    Methods rather than nested functions: two closures calling each other form a reference cycle,
    which would keep the context (and its caches) alive until the next garbage collection.
    """

    __slots__ = ("ctx", "opened")

    def __init__(self, ctx: CostContext) -> None:
        self.ctx = ctx
        self.opened: set[int] = set()  # ids of the computations walked so far

    def visit(
        self, comp: Computation, count: float, note: str | None, short: bool, depth: int
    ) -> Generator[PricedOp, None, None]:
        """Price ``comp``'s ops ``count`` times each; ``note`` and ``short`` (the count is a lower
        bound) come from the loops and branches around them."""
        ctx = self.ctx
        costs = ctx._computation_costs
        for instr in comp.instructions:
            if instr.opcode in CONTAINERS and depth < 64:
                opened = yield from self.open(instr, count, note, short, depth)
                if opened:
                    continue
            cost = price(instr, ctx)
            if note:
                cost = cost.with_note(note)
            if short:
                cost = cost.replace(lower_bound=True)
            yield _priced_op(PricedOp, (instr, count, cost))
            if len(costs) > COSTS_KEPT:  # (between two ops: what the rules remember can go)
                ctx.trim()

    def open(
        self, instr: Instruction, count: float, note: str | None, short: bool, depth: int
    ) -> Generator[PricedOp, None, bool]:
        """Walk a container's bodies instead of pricing it; False if it is not one (or is broken).

        XLA's optimized modules give every body one caller (its call graph is flattened); a body
        called from several places is opened once and priced as one row at the others, so that
        the rows stay as many as the text's instructions (not one per path through the calls).
        A generator of the bodies' ops, which returns whether it opened the container."""
        ctx = self.ctx
        if instr.opcode == "conditional" and not ctx.cost_model.open_conditionals:
            return False  # priced as one row by its rule (XLA's: its branches' maximum)
        if any(id(comp) in self.opened for comp in instr.called):
            return False
        self.opened.update(id(comp) for comp in instr.called)
        try:
            if instr.opcode == "while":
                loop = loop_multipliers(instr, ctx)
                if not math.isfinite(count * loop.body * loop.condition):
                    raise OverflowError("execution count out of range")
                inner_note, inner_short = loop.note or note, loop.lower_bound or short
                for comp, times in (("body", loop.body), ("condition", loop.condition)):
                    yield from self.visit(
                        callee(instr, ctx, comp), count * times, inner_note, inner_short, depth + 1
                    )
                return True
            if instr.opcode == "call":
                yield from self.visit(callee(instr, ctx, "to_apply"), count, note, short, depth + 1)
                return True
            if instr.opcode == "conditional":
                taken = heaviest_branch(instr, ctx)
                for i, comp in enumerate(branches(instr, ctx)):
                    branch_note = (
                        None
                        if i == taken
                        else f"branch {i} not counted (branch {taken} does the most work)"
                    )
                    yield from self.visit(
                        comp, count if i == taken else 0, branch_note or note, short, depth + 1
                    )
                return True
        except RULE_ERRORS:
            return False  # priced as one flagged row instead
        return False


def summarize(ops: Iterable[PricedOp], cost_model: str) -> schema.CostSummary:
    """Module totals, and how much of the step could be priced."""
    summary: dict = {}
    collections.deque(tallied(ops, cost_model, summary), maxlen=0)  # (run through, in C)
    return summary  # type: ignore[return-value]


def tallied(ops: Iterable[PricedOp], cost_model: str, summary: dict) -> Iterator[PricedOp]:
    """``ops`` passed on one at a time; once they have all gone through, ``summary`` holds what
    :func:`summarize` says of them (a stream of ops is summed as it goes to
    :func:`~hlo_roofline.cost.table.rows`)."""
    flops = transcendentals = bytes_accessed = comm_bytes = 0.0
    priced = counted = 0.0
    notes: dict[str, None] = {}
    unknown_ops: list[str] = []
    lower_bound = False
    for op in ops:
        yield op
        instr, count, cost = op
        if cost is not ZERO:  # (a zero cost adds nothing: every sum starts at +0.0)
            lower_bound = lower_bound or cost.lower_bound
            flops += cost.flops * count
            transcendentals += cost.transcendentals * count
            bytes_accessed += cost.bytes_accessed * count
            comm_bytes += cost.comm_bytes * count
            for n in cost.notes:
                notes[n] = None
        if count == 0 or instr.opcode in BOOKKEEPING:
            continue
        counted += count
        if cost.unknown:
            unknown_ops.append(instr.name)
        else:
            priced += count
    summary.update({
        "cost_model": cost_model,
        "flops": flops,
        "transcendentals": transcendentals,
        "bytes_accessed": bytes_accessed,
        "comm_bytes": comm_bytes,
        "coverage": priced / counted if counted else 1.0,
        "unknown_ops": unknown_ops,
        "lower_bound": lower_bound,
        "notes": list(notes),
    })  # fmt: skip
