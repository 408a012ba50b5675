"""Dots, convolutions and other dense linear algebra: 2 FLOPs per multiply-add."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from hlo_roofline.cost.base import Cost, CostContext, rule
from hlo_roofline.hlo import attrs
from hlo_roofline.hlo.ir import Instruction, Shape

FMA_FLOPS = 2


def dot_flops(lhs: Shape, out: Shape, lhs_contracting: tuple[int, ...]) -> int:
    """2 · (output elements) · (contracted size) = 2·batch·M·N·K."""
    return FMA_FLOPS * out.elements * math.prod(lhs.dims[d] for d in lhs_contracting)


@rule("dot", "scaled-dot", "ragged-dot")
def dot(instr: Instruction, ctx: CostContext) -> Cost:
    lhs = instr.operands[0].shape
    flops = dot_flops(lhs, instr.shape, attrs.dot_dims(instr).lhs_contracting)
    return Cost(flops=flops, bytes_accessed=ctx.default_bytes(instr))


@dataclass(frozen=True, slots=True)
class Extent:
    """The elements of one dimension that hold data: ``start + i·step`` for ``i < count``. The rest
    is zero padding (or interior-padding holes) that a library call is handed, or results it
    computes only to have them sliced off. By default a whole dimension is data."""

    start: int
    step: int
    count: int


def _full(shape: Shape) -> tuple[Extent, ...]:
    return tuple(Extent(0, 1, n) for n in shape.dims)


def _valid_positions(w: attrs.WindowDim, kernel: Extent, output: Extent, input_: Extent) -> int:
    """(kernel tap, output position) pairs that land on a real input element: not on the padding,
    not on a base (lhs) dilation hole; only the real taps and outputs take part.

    Per tap, the outputs o = output.start + m·output.step read the dilated base at
    o·stride + tap·window_dilation − pad_low; the real input elements sit there at
    first + j·step, j < input_.count. The m that hit are a range ∩ a residue class."""
    if input_.count <= 0 or output.count <= 0:
        return 0
    first = input_.start * w.base_dilation
    step = max(input_.step * w.base_dilation, 1)
    last = first + (input_.count - 1) * step
    stride = output.step * w.stride  # how far the base position moves per real output
    g = math.gcd(stride, step)
    period = step // g
    inverse = pow(stride // g, -1, period) if period > 1 else 0
    count = 0
    for t in range(kernel.count):
        tap = kernel.start + t * kernel.step
        base = output.start * w.stride + tap * w.window_dilation - w.pad_low
        lo = max(0, -((base - first) // stride))  # ceil((first - base) / stride)
        hi = min(output.count - 1, (last - base) // stride)
        residue = (first - base) % step
        if hi < lo or residue % g:
            continue
        m0 = (residue // g) * inverse % period if period > 1 else 0
        m = lo + (m0 - lo) % period
        if m <= hi:
            count += (hi - m) // period + 1
    return count


def conv_flops(
    instr: Instruction,
    lhs: Shape,
    rhs: Shape,
    out: Shape,
    extents: tuple[Sequence[Extent], Sequence[Extent], Sequence[Extent]] | None = None,
) -> int:
    """XLA's convolution count: multiply-adds over valid (tap, output) pairs, grouped features.

    ``extents`` (per dimension of lhs, rhs and out) narrows the count to the elements that hold
    data, for a library call handed explicitly padded operands (see ``custom_call.py``)."""
    dims = attrs.conv_dims(instr)
    window = attrs.window(instr)
    lx, rx, ox = extents or (_full(lhs), _full(rhs), _full(out))
    positions = 1
    for i, w in enumerate(window):
        kernel = rx[dims.kernel_spatial[i]]
        output = ox[dims.output_spatial[i]]
        input_ = lx[dims.input_spatial[i]]
        positions *= _valid_positions(w, kernel, output, input_)
    feature_groups = attrs.int_attr(instr, "feature_group_count", 1)
    batch_groups = attrs.int_attr(instr, "batch_group_count", 1)
    input_features = lx[dims.input_feature].count // feature_groups
    output_features = ox[dims.output_feature].count
    batch = lx[dims.input_batch].count // batch_groups
    if extents is not None:  # a padded feature or batch is no more work than the data's
        input_features = min(input_features, rx[dims.kernel_input_feature].count)
        output_features = min(output_features, rx[dims.kernel_output_feature].count)
        batch = min(batch, ox[dims.output_batch].count)
    return FMA_FLOPS * input_features * output_features * batch * positions


@rule("convolution")
def convolution(instr: Instruction, ctx: CostContext) -> Cost:
    flops = conv_flops(instr, instr.operands[0].shape, instr.operands[1].shape, instr.shape)
    return Cost(flops=flops, bytes_accessed=ctx.default_bytes(instr))


@rule("fft")
def fft(instr: Instruction, ctx: CostContext) -> Cost:
    """8 · Π floor(log2 length) · elements (4 multiply-adds per complex multiply)."""
    operand = instr.operands[0].shape
    if operand.is_tuple:
        operand = operand.tuple_shapes[0]
    log_factors = math.prod(max(n, 1).bit_length() - 1 for n in attrs.ints(instr, "fft_length"))
    flops = FMA_FLOPS * 4 * log_factors * operand.elements
    return Cost(flops=flops, bytes_accessed=ctx.default_bytes(instr))


@rule("triangular-solve")
def triangular_solve(instr: Instruction, ctx: CostContext) -> Cost:
    """Half of the triangular matrix is read; 2 · n · elements(b) FLOPs."""
    a, b = instr.operands[0].shape, instr.operands[1].shape
    flops = FMA_FLOPS * a.dims[-1] * b.elements
    size = ctx.size(instr.shape) + ctx.size(a) / 2 + ctx.size(b)
    return Cost(flops=flops, bytes_accessed=size)


@rule("cholesky")
def cholesky(instr: Instruction, ctx: CostContext) -> Cost:
    """n³/3 per matrix; half of the input read and half of the output written."""
    a = instr.operands[0].shape
    return Cost(flops=a.dims[-1] * a.elements // 3, bytes_accessed=ctx.size(a))


@rule("sort")
def sort(instr: Instruction, ctx: CostContext) -> Cost:
    """A comparison sort: n · ceil(log2 n) FLOPs over the first operand."""
    n = instr.operands[0].shape.elements
    return Cost(
        flops=n * (n - 1).bit_length() if n > 1 else 0, bytes_accessed=ctx.default_bytes(instr)
    )


def dot_geometry(lhs: Shape, rhs: Shape, numbers: attrs.DotDims) -> tuple[int, int, int, int]:
    """(batch, M, N, K) of a dot: M and N are the free sizes of lhs and rhs."""
    batch = math.prod(lhs.dims[d] for d in numbers.lhs_batch)
    k = math.prod(lhs.dims[d] for d in numbers.lhs_contracting)
    m = lhs.elements // max(batch * k, 1)
    rhs_batch = math.prod(rhs.dims[d] for d in numbers.rhs_batch)
    n = rhs.elements // max(rhs_batch * k, 1)
    return batch, m, n, k


def conv_geometry(
    instr: Instruction, lhs: Shape, rhs: Shape, out: Shape
) -> tuple[int, int, int, int]:
    """A convolution as a matmul (batch, M, N, K), with 2·batch·M·N·K its FLOPs.

    M = images × output positions, N = output features per group, K = input features per group ×
    the real kernel taps each output sees (padding taps left out). Feature groups are a batch of
    matmuls (depthwise: N = 1). A spatial dim where every output meets exactly one of W > 1
    distinct taps on its own input element is a batch dim: XLA:TPU lowers a batched dot
    (attention's ``btnh,bsnh->bnts``) that way, with ``lhs_dilate`` = window size."""
    dims = attrs.conv_dims(instr)
    groups = attrs.int_attr(instr, "feature_group_count", 1)
    batch_groups = attrs.int_attr(instr, "batch_group_count", 1)
    batch, positions, taps = groups * batch_groups, 1, 1
    for i, w in enumerate(attrs.window(instr)):
        kernel = rhs.dims[dims.kernel_spatial[i]]
        outputs = out.dims[dims.output_spatial[i]]
        inputs = lhs.dims[dims.input_spatial[i]]
        pairs = _valid_positions(
            w, Extent(0, 1, kernel), Extent(0, 1, outputs), Extent(0, 1, inputs)
        )
        if kernel > 1 and pairs == outputs == inputs == kernel:  # a batch dim in disguise
            batch *= outputs
        else:
            positions *= outputs
            taps *= pairs
    m = out.dims[dims.output_batch] // batch_groups * positions
    k = (lhs.dims[dims.input_feature] // groups) * max(round(taps / max(positions, 1)), 1)
    return batch, m, out.dims[dims.output_feature] // (groups * batch_groups), k


def matmul_geometry(instr: Instruction) -> tuple[int, int, int, int] | None:
    """(batch, M, N, K) of a dot or convolution, or of the largest one inside a fusion."""
    if instr.opcode in ("dot", "scaled-dot", "ragged-dot"):
        return dot_geometry(instr.operands[0].shape, instr.operands[1].shape, attrs.dot_dims(instr))
    if instr.opcode == "convolution":
        lhs, rhs = instr.operands[0].shape, instr.operands[1].shape
        return conv_geometry(instr, lhs, rhs, instr.shape)
    if instr.opcode == "fusion" and instr.called:
        found = [g for i in instr.called[0].instructions if (g := matmul_geometry(i)) is not None]
        return max(found, key=math.prod, default=None)
    return None
