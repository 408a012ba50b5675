"""Dots, convolutions and other dense linear algebra: 2 FLOPs per multiply-add."""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from hlo_roofline.cost.base import RULE_ERRORS, Cost, CostContext, element_bytes, rule
from hlo_roofline.cost.inplace import VIEWS
from hlo_roofline.hlo import attrs
from hlo_roofline.hlo.ir import Instruction, Shape

FMA_FLOPS = 2
# The opcodes of matrix products: the dots, and with convolution every op with a matmul geometry
# (the one set: the rows' walk and the rules below read it).
DOTS = ("dot", "scaled-dot", "ragged-dot")
MATMUL_OPCODES = (*DOTS, "convolution")


def dot_flops(lhs: Shape, out: Shape, lhs_contracting: tuple[int, ...]) -> int:
    """2 · (output elements) · (contracted size) = 2·batch·M·N·K."""
    return FMA_FLOPS * out.elements * math.prod(lhs.dims[d] for d in lhs_contracting)


@rule(*DOTS)
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


@functools.lru_cache(maxsize=4096)
def _whole_positions(w: attrs.WindowDim, kernel: int, outputs: int, inputs: int) -> int:
    """:func:`_valid_positions` of whole dimensions (no padding handed in): a model's convolutions
    repeat a few windows and sizes (every layer's), so each is counted once."""
    return _valid_positions(w, Extent(0, 1, kernel), Extent(0, 1, outputs), Extent(0, 1, inputs))


