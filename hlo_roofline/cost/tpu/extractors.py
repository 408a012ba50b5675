"""The report's TPU columns, one extractor per concern (declared in
:data:`hlo_roofline.cost.extractors.EXTRACTORS`): the arrays XLA:TPU keeps in VMEM, the vector
unit's counts, XLA:TPU's own estimate of each op, and its tiling loops.

The VMEM placement and the estimates and tiling read what only a TPU compile writes (``S(1)``
layouts; ``estimated_cycles`` and ``window_config`` in a ``backend_config``): ``places_in_vmem``
and ``has_estimates`` say, once per module, whether a module has any, and a module without them
never calls those extractors.
"""

from __future__ import annotations

from hlo_roofline.cost.base import array_bytes
from hlo_roofline.cost.inplace import sliced_reads
from hlo_roofline.cost.linalg import VMEM_SPACE, fused_operand_words, streamed_operand_words
from hlo_roofline.cost.row import Build, Op
from hlo_roofline.cost.tpu.tiling import (
    epilogue_pass,
    major_reduce_results,
    prologue_elements,
    tile_reread_bytes,
)
from hlo_roofline.cost.tpu.units import (
    lane_reduced_elements,
    major_reduced_elements,
    no_vector_loop,
    root_reduces,
    vector_elements,
)
from hlo_roofline.hlo import attrs
from hlo_roofline.hlo.ir import Computation, Instruction, Module, Shape

UNIT_COLUMNS = (
    "vector_elements", "lane_reduced_elements", "major_reduced_elements", "reduced_stream_words",
)  # fmt: skip
TILING_COLUMNS = ("tile_reread_bytes", "tile_k_steps", "epilogue_elements", "prologue_elements")
_UNREAD = object()  # a memo's "not worked out yet" (None is a value)


def places_in_vmem(module: Module) -> bool:
    """The module may place an array in VMEM (its text has ``S(1)``, or there is no text)."""
    return not module.source_text or "S(1)" in module.source_text


def has_estimates(module: Module) -> bool:
    """XLA:TPU may have written its estimates and tiling loops in the module's configs."""
    return not module.source_text or "estimated_cycles" in module.source_text


# -- memory placement ---------------------------------------------------------------------------
def placement(op: Op, build: Build) -> None:
    """Bytes of an op's operands and results in VMEM (capped by what its rule counts: a slice
    reads less), and the readers of what an HBM→VMEM copy prefetches."""
    instr, count = op.instr, op.count
    in_vmem = build.memo_of(placement, trimmed=False)  # id(shape) -> its bytes in VMEM
    vmem_of, pad = in_vmem.get, build.pad_to_tiles
    vmem = vmem_of(id(instr.shape))
    if vmem is None:
        vmem = _shape_vmem_bytes(instr.shape, in_vmem, pad)
    for operand in instr.operands:
        size = vmem_of(id(operand.shape))
        vmem += _shape_vmem_bytes(operand.shape, in_vmem, pad) if size is None else size
    if vmem:
        read = op.cost.bytes_accessed
        build.rare["vmem_bytes"][op.at] = (read if read < vmem else vmem) * count  # min(), inline
    if op.code == "copy-start":  # (a prefetch's readers are in its computation)
        prefetches = build.memo_of(_prefetch_consumers, trimmed=False)
        readers = prefetches.get(id(instr.computation))
        if readers is None:
            readers = prefetches[id(instr.computation)] = _prefetch_consumers(instr.computation)
        if instr in readers:
            build.rare["prefetch_for"][op.at] = readers[instr]


def _shape_vmem_bytes(shape: Shape, cache: dict[int, int], pad_to_tiles: bool) -> int:
    """Bytes of the shape's leaves that live in VMEM (memory space ``S(1)``), kept in ``cache``
    (one row's shapes are mostly others' too)."""
    size = cache[id(shape)] = sum(
        array_bytes(leaf, pad_to_tiles) for leaf in shape.leaves() if _in_vmem(leaf)
    )
    return size


def _in_vmem(shape: Shape) -> bool:
    return shape.layout is not None and shape.layout.memory_space == VMEM_SPACE


def _prefetch_consumers(comp: Computation) -> dict[Instruction, str]:
    """``copy-start -> the ops that read its copy-done`` (comma-separated), for every async copy
    from HBM into VMEM in ``comp``: such a copy exists only to feed them (XLA's prefetch).
    (Instructions are keys by identity: a set of them is tested against an operand tuple in C.)"""
    dones: dict[Instruction, Instruction] = {}
    for instr in [i for i in comp.instructions if i.opcode == "copy-done"]:
        if not instr.operands:
            continue
        start = instr.operands[0]
        leaves = start.shape.leaves() if start.opcode == "copy-start" else []
        if len(leaves) >= 2 and _in_vmem(leaves[0]) and not _in_vmem(leaves[1]):
            dones[instr] = start
    if not dones:
        return {}
    readers: dict[Instruction, list[str]] = {}
    aliases = dict(dones)  # bitcasts of a prefetched buffer read it too
    read = aliases.keys()
    for instr in comp.instructions:
        operands = instr.operands
        if read.isdisjoint(operands):  # most ops: one look, in C
            continue
        for i, operand in enumerate(operands):
            start = aliases.get(operand)
            if start is None or operand in operands[:i]:  # each operand once
                continue
            if instr.opcode == "bitcast":
                aliases[instr] = start
            else:
                readers.setdefault(start, []).append(instr.name)
    return {start: ",".join(names) for start, names in readers.items()}


