"""Known attention kernels, priced from their shapes when they carry no cost estimate of their own.

A Pallas kernel is a custom call whose work XLA cannot see. The attention kernels that JAX ships
name themselves (the ``pallas_call`` name becomes the instruction's name and the last step of its
``op_name``; a Triton call also writes ``name = "..."`` in its backend_config), and their operands
follow a fixed order, so their work follows from the shapes:

- a (q, kv) pair of scores costs 2·D for ``q·kᵀ`` and 2·Dv for ``p·v`` in the forward pass (4·D),
  and one ``exp``;
- a backward ``dq`` kernel recomputes the scores and ``dp = do·vᵀ`` and forms ``dq = ds·k``: 3
  matmuls, 6·D a pair; a ``dkv`` kernel recomputes the scores and ``dp`` and forms
  ``dv = pᵀ·do`` and ``dk = dsᵀ·q``: 4 matmuls, 8·D. Split into the two kernels (as JAX's TPU flash
  and splash attention and its Triton ``mha_backward`` are) the backward pass is 14·D = 3.5× the
  forward; a fused kernel (splash ``use_fused_bwd_kernel``) does 5 matmuls, 10·D = 2.5×;
- a decode (paged) kernel: one query a sequence, 4·D a (query head, cached position) pair;
- cuDNN's fused flash attention (``__cudnn$fmha*``, what ``jax.nn.dot_product_attention``'s cuDNN
  implementation and Transformer Engine emit): its forward is the two products above; its backward
  is handed q, k, v, the forward's softmax statistics (``f32[B, N, Sq]``, not the scores), dO and O,
  so it recomputes ``q·kᵀ`` and forms the four gradient products its backend_config names
  (``bmm1_grad_gemm1/2``, ``bmm2_grad_gemm1/2``: ``dv = pᵀ·do``, ``dp = do·vᵀ``, ``dq = ds·k``,
  ``dk = dsᵀ·q``): 5 matmuls, 10·D a pair, 2.5× the forward (FlashAttention-2's backward, Dao
  2023, Algorithm 2; flash-attention's ``benchmarks/benchmark_flash_attention.py`` counts it so).

A cuDNN call says its pairs and mask in its backend_config (``intermediate_tensor_shape``
``[B, N, Sq, Skv]``, ``mask_type``, ``sliding_window_length``): a causal mask keeps the pairs at or
below the diagonal, Sq·(Sq + 1)/2 of Sq² (the least work the kernel can do: it skips the tiles above
the diagonal and computes its diagonal tiles whole). A splash kernel computes the blocks its block
mask marks nonzero: where the text prints the mask (a constant ``as_text()`` elides, printed with
``print_large_constants``, as ``hlo_roofline.analyze`` keeps a Pallas program) those blocks are
counted. What a Pallas kernel's text does not say is never guessed smaller: an elided splash mask, a
flash kernel's ``causal`` flag (in its body) are taken as every block the grid visits; a paged
kernel's runtime lengths as long as its page table allows. Such a cost is flagged ``upper_bound``
and its note says so. Bytes are the operands and results, except that a paged kernel reads only the
pages its page table names, not the whole cache it is handed.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from typing import NamedTuple

from hlo_roofline.cost.base import Cost, CostContext, callee, element_bytes
from hlo_roofline.hlo import attrs
from hlo_roofline.hlo.ir import INDEX_DTYPES, Computation, Instruction, Shape

# Per (q, kv) pair: (matmuls contracting or producing head_dim D, those over Dv, exps). Forward:
# q·kᵀ (D), p·v (Dv). dq: q·kᵀ, do·vᵀ (Dv), ds·k (D). dkv: q·kᵀ, do·vᵀ, pᵀ·do (Dv), dsᵀ·q (D).
# fused: dkv's and ds·k. Triton mha_backward: a dkv loop and a dq loop, each recomputing q·kᵀ.
_PHASES = {
    "fwd": (1, 1, 1), "dq": (2, 1, 1), "dkv": (2, 2, 1), "fused_bwd": (3, 2, 1), "bwd": (4, 3, 2),
}  # fmt: skip
CUDNN_FMHA = "__cudnn$fmha"  # cuDNN fused attention: fmhaSoftmax[Dropout], ...Backward, ...F8
_FULL_MASK = "mask not visible in the text: every (q, kv) pair counted (upper bound; causal ≈ ½)"


@dataclass(frozen=True)
class Kernel:
    """A recognised kernel: its family (``flash``, ``splash``, ``triton_mha``, ``paged``,
    ``ragged_paged``, ``triton_delta``) and phase (``fwd``, ``dq``, ``dkv``, ``bwd``, ...)."""

    family: str
    phase: str
    name: str


def kernel_name(instr: Instruction, target: str) -> str:
    """The name the kernel's author gave its ``pallas_call``: a Triton call's ``name = "..."``,
    else the step of the op_name before ``/pallas_call``, else the instruction's name."""
    config = instr.attrs.get("backend_config", "")
    if target == "__gpu$xla.gpu.triton":
        found = re.search(r'\bname = "([^"]+)"', config)
        if found:
            return found.group(1)
    op_name = re.search(r'op_name="([^"]*)"', instr.attrs.get("metadata", ""))
    if op_name and op_name.group(1).endswith("/pallas_call"):
        step = op_name.group(1).rsplit("/", 2)[-2]
        if "(" not in step:  # jit(f)/pallas_call names no kernel
            return step
    return re.sub(r"\.\d+$", "", instr.name)


