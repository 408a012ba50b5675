"""Fusions: the inner ops' FLOPs, but only the bytes that cross the fusion boundary."""

from __future__ import annotations

from hlo_roofline.cost.base import Cost, CostContext, rule
from hlo_roofline.cost.data_movement import gather, scatter
from hlo_roofline.cost.elementwise import ARITHMETIC, TRANSCENDENTAL
from hlo_roofline.cost.inplace import (
    VIEWS,
    collective_results,
    handed_on,
    in_place,
    passed_through,
)
from hlo_roofline.hlo import attrs
from hlo_roofline.hlo.ir import Computation, Instruction

IMMEDIATE_CONSTANT_MAX_ELEMENTS = 1  # larger constants inside a fusion are read from memory


@rule("fusion")
def fusion(instr: Instruction, ctx: CostContext) -> Cost:
    """The inner ops' FLOPs; the bytes crossing the boundary (a custom gather/scatter fusion: that op)."""
    body = instr.called[0]
    custom = _custom_gather_or_scatter(instr, body, ctx)
    if custom is not None:
        return custom
    return _fused(instr, body, ctx.computation(body), ctx)


@rule("fusion", model="roofline")
def fusion_async_once(instr: Instruction, ctx: CostContext) -> Cost:
    """A TPU async collective split into ``AsyncCollectiveStart``/``Done`` fusions is counted once,
    at the start, and a fusion that continues a started collective is priced without it, bytes
    included (the collective's operand is read and its result written by the start's DMA)."""
    body = instr.called[0]
    custom = _custom_gather_or_scatter(instr, body, ctx)
    if custom is not None:
        return custom
    inner = ctx.computation(body)
    marker = attrs.async_marker(instr)
    if marker in ASYNC_MARKERS:  # a TPU async collective split into start/done fusions
        return _async_collective_half(instr, inner, marker, ctx)
    continued = _continued(body, ctx)
    return _fused(instr, body, _without(inner, continued, ctx), ctx, continued)


def _custom_gather_or_scatter(
    instr: Instruction, body: Computation, ctx: CostContext
) -> Cost | None:
    """XLA prices a kCustom fusion holding a gather or scatter as that op alone."""
    if instr.attrs.get("kind") == "kCustom":
        inner = _gather_or_scatter(body, ctx)
        if inner is not None:
            return gather(inner, ctx) if inner.opcode == "gather" else scatter(inner, ctx)
    return None


def _fused(
    instr: Instruction,
    body: Computation,
    inner: Cost,
    ctx: CostContext,
    continued: tuple[Instruction, ...] = (),
) -> Cost:
    """The inner ops' FLOPs (``inner``), the bytes the fusion writes and reads (``continued``:
    the collectives it continues, whose bytes are their start's)."""
    written = _output_bytes(instr, body, ctx, continued)
    unread = _handed_on(instr, continued) if ctx.cost_model.fusion_in_place else frozenset()
    return Cost(
        flops=inner.flops,
        transcendentals=inner.transcendentals,
        bytes_accessed=written + _body_read_bytes(body, ctx, unread),
        comm_bytes=inner.comm_bytes,
        unknown=inner.unknown,
        notes=inner.notes,
    )


def _gather_or_scatter(body: Computation, ctx: CostContext) -> Instruction | None:
    """The first gather or scatter of a fused computation (looked for once per computation)."""
    key = ("gather_or_scatter", id(body))
    if key not in ctx.memo:
        ctx.memo[key] = next(
            (i for i in body.instructions if i.opcode in ("gather", "scatter")), None
        )
    return ctx.memo[key]


def _handed_on(instr: Instruction, continued: tuple[Instruction, ...]) -> frozenset[int]:
    """Parameters the fusion does not read: those it returns unchanged into the buffer they alias
    (:func:`inplace.passed_through`: one buffer, nothing moves) or only hands to a collective it
    continues (read at the collective's start)."""
    passed = passed_through(instr)
    if not passed and not continued:
        return frozenset()
    ids = {id(c) for c in continued}
    return handed_on(instr, passed, lambda user: id(user) in ids)


