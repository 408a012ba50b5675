"""Custom calls: XLA prices every one at −1 ("unknown"); the roofline model prices the library
calls whose work follows from their shapes (cuBLAS gemms, cuDNN convolutions), takes a kernel's own
cost estimate when it carries one (Pallas ``cost_estimate``), prices the attention kernels JAX
ships and cuDNN's fused flash attention (``__cudnn$fmha*``) from their shapes
(:mod:`hlo_roofline.cost.attention_kernels`), grouped matmuls (megablox ``gmm``/``tgmm``, XLA:TPU's
``ragged-dot`` kernels) from theirs on the matrix unit (:mod:`hlo_roofline.cost.grouped_matmuls`)
and flags the rest as opaque."""

from __future__ import annotations

import re

from hlo_roofline.cost.attention_kernels import attention_cost
from hlo_roofline.cost.base import ZERO, Cost, CostContext, rule
from hlo_roofline.cost.custom_targets import TARGET_RULES
from hlo_roofline.cost.grouped_matmuls import grouped_matmul_cost
from hlo_roofline.cost.linalg import (
    Extent,
    conv_flops,
    conv_geometry,
    dot_flops,
    dot_geometry,
    fusion_operand,
)
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


def _by_direction(instr: Instruction, a, b, result):
    """(input, filter, output) of a cuDNN convolution from (operand 0, operand 1, result).

    The window and dim_labels of every direction describe the forward convolution (XLA's
    ``CudnnConvKind``: "given any two of input, filter and output, compute the third"):
    backward-input takes (d_output, filter) and returns d_input, backward-filter takes
    (input, d_output) and returns d_filter."""
    kind = target(instr)
    if kind == "__cudnn$convBackwardInput":
        return result, b, a
    if kind == "__cudnn$convBackwardFilter":
        return a, result, b
    return a, b, result


def _cudnn_operands(instr: Instruction) -> tuple[Shape, Shape, Shape]:
    """(input, filter, output) shapes of a cuDNN convolution, whatever direction it runs in."""
    return _by_direction(
        instr, instr.operands[0].shape, instr.operands[1].shape, _main_result(instr)
    )


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
    return Cost(flops=flops, bytes_accessed=ctx.read_and_written(instr, result))


def _cudnn_conv(instr: Instruction, ctx: CostContext) -> Cost:
    """The FLOPs XLA counts for the native convolution the call was rewritten from.

    cuDNN takes symmetric padding only, so XLA's GPU compiler (GpuConvPaddingLegalization) moves
    the rest into explicit zero ``pad`` ops on the operands and a ``slice`` of the result; the
    backward passes get their lhs dilation (backward-input) or rhs dilation (backward-filter) the
    same way when they run as forward calls. Those zeros and sliced-off results are no work in
    XLA's count of the native convolution (and the CPU compiler folds the pads back into the
    window), so only the data extents of the three arrays are counted."""
    lhs, rhs, out = _cudnn_operands(instr)
    extents = _by_direction(
        instr,
        _data_extents(instr.operands[0]),
        _data_extents(instr.operands[1]),
        _result_extents(instr, ctx),
    )
    boundary = ctx.read_and_written(instr, _main_result(instr))
    return Cost(flops=conv_flops(instr, lhs, rhs, out, extents), bytes_accessed=boundary)


# Ops that pass their operand's elements through in place: its zero padding stays padding.
_SAME_ELEMENTS = ("copy", "convert", "bitcast", "reshape")
_MAX_TRACE = 64  # producer or consumer hops followed before giving up (whole arrays count)


def _full(shape: Shape) -> tuple[Extent, ...]:
    return tuple(Extent(0, 1, n) for n in shape.dims)


def _int_groups(text: str, separator: str) -> list[list[int]]:
    """``padding=0_0x2_3x0_0_1`` (separator ``x``) or ``slice={[0:64], [0:8:2]}`` (``,``): the
    integers of each dimension."""
    return [[int(v) for v in re.findall(r"-?\d+", group)] for group in text.split(separator)]


def _fusion_operand(param: Instruction, calls: tuple[Instruction, ...]) -> Instruction | None:
    """What the innermost fusion entered passes in as ``param`` (None: not a fusion parameter)."""
    if not calls or not param.computation.is_fusion:
        return None
    return fusion_operand(param, calls[-1])


def _is_zero(instr: Instruction, calls: tuple[Instruction, ...]) -> bool:
    """A scalar zero constant, also one passed into a fusion as a parameter."""
    for _ in range(_MAX_TRACE):
        if (outer := _fusion_operand(instr, calls)) is not None:
            instr, calls = outer, calls[:-1]
        elif instr.opcode in _SAME_ELEMENTS and instr.operands:
            instr = instr.operands[0]
        else:
            break
    if instr.opcode != "constant":
        return False
    try:
        return float(instr.payload.strip("{} ")) == 0
    except ValueError:
        return False