def recognise(instr: Instruction, target: str) -> Kernel | None:
    """The attention kernel a custom call runs, if it is one JAX ships or cuDNN's (else None)."""
    if target.startswith(CUDNN_FMHA):
        return Kernel("cudnn", "fused_bwd" if "Backward" in target else "fwd", target)
    if target not in ("tpu_custom_call", "__gpu$xla.gpu.triton"):
        return None
    name = kernel_name(instr, target)
    whole = f"{name} {instr.name}"  # not the op_name's scopes: a kernel inside jit(paged_attention)
    if target == "tpu_custom_call":
        if m := re.match(r"splash_(mha|mqa)_(fwd|dq|dkv)", name):
            phase = m.group(2)
            if phase == "dkv" and len(_float_leaves(instr.shape)) >= 3:
                phase = "fused_bwd"  # also writes dq
            return Kernel("splash", phase, name)
        if m := re.match(r"flash_mha_bwd_(dq|dkv)", name):
            return Kernel("flash", m.group(1), name)
        if re.search(r"\bragged_paged_attention", whole):
            return Kernel("ragged_paged", "decode", name)
        if re.search(r"\bpaged_attention", whole):
            return Kernel("paged", "decode", name)
        if re.search(r"\bflash_attention\b|jit_flash_attention", whole):
            return Kernel("flash", "fwd", name)
        return None
    if name == "mha_forward":
        return Kernel("triton_mha", "fwd", name)
    if name == "mha_backward":
        return Kernel("triton_mha", "bwd", name)
    if name == "mha_preprocess_backward":
        return Kernel("triton_delta", "delta", name)
    return None


def _float_leaves(shape: Shape) -> list[Shape]:
    return [leaf for leaf in shape.leaves() if leaf.dtype not in INDEX_DTYPES and leaf.dims]


def _floats(instr: Instruction) -> list[Shape]:
    return [leaf for op in instr.operands for leaf in _float_leaves(op.shape)]


def _ints(instr: Instruction) -> list[Shape]:
    return [op.shape for op in instr.operands if op.shape.is_array and op.shape.dtype in INDEX_DTYPES]


def _head_dim_minor(instr: Instruction) -> bool:
    """Splash attention's ``q_layout`` (1: head_dim minor, 2: sequence minor) from its metadata."""
    found = re.search(r'q_layout\\?"\s*:\s*(\d)', instr.attrs.get("frontend_attributes", ""))
    return found is None or found.group(1) == "1"