def _body_read_bytes(
    body: Computation, ctx: CostContext, unread: frozenset[int] = frozenset()
) -> float:
    """Bytes a fused computation reads: its parameters (by their users) and its large constants,
    but not the parameters numbered in ``unread``. The same for every fusion calling ``body``
    with the same ``unread``: worked out once."""
    key = ("body_read", id(body), unread)
    cached = ctx.memo.get(key)
    if cached is not None:
        return cached
    constants = [i for i in body.instructions if i.opcode == "constant"]  # (one pass, no frames)
    read = sum(
        ctx.size(i.shape) for i in constants if i.shape.elements > IMMEDIATE_CONSTANT_MAX_ELEMENTS
    )
    for param in body.parameters:
        if unread and param.parameter_number in unread:
            continue
        if param.shape.is_tuple:
            leaf_reads = (
                _parameter_read_bytes(_tuple_leaf(param, index, ctx), ctx)
                for index in _leaf_indices(param.shape)
            )
            read += sum(leaf_reads)
        else:
            param_bytes = _parameter_read_bytes(param, ctx)
            if ctx.cost_model.fusion_parameter_read_once:
                param_bytes = min(param_bytes, ctx.size(param.shape))
            read += param_bytes
    ctx.memo[key] = read
    return read


ASYNC_MARKERS = attrs.ASYNC_COLLECTIVE_MARKERS


def _continued(body: Computation, ctx: CostContext) -> tuple[Instruction, ...]:
    """The collectives a fused computation only continues: started by a TPU async-collective
    start fusion (the same ``channel_id``) and priced there, bytes and all."""
    channels = ctx.in_flight_channels()
    if not channels:
        return ()
    key = ("continued", id(body))
    found = ctx.memo.get(key)
    if found is None:
        found = ctx.memo[key] = tuple(
            i
            for i in body.instructions
            if i.opcode != "parameter" and i.attrs.get("channel_id") in channels
        )
    return found


def _without(inner: Cost, continued: tuple[Instruction, ...], ctx: CostContext) -> Cost:
    """A fusion's inner cost less the collectives it only continues (priced at their start)."""
    if not continued:
        return inner
    costs = [ctx.cost(i) for i in continued]
    return inner.replace(
        flops=inner.flops - sum(c.flops for c in costs),
        comm_bytes=inner.comm_bytes - sum(c.comm_bytes for c in costs),
    )


def _async_collective_half(instr: Instruction, inner: Cost, marker: str, ctx: CostContext) -> Cost:
    """Count the pair once, at the start: its operands read and the collective's result written."""
    if marker == "AsyncCollectiveDone":
        return Cost()
    result = instr.shape.tuple_shapes[1] if instr.shape.is_tuple else instr.shape
    return inner.replace(bytes_accessed=ctx.read_and_written(instr, result))


def _output_bytes(
    instr: Instruction, body: Computation, ctx: CostContext, continued: tuple[Instruction, ...] = ()
) -> float:
    """Result leaves, except that an in-place dynamic-update-slice root writes only its update.

    The roofline model finds every result updated in place (:func:`inplace.in_place`: also a
    scatter's, through bitcasts and nested fusions, in a tuple root): each writes its updates. A
    result returned unchanged into the buffer it aliases (:func:`inplace.passed_through`) writes
    nothing, so a collective's destination listed twice (passed on, and the collective's result
    in it) is written once; by a collective the fusion only ``continued``, not at all (its start's)."""
    if ctx.cost_model.fusion_in_place:
        aliases = in_place(instr)
        unwritten = set(passed_through(instr))
        if continued:
            ids = {id(c) for c in continued}
            unwritten.update(i for i, c in collective_results(instr).items() if id(c) in ids)
        if aliases or unwritten:
            return sum(
                0
                if i in unwritten
                else sum(ctx.size(u) for u in aliases[i].updates)
                if i in aliases
                else ctx.size(leaf)
                for i, leaf in enumerate(instr.shape.leaves())
            )
    root = body.root
    if root.opcode == "dynamic-update-slice":
        return ctx.size(root.operands[1].shape)
    if not instr.shape.is_tuple:
        return ctx.output_bytes(instr.shape)
    total = 0.0
    for i, element in enumerate(instr.shape.tuple_shapes):
        producer = root.operands[i] if root.opcode == "tuple" and i < len(root.operands) else None
        if producer is not None and producer.opcode == "dynamic-update-slice":
            total += ctx.size(producer.operands[1].shape)
        else:
            total += ctx.output_bytes(element)
    return total