def _padded(extents: tuple[Extent, ...], pad: Instruction) -> tuple[Extent, ...] | None:
    """The data extents after a zero ``pad`` (edge padding moves them, interior spreads them)."""
    config = _int_groups(pad.attrs.get("padding", ""), "x")
    if len(config) != len(extents) or len(pad.shape.dims) != len(extents):
        return None
    out = []
    for e, size, (low, _high, *interior) in zip(extents, pad.shape.dims, config, strict=True):
        spread = (interior[0] if interior else 0) + 1
        step, first = e.step * spread, low + e.start * spread
        lo = max(0, -(first // step))  # negative padding crops the data
        hi = min(e.count - 1, (size - 1 - first) // step)
        out.append(Extent(first + lo * step, step, hi - lo + 1) if hi >= lo else Extent(0, 1, 0))
    return tuple(out)


def _data_extents(value: Instruction) -> tuple[Extent, ...]:
    """Where the data of an operand lies: followed back through zero pads (also inside fusions
    and multi-output fusions), transposes, reverses and element-preserving ops."""
    calls: tuple[Instruction, ...] = ()  # the fusions entered, to leave them by their parameters
    steps: list[Instruction] = []  # the pads, transposes and reverses met, outermost first
    node, index = value, None  # index: the tuple element wanted from ``node``
    for _ in range(_MAX_TRACE):
        if node.opcode == "fusion" and node.called and node.called[0].root is not None:
            calls, node = (*calls, node), node.called[0].root
        elif index is not None:  # the element of a (multi-output fusion's) tuple
            if node.opcode != "tuple" or index >= len(node.operands):
                break
            node, index = node.operands[index], None
        elif node.opcode == "get-tuple-element" and node.operands:
            node, index = node.operands[0], attrs.int_attr(node, "index", 0)
        elif (outer := _fusion_operand(node, calls)) is not None:
            node, calls = outer, calls[:-1]
        elif node.opcode == "pad" and len(node.operands) == 2 and _is_zero(node.operands[1], calls):
            steps.append(node)
            node = node.operands[0]
        elif node.opcode in ("transpose", "reverse") or (
            node.opcode in _SAME_ELEMENTS and node.shape.is_array and _same_dims(node)
        ):
            if node.opcode in ("transpose", "reverse"):
                steps.append(node)
            node = node.operands[0]
        else:
            break
    if not any(op.opcode == "pad" for op in steps):
        return _full(value.shape)
    try:
        extents = _through(steps, _full(steps[-1].operands[0].shape))
    except (IndexError, ValueError, ZeroDivisionError):  # attributes that do not fit the shapes
        extents = None
    if extents is None or len(extents) != len(value.shape.dims):
        return _full(value.shape)
    return extents


def _through(steps: list[Instruction], extents: tuple[Extent, ...] | None):
    """The data extents carried from the source through ``steps`` (outermost first) to the top."""
    for op in reversed(steps):
        if extents is None or len(extents) != len(op.shape.dims):
            return None
        if op.opcode == "pad":
            extents = _padded(extents, op)
        elif op.opcode == "transpose":
            extents = tuple(extents[d] for d in attrs.ints(op, "dimensions"))
        else:  # reverse
            flipped = set(attrs.ints(op, "dimensions"))
            extents = tuple(
                Extent(size - e.start - (e.count - 1) * e.step - 1, e.step, e.count)
                if d in flipped and e.count
                else e
                for d, (e, size) in enumerate(zip(extents, op.shape.dims, strict=True))
            )
    return extents


def _same_dims(instr: Instruction) -> bool:
    return bool(instr.operands) and instr.operands[0].shape.dims == instr.shape.dims


def _hull(regions: list[tuple[Extent, ...]]) -> tuple[Extent, ...]:
    """The smallest extents holding every region (one region: itself)."""
    if all(r == regions[0] for r in regions):
        return regions[0]
    out = []
    for per_dim in zip(*regions, strict=True):
        real = [e for e in per_dim if e.count]
        start = min((e.start for e in real), default=0)
        end = max((e.start + (e.count - 1) * e.step for e in real), default=-1)
        out.append(Extent(start, 1, end - start + 1))
    return tuple(out)


def _read_region(value: Instruction, ctx: CostContext, depth: int = 0) -> tuple[Extent, ...]:
    """The part of ``value`` its users read: the slices they take (also inside fusions).
    Memoized: fusions that share a body would otherwise be followed once per path into it."""
    key = ("read_region", id(value), depth)
    cached = ctx.memo.get(key)
    if cached is None:
        cached = ctx.memo[key] = _read_region_uncached(value, ctx, depth)
    return cached


def _read_region_uncached(value: Instruction, ctx: CostContext, depth: int) -> tuple[Extent, ...]:
    whole = _full(value.shape)
    users = ctx.users(value.computation).get(id(value), [])
    if value.is_root or not users or depth > _MAX_TRACE:
        return whole
    regions = []
    for user in users:
        if user.opcode == "slice":
            spec = _int_groups(user.attrs.get("slice", ""), ",")
            if len(spec) != len(whole) or any(len(s) not in (2, 3) for s in spec):
                return whole
            regions.append(
                tuple(
                    Extent(s[0], max(s[2], 1) if len(s) == 3 else 1, n)
                    for s, n in zip(spec, user.shape.dims, strict=True)
                )
            )
        elif user.opcode == "fusion" and user.called:
            params = user.called[0].parameters
            for k, operand in enumerate(user.operands):
                if operand is value and k < len(params):
                    regions.append(_read_region(params[k], ctx, depth + 1))
        elif user.opcode in _SAME_ELEMENTS and user.shape.is_array and _same_dims(user):
            regions.append(_read_region(user, ctx, depth + 1))
        else:
            return whole
        if regions and regions[-1] == whole:
            return whole
    return _hull(regions) if regions else whole


def _result_extents(instr: Instruction, ctx: CostContext) -> tuple[Extent, ...]:
    """The data extents of a library call's result: what its users read of tuple element 0."""
    result = _main_result(instr)
    if not instr.shape.is_tuple:
        return _read_region(instr, ctx)
    if instr.is_root:
        return _full(result)
    regions = []
    for user in ctx.users(instr.computation).get(id(instr), []):
        if user.opcode != "get-tuple-element":
            return _full(result)
        if attrs.int_attr(user, "index", 0) == 0:
            regions.append(_read_region(user, ctx))
    return _hull(regions) if regions else _full(result)


def _declared_estimate(instr: Instruction) -> dict | None:
    """A cost a kernel author attached: Pallas TPU ``cost_estimate`` or GPU ``cost_estimate_json``."""
    config = attrs.backend_config(instr)
    for holder in (config.get("custom_call_config", {}), config):
        estimate = holder.get("cost_estimate") or holder.get("cost_estimate_json")
        if isinstance(estimate, dict) and "flops" in estimate:
            return estimate
    return None


SPARSECORE = "sparsecore"  # XLA:TPU's execution thread for the SparseCore


def on_sparsecore(instr: Instruction) -> bool:
    """The op runs its program on XLA:TPU's SparseCore (an async offload, or inside one)."""
    thread = instr.attrs.get("async_execution_thread", "").strip('"')
    return SPARSECORE in (instr.computation.execution_thread, thread)


@rule("custom-call")
def xla_custom_call(instr: Instruction, ctx: CostContext) -> Cost:
    """XLA reports −1 for every custom call: unknown here (0, flagged), not −1."""
    return Cost(unknown=True, notes=(f"custom call '{target(instr)}': XLA reports -1 (unknown)",))


@rule("custom-call", model="roofline")
def custom_call(instr: Instruction, ctx: CostContext) -> Cost:
    """Library calls priced from their shapes (cuBLAS gemms, cuDNN convolutions and fused
    attention, JAX's attention kernels, grouped matmuls on the matrix unit), a kernel's declared
    cost estimate used, the rest opaque (flagged unknown)."""
    name = target(instr)
    if name in TARGET_RULES:  # priced by its target name (cost/custom_targets.py)
        return TARGET_RULES[name](instr, ctx)
    if name in NO_WORK_TARGETS:
        return ZERO
    if name in SELECTION_TARGETS:
        return Cost(bytes_accessed=ctx.read_and_written(instr, instr.shape))
    if name in GEMM_TARGETS:
        return _gemm(instr, ctx)
    if name in CONV_TARGETS:
        return _cudnn_conv(instr, ctx)
    grouped = grouped_matmul_cost(instr, name, ctx)  # its estimate does not say: matrix unit
    if grouped is not None:
        return grouped
    estimate = _declared_estimate(instr)
    known = attention_cost(instr, name, ctx)  # a JAX attention kernel, from its shapes
    if estimate is not None:
        declared = Cost(
            flops=float(estimate.get("flops", 0)),
            transcendentals=float(estimate.get("transcendentals", 0)),
            bytes_accessed=float(estimate.get("bytes_accessed", 0)),
            notes=(f"custom call '{name}': kernel's declared cost estimate",),
        )
        if known is not None:  # an attention kernel's products are matrix-unit work
            mxu = min(known.mxu_flops, declared.flops)
            return declared.replace(mxu_flops=mxu, upper_bound=known.upper_bound)
        return declared
    if known is not None:
        return known
    if instr.called and on_sparsecore(instr):
        # XLA:TPU's SparseCore offload (an embedding gather or scatter): the call names the
        # program it runs, priced as that program (a dump prints it this way inside an
        # async-start; ``as_text()`` as a custom-call-start, see control_flow.async_start).
        return ctx.computation(instr.called[0])
    return Cost(
        bytes_accessed=ctx.read_and_written(instr, instr.shape),
        unknown=True,
        notes=(f"opaque custom call '{name}': FLOPs unknown, bytes are its operands and results",),
    )