# -- the vector unit ----------------------------------------------------------------------------
def vector_units(op: Op, build: Build) -> None:
    """Elements an op's loop passes through the vector unit (:func:`vector_elements`; none for a
    collective's), and those its reduces fold across the lanes or over major dimensions."""
    instr, code, body, count, at, rare = op.instr, op.code, op.body, op.count, op.at, build.rare
    major = 0.0
    if body is not None:
        units = _body_units(op, build)
        major = units[4]
    if op.found is None and _has_vector_loop(instr, code, build.memo_of(no_vector_loop, False)):
        if body is None:
            streamed = streamed_operand_words(instr) if op.geometry is not None else 0.0
            elements = vector_elements(instr, op.cost, op.geometry, False, streamed_words=streamed)
            rare["vector_elements"][at] = elements * count
        else:
            prologue, sliced, streamed, reduced_stream, _ = units
            elements = vector_elements(
                instr, op.cost, op.geometry, "dynamic-update-slice" in body.fused_ops,
                prologue, sliced, streamed,
            )  # fmt: skip
            rare["vector_elements"][at] = elements * count
            if reduced_stream and elements == reduced_stream:
                rare["reduced_stream_words"][at] = elements * count
    if code == "reduce":
        rare["lane_reduced_elements"][at] = lane_reduced_elements(instr) * count
        rare["major_reduced_elements"][at] = major_reduced_elements((instr,)) * count
    elif major:
        rare["major_reduced_elements"][at] = major * count


def _has_vector_loop(instr: Instruction, code: str, memo: dict[str, bool]) -> bool:
    """A loop of the op's runs on the vector unit: by opcode once, a custom call by its target."""
    vector_loop = memo.get(code)
    if vector_loop is None:
        vector_loop = not no_vector_loop(code, instr)
        if code != "custom-call":
            memo[code] = vector_loop
    return vector_loop


def _body_units(op: Op, build: Build) -> tuple[float, dict[int, int], float, float, float]:
    """A fused body's vector work, walked once however many fusions call it: the words of the
    operands a matmul's prologue computes, the operands read only through slices, the words of a
    matmul's wide operand streamed through the registers (those again where the fusion also
    reduces the product: XLA:TPU charges them at a rate of their own on some chips,
    ``calibrated.reduced_stream``), and the elements its reduces fold over major dimensions."""
    memo = build.memo_of(_body_units)
    fusion, body = op.instr, op.body
    units = memo.get(id(fusion.called[0]))
    if units is None:
        geometries = build.walks.geometries
        has_geometry = body.geometry is not None
        streamed = streamed_operand_words(fusion, geometries) if has_geometry else 0.0
        units = memo[id(fusion.called[0])] = (
            fused_operand_words(fusion, geometries) if has_geometry else 0.0,
            {} if has_geometry else sliced_reads(fusion),
            streamed,
            streamed if body.reduces else 0.0,
            major_reduced_elements(
                i for i in fusion.called[0].instructions if i.opcode == "reduce"
            ) if body.reduces else 0.0,
        )  # fmt: skip
    return units


# -- XLA:TPU's estimates and tiling loops --------------------------------------------------------
def estimates(op: Op, build: Build) -> None:
    """XLA:TPU's own estimate of the op (shown beside the roofline, never in it), the steps of the
    tiling loop it compiled the op into, and the results a deeply pipelined reduce writes."""
    if not op.has_estimate:
        return
    instr, config, count, at, rare = op.instr, op.backend_config, op.count, op.at, build.rare
    cycles_of = build.memo_of(estimates)
    cycles = cycles_of.get(config, _UNREAD)  # decoded once per distinct config
    if cycles is _UNREAD:
        cycles = cycles_of[config] = attrs.estimated_cycles(instr)
    if cycles is not None:
        rare["xla_cycles"][at] = cycles * count
    steps_of = build.memo_of(attrs.tile_steps, trimmed=False)
    steps = op.steps = steps_of.get(config)
    if steps is None:
        steps = op.steps = steps_of[config] = attrs.tile_steps(instr)
    if steps:
        rare["tile_steps"][at] = steps * count
    reduces = (instr,) if op.code == "reduce" else root_reduces(instr) if op.body else ()
    if reduces and "buffering_level" in config:  # a reduce's deep pipeline
        results = major_reduce_results(reduces, _decoded(op, build))
        if results:
            rare["major_reduce_results"][at] = results * count


def tiling(op: Op, build: Build) -> None:
    """What a TPU matmul fusion's tiling loop (``op.steps``, from :func:`estimates`) adds: the
    operand tiles it fetches again, its K steps and epilogue, and a computed lhs's prologue."""
    body = op.body
    if not op.steps or op.geometry is None or body is None or body.runs_collective:
        return
    instr, count, at, rare = op.instr, op.count, op.at, build.rare
    geometries, decoded = build.walks.geometries, _decoded(op, build)
    reread = tile_reread_bytes(instr, op.io, geometries, decoded)
    if reread:
        rare["tile_reread_bytes"][at] = reread * count
    k_steps, epilogue = epilogue_pass(instr, geometries, decoded)
    if epilogue:  # a K-split tiling's pass over the result-sized arrays
        rare["tile_k_steps"][at] = k_steps
        rare["epilogue_elements"][at] = epilogue * count
    recomputed = prologue_elements(instr, geometries, decoded)
    if recomputed:  # a computed lhs, once per fetch of its window
        rare["prologue_elements"][at] = recomputed * count


def _decoded(op: Op, build: Build) -> dict:
    """The op's ``backend_config`` decoded, once per distinct text."""
    configs = build.memo_of(_decoded, trimmed=False)
    decoded = configs.get(op.backend_config)
    if decoded is None:
        decoded = configs[op.backend_config] = attrs.backend_config(op.instr)
    return decoded