def _parameter_read_bytes(param: Instruction, ctx: CostContext) -> float:
    """XLA's FusionParameterReadBytes: what reading a fused parameter costs, by its users
    (memoized: nested fusions that share bodies would otherwise be walked once per path)."""
    memo = ctx.memo.get(_PARAM_READ)  # by the parameter itself: no key made per parameter
    if memo is None:
        memo = ctx.memo[_PARAM_READ] = {}
    cached = memo.get(param)
    if cached is None:
        cached = memo[param] = _parameter_read_bytes_uncached(param, ctx)
    return cached


_PARAM_READ = ("param_read",)


def _parameter_read_bytes_uncached(param: Instruction, ctx: CostContext) -> float:
    size = 0.0
    seen_plain_user = False
    own_size = ctx.size(param.shape)
    in_place_reads = ctx.cost_model.fusion_in_place
    follow = ctx.cost_model.fusion_follow_reads
    for user in ctx.users(param.computation).get(id(param), ()):
        opcode = user.opcode
        if opcode == "fusion":
            size += _nested_fusion_read_bytes(param, user, ctx)
        elif opcode == "slice" or (opcode == "dynamic-slice" and user.operands[0] is param):
            size += ctx.size(user.shape)
        elif opcode == "dynamic-update-slice" and user.operands[0] is param:
            pass  # aliased with the output
        elif in_place_reads and opcode == "scatter" and _scattered_into(param, user):
            # in place: only the rows the updates combine into are read
            size += sum(ctx.size(u.shape) for u in user.operands[len(user.operands) // 2 + 1 :])
        elif follow and opcode in VIEWS and not user.is_root:
            size += _parameter_read_bytes(user, ctx)  # read as its view is
        elif follow and opcode == "pad" and user.operands[0] is param and not user.is_root:
            # read where the padded value is, at the operand's share of it (the rest is the
            # padding value): a window sliced out of a padded operand (a ring step's chunk)
            # reads only that window
            padded = _parameter_read_bytes(user, ctx) * own_size / max(ctx.size(user.shape), 1)
            size += min(own_size, padded)
        elif follow and opcode == "gather" and user.operands[0] is param:
            size += ctx.size(user.shape)  # only the gathered rows (an embedding lookup's tokens)
        elif follow and opcode == "convert" and not user.is_root:
            # converted element by element: read where the converted value is
            size += _parameter_read_bytes(user, ctx) * own_size / max(ctx.size(user.shape), 1)
        elif opcode in ("broadcast", "reshape"):
            size += own_size
        elif not seen_plain_user:
            seen_plain_user = True
            size += own_size
    return size


def _scattered_into(param: Instruction, scatter_op: Instruction) -> bool:
    """``param`` is one of the buffers ``scatter_op`` updates (and not also its indices or updates)."""
    n = len(scatter_op.operands) // 2
    return any(op is param for op in scatter_op.operands[:n]) and all(
        op is not param for op in scatter_op.operands[n:]
    )


def _nested_fusion_read_bytes(param: Instruction, nested: Instruction, ctx: CostContext) -> float:
    """What reading ``param`` through a nested fusion costs.

    The roofline model follows the parameter into the nested fusion. XLA looks instead at the
    nested fusion's own users (so a nested fusion that is the root reads nothing) and follows the
    parameter in only for the first user that is not a slice of a "simple" nested fusion.
    """
    params = nested.called[0].parameters
    slots = [i for i, op in enumerate(nested.operands) if op is param]
    if ctx.cost_model.fusion_follow_reads:
        inner = sum(_parameter_read_bytes(params[i], ctx) for i in slots)
        return inner * _sliced_fraction(nested, ctx)
    root = nested.called[0].root
    size = 0.0
    for i in slots:
        simple = not root.operands or params[i] is root.operands[0]
        seen = False
        for user in ctx.users(nested.computation).get(id(nested), ()):
            sliced = simple and user.opcode in ("slice", "dynamic-slice", "dynamic-update-slice")
            if sliced and user.opcode == "slice":
                size += ctx.size(user.shape)
            elif sliced and user.operands[0] is nested:
                size += ctx.size(user.shape) if user.opcode == "dynamic-slice" else 0
            elif sliced:
                if not seen:
                    seen = True
                    size += ctx.size(nested.shape)
            elif not seen:
                seen = True
                size += _parameter_read_bytes(params[i], ctx)
    return size


# Ops after which each result element still depends on O(1) elements of the operands at the same
# place (a relayout, a convert, elementwise arithmetic): slicing the result slices the reads.
_PER_ELEMENT = frozenset(
    {*ARITHMETIC, *TRANSCENDENTAL, "copy", "bitcast", "transpose", "reshape", "broadcast",
     "parameter", "constant", "tuple", "get-tuple-element"}
)  # fmt: skip


def _sliced_fraction(nested: Instruction, ctx: CostContext) -> float:
    """The share of a nested fusion's result its users read, where they only slice it and each
    result element is computed from the operands' elements at its own place (a relayout or
    convert of a stacked weight that a scan's dynamic-slice reads one layer of: XLA computes only
    the slice). 1 otherwise."""
    users = ctx.users(nested.computation).get(id(nested), ())
    elements = nested.shape.elements if nested.shape.is_array else 0
    if nested.is_root or not users or not elements:
        return 1.0
    if any(
        u.opcode not in ("slice", "dynamic-slice") or u.operands[0] is not nested for u in users
    ):
        return 1.0
    if not _per_element_body(nested, ctx):
        return 1.0
    return min(1.0, sum(u.shape.elements for u in users) / elements)


def _per_element_body(fusion: Instruction, ctx: CostContext) -> bool:
    key = ("per_element", id(fusion.called[0]))
    found = ctx.memo.get(key)
    if found is None:
        found = ctx.memo[key] = all(
            i.opcode in _PER_ELEMENT
            or (i.opcode == "fusion" and bool(i.called) and _per_element_body(i, ctx))
            for i in fusion.called[0].instructions
        )
    return found


def _leaf_indices(shape, prefix=()):
    if not shape.is_tuple:
        yield prefix
        return
    for i, element in enumerate(shape.tuple_shapes):
        yield from _leaf_indices(element, (*prefix, i))


def _tuple_leaf(param: Instruction, index: tuple[int, ...], ctx: CostContext) -> Instruction:
    """Follow get-tuple-element users down to the leaf at ``index`` (or stop where there is none)."""
    users = ctx.users(param.computation)
    node = param
    for i in index:
        key = ("elements", id(node))
        elements = ctx.memo.get(key)
        if elements is None:  # index -> the first get-tuple-element reading it (one pass a node)
            elements = ctx.memo[key] = {}
            for user in reversed(users.get(id(node), ())):
                if user.opcode == "get-tuple-element":
                    elements[user.attrs.get("index")] = user
        node = elements.get(str(i), node)
    return node