def price(kernel: Kernel, instr: Instruction, ctx: CostContext) -> Cost | None:
    """The kernel's cost from its shapes; None if they are not the shapes the kernel takes."""
    if kernel.family == "cudnn":
        return _cudnn(kernel, instr, ctx)
    if kernel.family in ("paged", "ragged_paged"):
        return _decode(kernel, instr, ctx)
    if kernel.family == "triton_delta":  # delta = rowsum(out · dout): a multiply and an add each
        floats = _floats(instr)
        if len(floats) < 2 or floats[0].dims != floats[1].dims:
            return None
        return Cost(
            flops=2 * floats[0].elements,
            bytes_accessed=ctx.read_and_written(instr, instr.shape),
            notes=(f"kernel '{kernel.name}': out·dout summed over head_dim, from its shapes",),
        )
    floats = _floats(instr)
    if len(floats) < 3:
        return None
    q, k, v = floats[:3]
    if kernel.family == "triton_mha" and len(k.dims) == len(q.dims) + 1:
        return _triton_decode(kernel, instr, q, k, v, ctx)
    if kernel.family == "triton_mha":  # [batch, seq, heads, head_dim]
        if len(q.dims) != 4 or len(k.dims) != 4:
            return None
        sq, skv, d, dv = q.dims[1], k.dims[1], q.dims[-1], v.dims[-1]
    elif kernel.family == "splash" and not _head_dim_minor(instr):  # [..., head_dim, seq]
        sq, skv, d, dv = q.dims[-1], k.dims[-1], q.dims[-2], v.dims[-2]
    else:  # [..., seq, head_dim]
        if len(q.dims) < 2 or len(k.dims) < 2:
            return None
        sq, skv, d, dv = q.dims[-2], k.dims[-2], q.dims[-1], v.dims[-1]
    if not (sq and d) or q.elements % (sq * d):
        return None
    heads = q.elements // (sq * d)  # batch × query heads
    with_d, with_dv, exps = _PHASES[kernel.phase]
    visited = _visited_share(kernel, instr, sq, skv, heads, ctx)
    pairs = heads * sq * skv * visited.share
    flops = 2 * (with_d * d + with_dv * dv) * pairs
    return Cost(
        flops=flops,
        mxu_flops=flops,  # every one of them is in a QKᵀ or PV product: matrix-unit work
        transcendentals=exps * pairs,
        bytes_accessed=ctx.read_and_written(instr, instr.shape),
        notes=(
            f"kernel '{kernel.name}': {kernel.phase} attention from its shapes; {visited.note}",
        ),
        upper_bound=visited.upper_bound,
    )


def _cudnn(kernel: Kernel, instr: Instruction, ctx: CostContext) -> Cost | None:
    """cuDNN's fused attention: its pairs from the scores' shape its backend_config names
    (``[B, N, Sq, Skv]``), head dims from q and v (the minor dim in both of JAX's layouts, BTNH and
    BNTH), the pairs its mask keeps."""
    config = attrs.backend_config(instr).get("cudnn_fmha_backend_config", {})
    dims = [int(n) for n in config.get("intermediate_tensor_shape", {}).get("dimensions", [])]
    floats = _floats(instr)
    if len(dims) != 4 or len(floats) < 3 or len(floats[0].dims) != 4 or len(floats[2].dims) != 4:
        return None
    batch, heads, sq, skv = dims
    d, dv = floats[0].dims[-1], floats[2].dims[-1]
    if floats[0].elements != batch * heads * sq * d:  # not the q the scores say
        return None
    mask = str(config.get("mask_type", "NO_MASK"))
    window = int(config.get("sliding_window_length", 0) or 0)
    kept, mask_note = _cudnn_pairs(mask, window, sq, skv)
    pairs = batch * heads * kept
    with_d, with_dv, exps = _PHASES[kernel.phase]
    mxu = 2 * (with_d * d + with_dv * dv) * pairs
    # the backward also forms rowsum(dO ∘ O) (a multiply and an add an element of O) off the MXU
    delta = 2 * batch * heads * sq * dv if kernel.phase != "fwd" else 0
    return Cost(
        flops=mxu + delta,
        mxu_flops=mxu,
        transcendentals=exps * pairs,
        bytes_accessed=ctx.read_and_written(instr, instr.shape),
        notes=(f"kernel '{kernel.name}': {kernel.phase} attention from its shapes; {mask_note}",),
        upper_bound="PADDING" in mask,  # its padding lengths are runtime values
    )