def floor_sum(n: int, m: int, a: int, b: int) -> int:
    """Σ floor((a·i + b) / m) for 0 ≤ i < n (m > 0), in O(log m) steps: the Euclid-like
    reduction of a sum of floors of a line, so no count of positions is ever looped over."""
    if n <= 0:
        return 0
    q, a = divmod(a, m)  # Python's divmod leaves 0 <= a, b < m for any sign
    total = q * (n * (n - 1) // 2)
    q, b = divmod(b, m)
    total += q * n
    while True:
        if a >= m:
            q, a = divmod(a, m)
            total += q * (n * (n - 1) // 2)
        if b >= m:
            q, b = divmod(b, m)
            total += q * n
        top = a * n + b
        if top < m:
            return total
        n, b = divmod(top, m)
        m, a = a, m


def _valid_positions(w: attrs.WindowDim, kernel: Extent, output: Extent, input_: Extent) -> int:
    """(kernel tap, output position) pairs that land on a real input element: not on the padding,
    not on a base (lhs) dilation hole; only the real taps and outputs take part.

    Tap t (of the real taps, spaced D apart) and real output m (spaced S apart on the dilated base)
    read base position B0 + t·D + m·S; the real input elements sit at first + j·step, j < count.
    For one tap the m that hit are a range [lo, hi] ∩ a residue class mod P, counted by two
    floors; over the taps that can hit (an arithmetic progression of t), lo, hi and the residue
    are floors of lines in t, so the sum is a few :func:`floor_sum` calls: the time does not
    depend on the window, padding or shape sizes (a window of 2^40 taps is as fast as 3)."""
    if input_.count <= 0 or output.count <= 0 or kernel.count <= 0:
        return 0
    if min(w.stride, w.base_dilation, w.window_dilation) < 1:
        raise ValueError(f"window {w} has a stride or dilation below 1")
    if min(input_.step, output.step, kernel.step) < 1:
        raise ValueError("extent steps below 1")
    first = input_.start * w.base_dilation
    step = input_.step * w.base_dilation
    last = first + (input_.count - 1) * step
    s = output.step * w.stride  # how far the base position moves per real output
    m_count = output.count
    d = kernel.step * w.window_dilation if kernel.count > 1 else 0  # per real tap
    b0 = output.start * w.stride + kernel.start * w.window_dilation - w.pad_low
    g = math.gcd(s, step)
    period = step // g
    inverse = pow(s // g, -1, period) if period > 1 else 0
    # Taps whose base is on the input's lattice modulo g: t·d ≡ first − b0 (mod g).
    h = math.gcd(d, g)
    if (first - b0) % h:
        return 0
    q = g // h
    t0 = ((first - b0) // h) * pow(d // h, -1, q) % q if q > 1 else 0
    taps = -(-(kernel.count - t0) // q) if t0 < kernel.count else 0
    if taps <= 0:
        return 0
    # Tap k of those (k < taps) reads base b1 + k·e from output 0; its outputs must be ≡ a·k + b.
    b1, e = b0 + t0 * d, q * d
    a = (-inverse * (e // g)) % period if period > 1 else 0
    b = (inverse * ((first - b1) // g)) % period if period > 1 else 0
    if e == 0:  # every tap reads the same base: one tap's count, once per tap
        return taps * _hits(0, 1, b1, 0, a, b, first, last, s, m_count, period)
    # Where lo = max(0, L(k)) and hi = min(M − 1, H(k)) change form, and where any m can hit.
    k_min = max(0, -(-(first - m_count * s - b1) // e))  # L(k) ≤ M
    k_max = min(taps - 1, (last + s - b1) // e)  # H(k) ≥ −1
    if k_min > k_max:
        return 0
    lo_zero = -(-(first - b1) // e)  # from here on L(k) ≤ 0
    hi_full = (last - (m_count - 1) * s - b1) // e  # up to here H(k) ≥ M − 1
    cuts = sorted({k_min, k_max + 1, *(c for c in (lo_zero, hi_full + 1) if k_min < c <= k_max)})
    total = 0
    for k1, k2 in itertools.pairwise(cuts):
        total += _hits(k1, k2 - k1, b1, e, a, b, first, last, s, m_count, period,
                       lo_is_zero=k1 >= lo_zero, hi_is_full=k1 <= hi_full)  # fmt: skip
    return total


def _hits(
    k1: int, n: int, b1: int, e: int, a: int, b: int, first: int, last: int, s: int,
    m_count: int, period: int, lo_is_zero: bool | None = None, hi_is_full: bool | None = None,
) -> int:  # fmt: skip
    """Σ over taps k1 ≤ k < k1 + n of #{m ∈ [lo, hi] : m ≡ a·k + b (mod period)}, which is
    floor((hi − a·k − b)/P) − floor((lo − 1 − a·k − b)/P); hi is M − 1 or floor((last − base)/s),
    lo is 0 or ceil((first − base)/s), and a floor of a floor over s is one floor over s·P."""
    base = b1 + k1 * e
    if lo_is_zero is None:  # one tap (e = 0): decide the forms from its own numbers
        lo_is_zero, hi_is_full = first <= base, last - base >= (m_count - 1) * s
        if last - base < -s or first - base > m_count * s:
            return 0
    slope = e + s * a  # how the s·P numerators fall per tap
    if hi_is_full:
        high = floor_sum(n, period, -a, m_count - 1 - b - a * k1)
    else:
        high = floor_sum(n, s * period, -slope, last - base - s * (a * k1 + b))
    if lo_is_zero:
        low = floor_sum(n, period, -a, -1 - b - a * k1)
    else:
        low = floor_sum(n, s * period, -slope, first - base - 1 - s * (a * k1 + b))
    return high - low


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
    if extents is None:  # whole dimensions: the counts of the sizes alone, looked up
        key = _conv_key(instr, lhs, rhs, out)
        found = _WHOLE_CONV_FLOPS.get(key)
        if found is None:
            found = _whole_conv_flops(
                instr, attrs.conv_dims(instr), attrs.window(instr), lhs, rhs, out
            )
            _remember(_WHOLE_CONV_FLOPS, key, found)
        return found
    dims = attrs.conv_dims(instr)
    window = attrs.window(instr)
    lx, rx, ox = extents
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
    # a padded feature or batch is no more work than the data's
    input_features = min(input_features, rx[dims.kernel_input_feature].count)
    output_features = min(output_features, rx[dims.kernel_output_feature].count)
    batch = min(batch, ox[dims.output_batch].count)
    return FMA_FLOPS * input_features * output_features * batch * positions


def _whole_conv_flops(
    instr: Instruction, dims: attrs.ConvDims, window, lhs: Shape, rhs: Shape, out: Shape
) -> int:
    """:func:`conv_flops` over whole dimensions (every element of every dimension data)."""
    positions = 1
    for i, w in enumerate(window):
        positions *= _whole_positions(
            w, rhs.dims[dims.kernel_spatial[i]], out.dims[dims.output_spatial[i]],
            lhs.dims[dims.input_spatial[i]],
        )  # fmt: skip
    feature_groups = attrs.int_attr(instr, "feature_group_count", 1)
    batch_groups = attrs.int_attr(instr, "batch_group_count", 1)
    input_features = lhs.dims[dims.input_feature] // feature_groups
    output_features = out.dims[dims.output_feature]
    batch = lhs.dims[dims.input_batch] // batch_groups
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
    """:func:`_conv_geometry`, looked up by what it reads (the attributes and the sizes): a model's
    layers repeat a few convolutions (GPT-2's twelve layers: each of its matmuls twelve times)."""
    key = _conv_key(instr, lhs, rhs, out)
    found = _CONV_GEOMETRIES.get(key)
    if found is None:
        found = _conv_geometry(instr, lhs, rhs, out)
        _remember(_CONV_GEOMETRIES, key, found)
    return found


def _conv_key(instr: Instruction, lhs: Shape, rhs: Shape, out: Shape) -> tuple:
    """All that a convolution's whole-dimension count and geometry read: its dimension labels,
    window and groups as written, and the sizes."""
    read = instr.attrs.get
    return (
        read("dim_labels"), read("window"), read("feature_group_count"),
        read("batch_group_count"), lhs.dims, rhs.dims, out.dims,
    )  # fmt: skip


def _remember(memo: dict, key: tuple, value) -> None:
    if len(memo) >= _CONV_MEMO_MAX:
        memo.clear()  # (bounded: a long-lived process sees many modules)
    memo[key] = value


# _conv_key -> geometry, and -> FLOPs over whole dimensions
_CONV_GEOMETRIES: dict[tuple, tuple[int, int, int, int]] = {}
_WHOLE_CONV_FLOPS: dict[tuple, int] = {}
_CONV_MEMO_MAX = 4096


def _conv_geometry(
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
    batch, positions, taps, rhs_free = groups * batch_groups, 1, 1, 1
    for i, w in enumerate(attrs.window(instr)):
        kernel = rhs.dims[dims.kernel_spatial[i]]
        outputs = out.dims[dims.output_spatial[i]]
        inputs = lhs.dims[dims.input_spatial[i]]
        pairs = _whole_positions(w, kernel, outputs, inputs)
        if kernel > 1 and pairs == outputs == inputs == kernel:  # a batch dim in disguise
            batch *= outputs
        elif kernel > 1 and inputs == 1 and pairs == outputs == kernel:
            # Every output meets its own tap on the lhs's one element: a free dim of the rhs
            # (a projection to heads, ``btd,dnh->btnh``), so part of N, not of M.
            rhs_free *= outputs
        else:
            positions *= outputs
            taps *= pairs
    m = out.dims[dims.output_batch] // batch_groups * positions
    k = (lhs.dims[dims.input_feature] // groups) * max(round(taps / max(positions, 1)), 1)
    return batch, m, out.dims[dims.output_feature] // (groups * batch_groups) * rhs_free, k


def matmul_geometry(
    instr: Instruction, memo: dict | None = None
) -> tuple[int, int, int, int] | None:
    """(batch, M, N, K) of a dot or convolution, or of the largest one inside a fusion.
    ``memo`` (id of a fused computation, dot or convolution -> its geometry) shares the walk of
    nested bodies, and a convolution's count with every caller asking again."""
    if instr.opcode in DOTS:
        if memo is None:
            return dot_geometry(
                instr.operands[0].shape, instr.operands[1].shape, attrs.dot_dims(instr)
            )
        found = memo.get(id(instr))
        if found is None:  # (a dot's geometry is never None: the memo holds each once)
            found = memo[id(instr)] = dot_geometry(
                instr.operands[0].shape, instr.operands[1].shape, attrs.dot_dims(instr)
            )
        return found
    if instr.opcode == "convolution":
        found = memo.get(id(instr)) if memo is not None else None
        if found is None:
            lhs, rhs = instr.operands[0].shape, instr.operands[1].shape
            found = conv_geometry(instr, lhs, rhs, instr.shape)
            if memo is not None:
                memo[id(instr)] = found
        return found
    if instr.opcode == "fusion" and instr.called:
        memo = {} if memo is None else memo
        body = instr.called[0]
        if id(body) not in memo:
            found = [
                g for i in body.instructions
                if i.opcode in _WITH_GEOMETRY and (g := matmul_geometry(i, memo)) is not None
            ]  # fmt: skip
            memo[id(body)] = max(found, key=math.prod, default=None)
        return memo[id(body)]
    return None


# The opcodes matmul_geometry finds a geometry for (of every other op: None).
_WITH_GEOMETRY = frozenset({*MATMUL_OPCODES, "fusion"})


class MatmulIO(NamedTuple):
    """How a matmul's arrays cross HBM: bytes per element of its lhs, rhs and result as read and
    written (through a fused convert: ``bf16 x · convert(s8 w)`` reads the weights as s8), and
    the slices of K that XLA:GPU's split-K made into batch elements (1: none)."""

    lhs_bytes: float
    rhs_bytes: float
    out_bytes: float
    split_k: int


# Ops between an array in HBM and the matmul that reads it that keep its element type's role: a
# fused convert, a relayout, the slice a kernel reads.
_READS_THROUGH = frozenset(
    {"convert", "bitcast", "copy", "reshape", "transpose", "broadcast", "slice", "dynamic-slice"}
)
_WRITES_THROUGH = frozenset({"convert", "bitcast", "copy", "reshape", "transpose"})
# An array as it was before its dims were regrouped: through views and reshapes (which keep the
# elements in order), not the buffer it shares (``inplace.VIEWS``).
_REGROUPS = VIEWS | {"reshape"}


def matmul_io(instr: Instruction, memo: dict | None = None) -> MatmulIO | None:
    """The :class:`MatmulIO` of a dot or convolution, or of the largest one inside a fusion."""
    if instr.opcode in MATMUL_OPCODES and len(instr.operands) >= 2:
        lhs, rhs = instr.operands[0], instr.operands[1]
        split = _split_k(instr, lhs, rhs, None) if instr.opcode == "dot" else 1
        return MatmulIO(element_bytes(lhs.shape), element_bytes(rhs.shape),
                        element_bytes(instr.shape), split)  # fmt: skip
    if instr.opcode != "fusion" or not instr.called:
        return None
    body = instr.called[0]
    matmul = _largest_matmul(body, {} if memo is None else memo)
    if matmul is None or len(matmul.operands) < 2:
        return None
    lhs, rhs = (_read_from(op) for op in matmul.operands[:2])
    split = _split_k(matmul, lhs, rhs, instr) if matmul.opcode == "dot" else 1
    return MatmulIO(element_bytes(lhs.shape), element_bytes(rhs.shape),
                    element_bytes(_written_as(matmul, body).shape), split)  # fmt: skip


def _largest_matmul(body, memo: dict) -> Instruction | None:
    """The fused body's own matmul of the largest geometry (the first of equals), or None; kept in
    ``memo`` (:func:`matmul_geometry`'s) for the next question about the same body."""
    key = ("largest", id(body))
    if key in memo:
        return memo[key]
    matmuls = [(g, i) for i in body.instructions if i.opcode in MATMUL_OPCODES
               and (g := matmul_geometry(i, memo)) is not None]  # fmt: skip
    found = max(matmuls, key=lambda found: math.prod(found[0]))[1] if matmuls else None
    memo[key] = found
    return found


def fused_matmul(fusion: Instruction, memo: dict | None = None) -> Instruction | None:
    """The matmul of the largest geometry in a fusion's body (None for another op)."""
    if fusion.opcode != "fusion" or not fusion.called:
        return None
    return _largest_matmul(fusion.called[0], {} if memo is None else memo)


def _read_from(value: Instruction) -> Instruction:
    """The array a fused matmul operand is read from: up through converts, relayouts, slices."""
    while value.opcode in _READS_THROUGH and value.operands:
        value = value.operands[0]
    return value


def _written_as(value: Instruction, body) -> Instruction:
    """What a fused matmul's result is written as: down its one-user chain of converts and
    relayouts to the fusion's root (or the matmul itself where the chain goes elsewhere)."""
    start = value
    while not value.is_root:
        # its users, one entry per read (the chain is short: found by a look at each op's reads)
        after = [inner for inner in body.instructions for op in inner.operands if op is value]
        if len(after) == 1 and after[0].opcode == "tuple" and after[0].is_root:
            return value
        if len(after) != 1 or after[0].opcode not in _WRITES_THROUGH:
            return start
        value = after[0]
    return value


def _split_k(dot: Instruction, lhs: Instruction, rhs: Instruction, fusion) -> int:
    """The slices of K that are ``dot``'s batch, where XLA:GPU split K (split-K): each operand,
    through bitcasts (and out of the fusion ``fusion``), is an array whose contracting dim was
    cut into ``slices × K`` with the slices as its one batch dim. 1 otherwise."""
    numbers = attrs.dot_dims(dot)
    sides = (
        (lhs, dot.operands[0].shape, numbers.lhs_batch, numbers.lhs_contracting),
        (rhs, dot.operands[1].shape, numbers.rhs_batch, numbers.rhs_contracting),
    )
    slices = set()
    for source, shape, batch, contracting in sides:
        if len(batch) != 1 or len(contracting) != 1 or batch[0] + 1 != contracting[0]:
            return 1
        b = batch[0]
        merged = (*shape.dims[:b], shape.dims[b] * shape.dims[b + 1], *shape.dims[b + 2 :])
        if _unviewed(source, fusion).shape.dims != merged:
            return 1
        slices.add(shape.dims[b])
    return slices.pop() if len(slices) == 1 else 1


def _unviewed(value: Instruction, fusion: Instruction | None) -> Instruction:
    """``value`` before bitcasts and reshapes, followed out of a fusion's parameter."""
    while True:
        while value.opcode in _REGROUPS and value.operands:
            value = value.operands[0]
        outer = fusion_operand(value, fusion)
        if outer is None:
            return value
        value, fusion = outer, None


def fusion_operand(param: Instruction, fusion: Instruction | None) -> Instruction | None:
    """The operand ``fusion`` passes in as ``param``, a parameter of its body; None for any
    other value (or no fusion)."""
    number = param.parameter_number if fusion is not None else None
    return fusion.operands[number] if number is not None and number < len(fusion.operands) else None


# Ops that feed a fused matmul without a vector loop of their own: names and views, windows
# a DMA reads (slices), scalars and broadcasts a consumer reads in its own loop, relayouts
# (copy, transpose: XLA:TPU's estimates do not charge a fused operand's relayout consistently,
# from a quarter of a pass, an int8 weight on v5e, to two, a scanned weight on 7x, so a lower
# bound counts none) and type conversions (XLA:TPU feeds int8 and fp8 operands to the MXU as
# they are: weight-only int8 compiles to a convolution of bf16 by s8).
_NO_LOOP = frozenset(
    {"parameter", "constant", "bitcast", "get-tuple-element", "tuple", "slice", "dynamic-slice",
     "broadcast", "iota", "copy", "transpose", "reshape", "convert"}
)  # fmt: skip


# Loop passes a fused matmul's computed operand is counted as. XLA:TPU's estimates of such
# fusions charge between 0.36 passes (softmax normalisation fused into attention's PV on v5e) and
# 4.6 (GELU backward on v5e) at the chip's loop rate, over fixtures/inplace and
# fixtures/tpu_estimates on v5e-7x: the vector unit works on registers on their way to the MXU,
# not on VMEM like a loop fusion. A lower bound counts the least of them.
PROLOGUE_PASSES = 0.35


def words(shape: Shape) -> float:
    """32-bit words of an array in vector registers: two bf16 (four 8-bit) elements to a word."""
    return shape.elements * min(element_bytes(shape) or 4, 4) / 4


# A matmul whose wide operand streams through the vector registers: fewer rows than a register's
# sublanes against it, and a contraction within one pass of the widest MXU (256).
_STREAMED_ROWS_BELOW = 8
_STREAMED_K_AT_MOST = 256
VMEM_SPACE = 1  # the memory space of a TPU's vector memory: S(1) in a layout


def in_vmem(shape: Shape) -> bool:
    """The array's layout places it in a TPU's VMEM (``S(1)``)."""
    return shape.layout is not None and shape.layout.memory_space == VMEM_SPACE


def streamed_operand_words(instr: Instruction, memo: dict | None = None) -> float:
    """Words of a matmul's wide operand (the K×N side) where XLA:TPU streams it through the vector
    registers rather than holding it in the MXU: fewer than 8 rows against it (a decode step's
    queries per KV head), a contraction within one pass of the MXU (K ≤ 256: a head dim) that is
    the operand's minor (lane) dimension (the keys of a KV cache, ``[b, s, h, d]``), the operand
    read from HBM. Each of its words then passes the vector unit once; XLA:TPU charges such
    products (decode's attention scores) at the loop rate per word, and one whose operand XLA
    placed in VMEM 2-3x less (docs/validation.md). 0 for any other matmul, or a fusion whose
    matmul sits in a nested fusion. ``instr``: a dot, a convolution or a fusion of one."""
    geometry = matmul_geometry(instr, memo)
    if geometry is None:
        return 0.0
    _, m, _, k = geometry
    if not (0 < m < _STREAMED_ROWS_BELOW and 1 < k <= _STREAMED_K_AT_MOST):
        return 0.0
    matmul = instr
    if instr.opcode == "fusion":
        inner = [i for i in instr.called[0].instructions if i.opcode in MATMUL_OPCODES]
        matmul = next((i for i in inner if matmul_geometry(i, memo) == geometry), None)
    if matmul is None or len(matmul.operands) < 2 or not matmul.operands[1].shape.is_array:
        return 0.0
    wide = matmul.operands[1].shape
    try:
        contracting = (
            attrs.dot_dims(matmul).rhs_contracting if matmul.opcode in DOTS
            else (attrs.conv_dims(matmul).kernel_input_feature,)
        )  # fmt: skip
    except RULE_ERRORS:
        return 0.0
    layout = wide.layout
    minor = layout.minor_to_major[0] if layout and layout.minor_to_major else len(wide.dims) - 1
    if minor not in contracting or _read_from_vmem(matmul.operands[1]):
        return 0.0
    return words(wide)


def _read_from_vmem(operand: Instruction) -> bool:
    """Whether a matmul's operand comes from VMEM (``S(1)``), through the views, converts and
    relayouts a fusion applies to a parameter on its way in."""
    for _ in range(16):  # a chain of views is short; a cap, not a search
        layout = operand.shape.layout
        if layout is not None and layout.memory_space == VMEM_SPACE:
            return True
        through = operand.opcode in _READS_THROUGH or (
            operand.opcode == "fusion" and len(operand.operands) == 1
        )
        if not through or not operand.operands:
            return False
        operand = operand.operands[0]
    return False


def fused_operand_words(fusion: Instruction, memo: dict | None = None) -> float:
    """Words of a fused matmul's operands that a vector loop computes before they reach the matrix
    unit: an operand whose producers in the fusion do arithmetic (softmax or GELU backward's
    elementwise chain; not only a convert or a relayout, see ``_NO_LOOP``) passes through the
    vector unit, as the array the matmul reads, counted as ``PROLOGUE_PASSES`` of a pass; one read
    straight from a parameter (through views, slices, converts, relayouts) streams in.

    The epilogue is the result, as many words as the matmul writes: an f32 epilogue on a bf16
    result (attention's scaled scores) is charged by XLA:TPU at f32 width on v5e and v5p but at
    the result's on v6e, so a lower bound counts the result's.

    This counts each element once, overlapped with the MXU (the vector unit's work beside the
    matrix unit's): XLA:TPU's estimates of such fusions with K whole (softmax backward, GELU
    backward, scanned weight relayouts, compiled for v5e-7x in fixtures/inplace) agree with one
    pass. Where the tiling loop splits K, the left operand is computed again per fetch of its
    window, after the MXU (:func:`hlo_roofline.cost.tpu.tiling.prologue_elements`).
    ``memo``: :func:`matmul_geometry`'s."""
    if fusion.opcode != "fusion" or not fusion.called:
        return 0.0
    matmul = _largest_matmul(fusion.called[0], {} if memo is None else memo)
    if matmul is None:
        return 0.0
    working: dict[int, bool] = {}
    computed = sum(words(op.shape) for op in matmul.operands[:2] if _does_work(op, working, 0))
    return float(PROLOGUE_PASSES * computed)


def computed_in_fusion(value: Instruction) -> bool:
    """Whether ``value`` (a fused matmul's operand) is computed by a vector loop inside its fusion
    (``_NO_LOOP``: views, slices, converts and relayouts are not), rather than streamed in, and is
    more than an assembly of padded windows (:func:`_assembled`)."""
    return _does_work(value, {}, 0) and not _assembled(value, None, 0)


_MERGES = frozenset({"maximum", "minimum"})  # ops that merge padded windows into one array


def _assembled(value: Instruction, fusion: Instruction | None, depth: int) -> bool:
    """``value`` is padded windows of arrays and nothing more: a ``pad``, or a maximum (minimum)
    of such, through views, slices and converts, into nested fusions (``fusion``: the nested
    fusion whose body ``value`` is in). XLA:TPU's collective matmuls merge a ring step's chunk of
    the activations so (two pads of the halves, their maximum); its estimates charge the merge
    next to nothing per fetch (MaxText's v5p 32B step, fixtures/published: 0.003-0.13 loop passes
    per fetched element), unlike arithmetic on the operand."""
    if depth > 32:
        return False
    code = value.opcode
    if code == "pad":
        return True
    if code == "fusion" and value.called:
        return _assembled(value.called[0].root, value, depth + 1)
    if code == "parameter":
        outer = fusion_operand(value, fusion)
        return outer is not None and _assembled(outer, None, depth + 1)
    if code in _MERGES:
        return all(_assembled(op, fusion, depth + 1) for op in value.operands)
    if code in _NO_LOOP and value.operands:
        return _assembled(value.operands[0], fusion, depth + 1)
    return False


def _does_work(value: Instruction, memo: dict[int, bool], depth: int) -> bool:
    """Some op producing ``value`` (inside its fusion, nested fusions included) runs a vector
    loop."""
    found = memo.get(id(value))
    if found is not None:
        return found
    if depth > 64:
        return False
    if value.opcode == "fusion" and value.called:
        found = any(
            _loop_op(i) or (i.opcode == "fusion" and _does_work(i, memo, depth + 1))
            for i in value.called[0].instructions
        ) or any(_does_work(op, memo, depth + 1) for op in value.operands)
    elif _loop_op(value):
        found = True
    else:
        found = any(_does_work(op, memo, depth + 1) for op in value.operands)
    memo[id(value)] = found
    return found


def _loop_op(instr: Instruction) -> bool:
    return not (
        instr.opcode in _NO_LOOP or instr.opcode in MATMUL_OPCODES or instr.opcode == "fusion"
    )


def comparison_passes(instr: Instruction) -> float:
    """Passes a sort or a top-k makes over its keys on the vector unit, per key element.

    A comparison sort of n keys needs at least log2(n!) ≈ n·log2(n) comparisons (the decision-
    tree bound: each comparison at most halves the n! orders left), so a sorted row of n keys is
    ceil(log2 n) passes over its n elements: a lower bound, as a roofline is (XLA:TPU's bitonic
    network makes log2 n·(log2 n + 1)/2). A top-k keeps the k best of each row in a sorted
    buffer: n·log2(k) comparisons, ceil(log2 k) passes (one at k = 1)."""
    keys = instr.operands[0].shape if instr.operands else None
    if keys is None or not keys.is_array or not keys.dims:
        return 1.0
    if instr.opcode == "sort":
        dims = attrs.ints(instr, "dimensions") if "dimensions" in instr.attrs else [-1]
        if dims and not -len(keys.dims) <= dims[0] < len(keys.dims):
            return 1.0  # a dimension the keys lack (malformed): the least, one pass
        n = keys.dims[dims[0]] if dims else keys.dims[-1]
        return float(max((n - 1).bit_length(), 1))
    result = instr.shape.tuple_shapes[0] if instr.shape.is_tuple else instr.shape
    k = result.dims[-1] if result.is_array and result.dims else 1
    return float(max((k - 1).bit_length(), 1))
