"""Collectives: XLA's memory accounting, plus the bytes each device sends over its links.

``comm_bytes`` follows the ring algorithms of "How to Scale Your Model": with N devices in a group
and B bytes per device, an all-gather sends B_out·(N−1)/N, a reduce-scatter B_in·(N−1)/N, an
all-reduce twice that, an all-to-all B_in·(N−1)/N, a permute its whole buffer. XLA's own analysis
has no communication term, prices an all-reduce as if N = 2 and a reduce-scatter at 0 FLOPs; the
roofline model charges (N−1)/N additions per reduced element instead.
"""

from __future__ import annotations

from hlo_roofline.cost.base import Cost, CostContext, rule
from hlo_roofline.hlo import attrs
from hlo_roofline.hlo.ir import Instruction, Shape


def group_size(instr: Instruction, ctx: CostContext) -> int:
    return attrs.replica_group_size(instr, ctx.module)


def _result(instr: Instruction) -> Shape:
    """The gathered/permuted result of a native start op, whose shape is (operands, result, ...)."""
    shape = instr.shape
    if instr.opcode.endswith("-start") and shape.is_tuple and len(shape.tuple_shapes) > 1:
        return shape.tuple_shapes[1]
    return shape


def _bytes(instr: Instruction, ctx: CostContext) -> float:
    """XLA's default bytes; the roofline model does not re-count a start's copy of its operands."""
    if ctx.roofline:
        return ctx.read_and_written(instr, _result(instr))
    return ctx.default_bytes(instr)


def _ring(n: int) -> float:
    return (n - 1) / n if n > 1 else 0.0


@rule("all-reduce", "all-reduce-start")
def all_reduce(instr: Instruction, ctx: CostContext) -> Cost:
    elements = sum(leaf.elements for leaf in instr.shape.leaves())
    read = ctx.operand_bytes(instr)
    written = ctx.output_bytes(instr.shape)
    if not ctx.roofline:  # XLA: "assume 2 replicas", one addition per output element
        return Cost(flops=elements, bytes_accessed=read + written)
    share = _ring(group_size(instr, ctx))
    return Cost(flops=elements * share, bytes_accessed=read + written, comm_bytes=2 * read * share)


@rule("all-gather", "all-gather-start")
def all_gather(instr: Instruction, ctx: CostContext) -> Cost:
    if not ctx.roofline:
        return Cost(bytes_accessed=ctx.default_bytes(instr))
    gathered = ctx.output_bytes(_result(instr))
    return Cost(
        bytes_accessed=_bytes(instr, ctx), comm_bytes=gathered * _ring(group_size(instr, ctx))
    )


@rule("reduce-scatter")
def reduce_scatter(instr: Instruction, ctx: CostContext) -> Cost:
    if not ctx.roofline:
        return Cost(bytes_accessed=ctx.default_bytes(instr))
    n = group_size(instr, ctx)
    out_elements = sum(leaf.elements for leaf in instr.shape.leaves())
    return Cost(
        flops=(n - 1) * out_elements,
        bytes_accessed=_bytes(instr, ctx),
        comm_bytes=ctx.operand_bytes(instr) * _ring(n),
    )


@rule("all-to-all", "ragged-all-to-all")
def all_to_all(instr: Instruction, ctx: CostContext) -> Cost:
    if not ctx.roofline:
        return Cost(bytes_accessed=ctx.default_bytes(instr))
    sent = ctx.size(instr.operands[0].shape) if instr.opcode == "ragged-all-to-all" else None
    if sent is None:
        sent = ctx.operand_bytes(instr)
    cost = Cost(bytes_accessed=_bytes(instr, ctx), comm_bytes=sent * _ring(group_size(instr, ctx)))
    if instr.opcode == "ragged-all-to-all":
        return cost.with_note("ragged all-to-all: assumes the whole input buffer is sent")
    return cost


@rule("collective-permute", "collective-permute-start", "collective-broadcast", "send")
def point_to_point(instr: Instruction, ctx: CostContext) -> Cost:
    if not ctx.roofline:
        return Cost(bytes_accessed=ctx.default_bytes(instr))
    data = instr.operands[0].shape if instr.operands else instr.shape
    sends = instr.opcode != "collective-permute" or attrs.ints(instr, "source_target_pairs")
    if instr.opcode == "send":
        return Cost(bytes_accessed=ctx.size(data), comm_bytes=ctx.size(data))
    return Cost(bytes_accessed=_bytes(instr, ctx), comm_bytes=ctx.size(data) if sends else 0.0)


@rule("recv")
def recv(instr: Instruction, ctx: CostContext) -> Cost:
    if not ctx.roofline:
        return Cost(bytes_accessed=ctx.default_bytes(instr))
    data = instr.shape.tuple_shapes[0] if instr.shape.is_tuple else instr.shape
    return Cost(bytes_accessed=ctx.output_bytes(data))


COLLECTIVES = (
    "all-reduce", "all-gather", "reduce-scatter", "all-to-all", "ragged-all-to-all",
    "collective-permute", "collective-broadcast", "send", "recv",
)  # fmt: skip


def find_collective(instr: Instruction, memo: dict | None = None) -> Instruction | None:
    """The collective an op performs: itself, the op an async start wraps, or one fused inside.

    ``memo`` (id of a called computation -> what it holds) lets callers share the walk: bodies
    reached along many paths (nested fusions calling one computation) are searched once."""
    if instr.opcode.removesuffix("-start") in COLLECTIVES:
        return instr
    if instr.opcode not in ("fusion", "async-start") or not instr.called:
        return None
    memo = {} if memo is None else memo
    body = instr.called[0]
    if id(body) not in memo:
        memo[id(body)] = next(
            (c for i in body.instructions if (c := find_collective(i, memo)) is not None), None
        )
    return memo[id(body)]