def _cudnn_pairs(mask: str, window: int, sq: int, skv: int) -> tuple[int, str]:
    """The (q, kv) pairs a cuDNN attention's mask keeps per (batch, head), and the note saying so.
    Causal is top-left (query i sees keys 0..i), a sliding window the last ``window`` of those."""
    causal = "CAUSAL" in mask
    padding = "PADDING" in mask
    if not causal:
        note = "no mask: every (q, kv) pair"
        if padding:
            note += "; its padding lengths are runtime values (every pair counted: upper bound)"
        return sq * skv, note
    reach = min(skv, window) if window > 0 else skv  # the most keys one query sees
    ramp = min(sq, reach)  # queries 0..ramp-1 see i + 1 keys, the rest see ``reach``
    kept = ramp * (ramp + 1) // 2 + (sq - ramp) * reach
    note = f"causal mask: {kept / (sq * skv):.1%} of the pairs"
    if window > 0:
        note += f" (window {window})"
    if padding:
        note += "; its padding lengths are runtime values (not counted: upper bound)"
    return kept, note


def _triton_decode(
    kernel: Kernel, instr: Instruction, q: Shape, k: Shape, v: Shape, ctx: CostContext
) -> Cost | None:
    """JAX's Triton decode attention (``decode_attention.mqa``/``gqa``, also named
    ``mha_forward``): ``q [groups…, queries, D]`` against ``k [groups…, splits, keys, D]``, every
    query of a group (batch, kv head) against every key of it."""
    lead = q.dims[:-2]
    if k.dims[: len(lead)] != lead or q.dims[-1] != k.dims[-1]:
        return None
    d, dv = q.dims[-1], v.dims[-1]
    keys = 1
    for n in k.dims[len(lead) : -1]:
        keys *= n
    pairs = q.elements // d * keys
    return Cost(
        flops=2 * (d + dv) * pairs,
        transcendentals=pairs,
        bytes_accessed=ctx.read_and_written(instr, instr.shape),
        notes=(
            f"kernel '{kernel.name}': decode attention from its shapes; every cached position "
            + ("counted (its lengths are runtime values: upper bound)" if _ints(instr) else "read"),
        ),
        upper_bound=bool(_ints(instr)),
    )


# The block sizes splash attention's kernels run with, by phase, as its kernel_metadata names them.
_SPLASH_BLOCKS = {
    "fwd": ("block_q", "block_kv"), "dq": ("block_q_dq", "block_kv_dq"),
    "dkv": ("block_q_dkv", "block_kv_dkv"), "fused_bwd": ("block_q_dkv", "block_kv_dkv"),
}  # fmt: skip


class Visited(NamedTuple):
    """The share of a kernel's (q, kv) pairs it computes, the note saying how that is known, and
    whether it may be high (a mask the text does not show: every candidate pair counted)."""

    share: float
    note: str
    upper_bound: bool


_UNREAD = Visited(1.0, _FULL_MASK, True)


