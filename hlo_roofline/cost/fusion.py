"""Fusions: the inner ops' FLOPs, but only the bytes that cross the fusion boundary."""

from __future__ import annotations

from hlo_roofline.cost.base import Cost, CostContext, rule
from hlo_roofline.cost.data_movement import gather, scatter
from hlo_roofline.hlo import attrs
from hlo_roofline.hlo.ir import Computation, Instruction

IMMEDIATE_CONSTANT_MAX_ELEMENTS = 1  # larger constants inside a fusion are read from memory


@rule("fusion")
def fusion(instr: Instruction, ctx: CostContext) -> Cost:
    body = instr.called[0]
    if instr.attrs.get("kind") == "kCustom":  # XLA prices a custom gather/scatter fusion as that op
        for inner in body.instructions:
            if inner.opcode == "gather":
                return gather(inner, ctx)
            if inner.opcode == "scatter":
                return scatter(inner, ctx)
    inner = ctx.computation(body)
    if ctx.roofline:
        marker = attrs.async_marker(instr)
        if marker in ASYNC_MARKERS:  # a TPU async collective split into start/done fusions
            return _async_collective_half(instr, inner, marker, ctx)
        inner = _without_continued(body, inner, ctx)
    written = _output_bytes(instr, body, ctx)
    constants = sum(
        ctx.size(i.shape)
        for i in body.instructions
        if i.opcode == "constant" and i.shape.elements > IMMEDIATE_CONSTANT_MAX_ELEMENTS
    )
    read = 0.0
    for param in body.parameters:
        if param.shape.is_tuple:
            leaf_reads = (
                _parameter_read_bytes(_tuple_leaf(param, index), ctx)
                for index in _leaf_indices(param.shape)
            )
            read += sum(leaf_reads)
        else:
            param_bytes = _parameter_read_bytes(param, ctx)
            if ctx.roofline:  # a parameter is read at most once, however many users re-read it
                param_bytes = min(param_bytes, ctx.size(param.shape))
            read += param_bytes
    return Cost(
        flops=inner.flops,
        transcendentals=inner.transcendentals,
        bytes_accessed=written + constants + read,
        comm_bytes=inner.comm_bytes,
        unknown=inner.unknown,
        notes=inner.notes,
    )


ASYNC_MARKERS = attrs.ASYNC_COLLECTIVE_MARKERS


def _without_continued(body: Computation, inner: Cost, ctx: CostContext) -> Cost:
    """A fusion's inner cost less the collectives it only continues (priced at their start)."""
    channels = ctx.in_flight_channels()
    if not channels:
        return inner
    continued = [
        ctx.cost(i)
        for i in body.instructions
        if i.opcode != "parameter" and i.attrs.get("channel_id") in channels
    ]
    if not continued:
        return inner
    return inner.replace(
        flops=inner.flops - sum(c.flops for c in continued),
        comm_bytes=inner.comm_bytes - sum(c.comm_bytes for c in continued),
    )


def _async_collective_half(instr: Instruction, inner: Cost, marker: str, ctx: CostContext) -> Cost:
    """Count the pair once, at the start: its operands read and the collective's result written."""
    if marker == "AsyncCollectiveDone":
        return Cost()
    result = instr.shape.tuple_shapes[1] if instr.shape.is_tuple else instr.shape
    return inner.replace(bytes_accessed=ctx.read_and_written(instr, result))


def _output_bytes(instr: Instruction, body: Computation, ctx: CostContext) -> float:
    """Result leaves, except that an in-place dynamic-update-slice root writes only its update."""
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
    """XLA's FusionParameterReadBytes: what reading a fused parameter costs, by its users."""
    size = 0.0
    seen_plain_user = False
    own_size = ctx.size(param.shape)
    for user in ctx.users(param.computation).get(id(param), ()):
        opcode = user.opcode
        if opcode == "fusion":
            size += _nested_fusion_read_bytes(param, user, ctx)
        elif opcode == "slice" or (opcode == "dynamic-slice" and user.operands[0] is param):
            size += ctx.size(user.shape)
        elif opcode == "dynamic-update-slice" and user.operands[0] is param:
            pass  # aliased with the output
        elif opcode in ("broadcast", "reshape"):
            size += own_size
        elif not seen_plain_user:
            seen_plain_user = True
            size += own_size
    return size


def _nested_fusion_read_bytes(param: Instruction, nested: Instruction, ctx: CostContext) -> float:
    """What reading ``param`` through a nested fusion costs.

    The roofline model follows the parameter into the nested fusion. XLA looks instead at the
    nested fusion's own users (so a nested fusion that is the root reads nothing) and follows the
    parameter in only for the first user that is not a slice of a "simple" nested fusion.
    """
    params = nested.called[0].parameters
    slots = [i for i, op in enumerate(nested.operands) if op is param]
    if ctx.roofline:
        return sum(_parameter_read_bytes(params[i], ctx) for i in slots)
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


def _leaf_indices(shape, prefix=()):
    if not shape.is_tuple:
        yield prefix
        return
    for i, element in enumerate(shape.tuple_shapes):
        yield from _leaf_indices(element, (*prefix, i))


def _tuple_leaf(param: Instruction, index: tuple[int, ...]) -> Instruction:
    """Follow get-tuple-element users down to the leaf at ``index`` (or stop where there is none)."""
    node = param
    for i in index:
        for user in param.computation.instructions:
            if (
                user.opcode == "get-tuple-element"
                and user.operands
                and user.operands[0] is node
                and user.attrs.get("index") == str(i)
            ):
                node = user
                break
    return node
