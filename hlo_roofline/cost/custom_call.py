"""Custom calls: XLA prices every one at −1 ("unknown"); the roofline model prices the library
calls whose work follows from their shapes (cuBLAS gemms, cuDNN convolutions), takes a kernel's own
cost estimate when it carries one (Pallas ``cost_estimate``), and flags the rest as opaque."""

from __future__ import annotations

from hlo_roofline.cost.base import ZERO, Cost, CostContext, rule
from hlo_roofline.cost.linalg import conv_flops, conv_geometry, dot_flops, dot_geometry
from hlo_roofline.hlo import attrs
from hlo_roofline.hlo.ir import Instruction, Shape

GEMM_TARGETS = ("__cublas$gemm", "__cublas$lt$matmul", "__cublas$lt$matmul$f8")
CONV_TARGETS = (
    "__cudnn$convForward", "__cudnn$convBiasActivationForward", "__cudnn$convBackwardInput",
    "__cudnn$convBackwardFilter", "__cudnn$convForwardGraph",
)  # fmt: skip
# Targets that only reserve memory, annotate, view or synchronize: no work of their own.
NO_WORK_TARGETS = (
    "AllocateBuffer", "PrepareAsyncCallStart", "PrepareAsyncCallDone", "Sharding",
    "SPMDFullToShardShape", "SPMDShardToFullShape", "MoveToHost", "MoveToDevice",
    "annotate_device_placement", "LayoutConstraint", "InspectSharding",
    "AsyncCollectiveStart", "AsyncCollectiveDone", "ConcatBitcast", "AssumeGatherIndicesInBound",
)  # fmt: skip
# Library selections whose work is reading the input once and writing the result (comparisons
# are not counted as FLOPs, as for XLA's own topk opcode).
SELECTION_TARGETS = ("TopK", "__gpu$TopK", "GatherScatterIndicesBitpacked")


def target(instr: Instruction) -> str:
    return instr.attrs.get("custom_call_target", "").strip('"')


def _main_result(instr: Instruction) -> Shape:
    """A library call returns (result, workspace): the workspace is scratch, not output."""
    shape = instr.shape
    return shape.tuple_shapes[0] if shape.is_tuple and shape.tuple_shapes else shape


def _boundary_bytes(instr: Instruction, ctx: CostContext, result: Shape) -> float:
    return ctx.operand_bytes(instr) + ctx.output_bytes(result)


def _gemm_dims(instr: Instruction) -> attrs.DotDims:
    config = attrs.backend_config(instr).get("gemm_backend_config", {})
    numbers = config.get("dot_dimension_numbers", {})

    def dims(key: str) -> tuple[int, ...]:
        return tuple(int(d) for d in numbers.get(key, []))

    return attrs.DotDims(
        dims("lhs_batch_dimensions"),
        dims("lhs_contracting_dimensions"),
        dims("rhs_batch_dimensions"),
        dims("rhs_contracting_dimensions"),
    )


def _cudnn_operands(instr: Instruction) -> tuple[Shape, Shape, Shape]:
    """(input, filter, output) of a cuDNN convolution, whatever direction it runs in."""
    result = _main_result(instr)
    a, b = instr.operands[0].shape, instr.operands[1].shape
    kind = target(instr)
    if kind == "__cudnn$convBackwardInput":  # (d_output, filter) -> d_input
        return result, b, a
    if kind == "__cudnn$convBackwardFilter":  # (input, d_output) -> d_filter
        return a, result, b
    return a, b, result


def geometry(instr: Instruction) -> tuple[int, int, int, int] | None:
    """(batch, M, N, K) of a library gemm or convolution call."""
    name = target(instr)
    if name in GEMM_TARGETS:
        return dot_geometry(instr.operands[0].shape, instr.operands[1].shape, _gemm_dims(instr))
    if name in CONV_TARGETS:
        return conv_geometry(instr, *_cudnn_operands(instr))
    return None


def _gemm(instr: Instruction, ctx: CostContext) -> Cost:
    result = _main_result(instr)
    flops = dot_flops(instr.operands[0].shape, result, _gemm_dims(instr).lhs_contracting)
    return Cost(flops=flops, bytes_accessed=_boundary_bytes(instr, ctx, result))


def _cudnn_conv(instr: Instruction, ctx: CostContext) -> Cost:
    """cuDNN's operands follow the convolution kind; dim_labels describe (input, filter, output)."""
    lhs, rhs, out = _cudnn_operands(instr)
    boundary = _boundary_bytes(instr, ctx, _main_result(instr))
    return Cost(flops=conv_flops(instr, lhs, rhs, out), bytes_accessed=boundary)


def _declared_estimate(instr: Instruction) -> dict | None:
    """A cost a kernel author attached: Pallas TPU ``cost_estimate`` or GPU ``cost_estimate_json``."""
    config = attrs.backend_config(instr)
    for holder in (config.get("custom_call_config", {}), config):
        estimate = holder.get("cost_estimate") or holder.get("cost_estimate_json")
        if isinstance(estimate, dict) and "flops" in estimate:
            return estimate
    return None


@rule("custom-call")
def custom_call(instr: Instruction, ctx: CostContext) -> Cost:
    name = target(instr)
    if not ctx.roofline:
        return Cost(unknown=True, notes=(f"custom call '{name}': XLA reports -1 (unknown)",))
    if name in NO_WORK_TARGETS:
        return ZERO
    if name in SELECTION_TARGETS:
        return Cost(bytes_accessed=_boundary_bytes(instr, ctx, instr.shape))
    if name in GEMM_TARGETS:
        return _gemm(instr, ctx)
    if name in CONV_TARGETS:
        return _cudnn_conv(instr, ctx)
    estimate = _declared_estimate(instr)
    if estimate is not None:
        return Cost(
            flops=float(estimate.get("flops", 0)),
            transcendentals=float(estimate.get("transcendentals", 0)),
            bytes_accessed=float(estimate.get("bytes_accessed", 0)),
            notes=(f"custom call '{name}': kernel's declared cost estimate",),
        )
    return Cost(
        bytes_accessed=_boundary_bytes(instr, ctx, instr.shape),
        unknown=True,
        notes=(f"opaque custom call '{name}': FLOPs unknown, bytes are its operands and results",),
    )