def _visited_share(
    kernel: Kernel, instr: Instruction, sq: int, skv: int, heads: int, ctx: CostContext
) -> Visited:
    """The share of the (q, kv) pairs the kernel computes, read from its block mask where the
    text holds it.

    Splash attention skips work the way its ``MaskInfo`` says: its first two operands (before q)
    are ``data_next`` and ``block_mask``, ``[mask heads, rows, columns]``, one block of
    ``block_q × block_kv`` pairs an entry (``block_kv × block_q`` for dkv, whose rows are kv
    blocks); a grid step runs only where ``block_mask`` is nonzero (1: partial, 2: full; a partial
    block is computed whole and masked after). The mask is a constant of the program: read when the
    text prints it (``print_large_constants``; also a scalar broadcast, the full mask), the block
    mask's nonzero blocks are counted. A causal, local-window or chunked mask is thus counted as the
    kernel runs it; segment ids are runtime values that mask pairs inside the blocks the kernel
    computes anyway, so they remove no work. Without the two arrays the kernel computes every block.
    Where ``compiled.as_text()`` elides the constant (``{...}``), the grid's blocks are counted,
    whose columns are only as many as the most blocks any row keeps (3 of 16 for a window of 256
    over 2048 positions in blocks of 128): an upper bound, and flagged so."""
    if kernel.family != "splash":
        return _UNREAD
    before_q = []  # the scalar-prefetch operands: data_next, block_mask[, mask_next]
    for op in instr.operands:
        if not op.shape.is_array or op.shape.dtype not in INDEX_DTYPES:
            break
        before_q.append(op)
    masks = [op for op in before_q if len(op.shape.dims) == 3]
    if not masks:
        return Visited(1.0, "no block mask: every (q, kv) block computed", False)
    sizes = [_metadata_int(instr, key) for key in _SPLASH_BLOCKS[kernel.phase]]
    if None in sizes or len(masks) < 2:
        return _UNREAD
    bq, bkv = sizes
    mask_heads, rows, columns = masks[1].shape.dims
    counts = _nonzero_counts(masks[1], ctx)
    computed = max(counts) * (heads // mask_heads) if counts and mask_heads else 0
    share = computed * bq * bkv / (heads * sq * skv)
    if counts is not None and mask_heads and heads % mask_heads == 0 and share <= 1:
        varies = len(set(counts)) > 1  # a shard's mask, taken at a runtime index: the largest
        return Visited(share, (
            f"its block mask read: {computed / heads:g} blocks of {bq}×{bkv} a head computed "
            f"({share:.1%} of the pairs; partial blocks whole"
            + ("; the most of any shard's mask: upper bound)" if varies else ")")
        ), varies)  # fmt: skip
    share = min(1.0, rows * columns * bq * bkv / (sq * skv))
    if share == 1.0:
        return _UNREAD
    return Visited(share, (
        f"its grid visits {rows * columns} blocks of {bq}×{bkv} a head ({share:.1%} of the pairs), "
        "counted in full: which are empty or partial is not in the text (upper bound)"
    ), True)  # fmt: skip


# Ops that hand on their operand's values unchanged (a copy into another memory space, a view).
_VALUE_KEEPING = ("copy", "copy-done", "copy-start", "bitcast", "reshape", "convert")
_MAX_HOPS = 64


class _Source(NamedTuple):
    """Where a value comes from: a ``constant`` or ``broadcast``, and the ``dynamic-slice`` (at a
    runtime index) that takes the value out of it, if one does."""

    origin: Instruction
    sliced: Instruction | None


def _constant_source(value: Instruction, ctx: CostContext) -> _Source | None:
    """The ``constant`` (or ``broadcast``) whose values ``value`` holds, if it is one: followed
    through copies and views, tuples, into a fusion's root and out of a called computation's
    parameter into its caller's operand, through one ``dynamic-slice`` (a head shard's mask taken
    out of every shard's at the shard's index); a while loop's state element, in the loop or out
    of it, only if the body hands it on unchanged."""
    wanted: list[int] = []  # the tuple elements to take, innermost last
    sliced = None
    for _ in range(_MAX_HOPS):
        opcode = value.opcode
        if opcode in ("constant", "broadcast") and not wanted:
            return _Source(value, sliced)
        if opcode in _VALUE_KEEPING and value.operands:
            value = value.operands[0]
        elif opcode == "get-tuple-element" and value.operands:
            wanted.append(attrs.int_attr(value, "index", 0))
            value = value.operands[0]
        elif opcode == "tuple" and wanted and wanted[-1] < len(value.operands):
            value = value.operands[wanted.pop()]
        elif opcode == "fusion" and not wanted and value.called and value.called[0].root:
            value = value.called[0].root
        elif opcode == "dynamic-slice" and sliced is None and not wanted and value.operands:
            sliced, value = value, value.operands[0]
        elif opcode == "while" and value.operands and _hands_on(callee(value, ctx, "body"), wanted):
            value = value.operands[0]  # a loop-invariant element leaves the loop as it entered
        elif opcode == "parameter" and value.parameter_number is not None:
            caller = _callers(ctx).get(id(value.computation))
            if caller is None or value.parameter_number >= len(caller.operands):
                return None
            if caller.opcode == "while" and not _hands_on(value.computation, wanted):
                return None
            value = caller.operands[value.parameter_number]
        else:
            return None
    return None


_MAX_WINDOWS = 4096  # the start positions of a dynamic slice tried, at most


def _nonzero_counts(value: Instruction, ctx: CostContext) -> list[int] | None:
    """The nonzero entries of each array ``value`` may hold: one where it is a constant the text
    prints, one a start position where a runtime ``dynamic-slice`` takes it out of one."""
    source = _constant_source(value, ctx)
    values = _int_values(source.origin) if source is not None else None
    if values is None:
        return None
    if source.sliced is None:
        return [sum(1 for v in values if v)]
    whole = source.origin.shape.dims
    sizes = attrs.ints(source.sliced, "dynamic_slice_sizes")
    if source.sliced.operands[0].shape.dims != whole or len(sizes) != len(whole):
        return None
    starts = [range(n - k + 1) for n, k in zip(whole, sizes, strict=True)]
    if any(not r for r in starts) or math.prod(len(r) for r in starts) > _MAX_WINDOWS:
        return None
    strides = [math.prod(whole[d + 1 :]) for d in range(len(whole))]
    window = [
        sum(i * stride for i, stride in zip(index, strides, strict=True))
        for index in itertools.product(*(range(k) for k in sizes))
    ]  # the offsets of a window's entries from its first
    return [
        sum(1 for offset in window if values[first + offset])
        for first in (
            sum(i * stride for i, stride in zip(start, strides, strict=True))
            for start in itertools.product(*starts)
        )
    ]


def _callers(ctx: CostContext) -> dict[int, Instruction]:
    """Each computation's one caller (a computation called from several places is left out:
    its parameters hold no one value)."""
    key = ("computation_callers",)
    found = ctx.memo.get(key)
    if found is None:
        callers: dict[int, Instruction | None] = {}
        for instr in ctx.module.instructions():
            for called in instr.called:
                callers[id(called)] = None if id(called) in callers else instr
        found = ctx.memo[key] = {k: v for k, v in callers.items() if v is not None}
    return found  # type: ignore[return-value]


def _hands_on(body: Computation, wanted: list[int]) -> bool:
    """A while body hands its state's element ``wanted[-1]`` on unchanged to the next iteration
    (a loop invariant: its value in the loop is the one the loop starts with)."""
    root = body.root
    if not wanted or root is None or root.opcode != "tuple" or wanted[-1] >= len(root.operands):
        return False
    out = root.operands[wanted[-1]]
    while out.opcode in _VALUE_KEEPING and out.operands:
        out = out.operands[0]
    return (
        out.opcode == "get-tuple-element"
        and out.operands[0].opcode == "parameter"
        and attrs.int_attr(out, "index", -1) == wanted[-1]
    )


def _int_values(value: Instruction | None) -> list[int] | None:
    """The integers of a constant array, or of a scalar constant broadcast, if the text prints
    them (``compiled.as_text()`` elides a constant of more than 10 elements as ``{...}``)."""
    if value is not None and value.opcode == "broadcast" and value.operands:
        scalar = value.operands[0]
        if scalar.opcode == "constant" and not scalar.shape.dims:
            numbers = _constant_ints(scalar)
            return numbers * value.shape.elements if numbers else None
        return None
    return _constant_ints(value) if value is not None and value.opcode == "constant" else None


def _metadata_int(instr: Instruction, key: str) -> int | None:
    """An integer of a kernel's ``kernel_metadata`` (JSON inside an attribute: quotes escaped)."""
    text = instr.attrs.get("frontend_attributes", "")
    found = re.search(rf'\b{key}\\?"\s*:\s*(\d+)', text)
    return int(found.group(1)) if found else None


def _decode(kernel: Kernel, instr: Instruction, ctx: CostContext) -> Cost | None:
    """Paged attention: ``q [batch, q_heads, D]``, ``k_pages, v_pages [kv_heads, pages, page, D]``,
    ``lengths [batch]``, ``page_indices [batch, pages_per_sequence]`` (TPU ``paged_attention``);
    ``q [tokens, q_heads, D]``, ``kv_pages [pages, page, 2·kv_heads, D]``, ``kv_lens [seqs]``,
    ``page_indices [seqs, pages_per_sequence]`` (``ragged_paged_attention``)."""
    floats, ints = _floats(instr), _ints(instr)
    if len(ints) < 2:
        return None
    lengths, table = ints[0], ints[1]
    sequences = lengths.elements
    if not sequences or table.elements % sequences:
        return None
    pages_per_sequence = table.elements // sequences
    if kernel.family == "paged":
        if len(floats) != 3 or len(floats[1].dims) != 4:
            return None
        q, cache = floats[0], floats[1]
        kv_heads, page, d = cache.dims[0], cache.dims[2], cache.dims[3]
        queries = q.elements // d  # batch × query heads
        caches = 2
    else:
        if len(floats) != 2 or len(floats[1].dims) != 4:
            return None
        q, cache = floats
        page, kv_heads, d = cache.dims[1], cache.dims[2] // 2, cache.dims[3]
        queries = q.elements // d  # tokens × query heads
        caches = 1  # K and V interleaved in one array of 2·kv_heads
        kv_heads *= 2
    context = pages_per_sequence * page
    known = None
    if kernel.family == "paged":
        source = _constant_source(_int_operands(instr)[0], ctx)
        known = _int_values(source.origin) if source and source.sliced is None else None
    guessed = known is None or len(known) != sequences
    if not guessed:  # lengths fixed in the program
        positions = sum(min(max(n, 0), context) for n in known)
        how = f"its lengths are constants ({positions} positions in all)"
    else:
        positions = sequences * context
        how = f"every sequence taken as long as its page table allows ({context} positions; upper bound)"
    pairs = queries // sequences * positions
    item = element_bytes(cache)
    # the positions' keys and values (capped by the cache's size), plus everything else once
    cache_bytes = caches * ctx.size(cache)
    read = min(cache_bytes, positions * kv_heads * d * item * caches)
    others = ctx.read_and_written(instr, instr.shape) - cache_bytes
    return Cost(
        flops=4 * d * pairs,
        transcendentals=pairs,
        bytes_accessed=others + read,
        notes=(f"kernel '{kernel.name}': decode attention from its shapes; {how}",),
        upper_bound=guessed,
    )


def _int_operands(instr: Instruction) -> list[Instruction]:
    return [op for op in instr.operands if op.shape.is_array and op.shape.dtype in INDEX_DTYPES]


def _constant_ints(value: Instruction) -> list[int] | None:
    """The integers of a ``constant``, if the text prints them (XLA elides all but small
    constants as ``{...}``)."""
    if value.opcode != "constant" or "..." in value.payload:
        return None
    numbers = [int(n) for n in re.findall(r"-?\d+", value.payload)]
    return numbers if len(numbers) == value.shape.elements else None


def attention_cost(instr: Instruction, target: str, ctx: CostContext) -> Cost | None:
    """The cost of a known attention kernel, or None (not one, or shapes it does not take)."""
    kernel = recognise(instr, target)
    if kernel is None:
        return None
    try:
        return price(kernel, instr, ctx)
    except (ValueError, IndexError, ZeroDivisionError):
        return None
