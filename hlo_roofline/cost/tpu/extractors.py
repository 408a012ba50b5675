"""The report's TPU columns, one extractor per concern (declared in
:data:`hlo_roofline.cost.extractors.EXTRACTORS`): the arrays XLA:TPU keeps in VMEM, the vector
unit's counts, XLA:TPU's own estimate of each op, and its tiling loops.

The VMEM placement and the estimates and tiling read what only a TPU compile writes (``S(1)``
layouts; ``estimated_cycles`` and ``window_config`` in a ``backend_config``): ``places_in_vmem``
and ``has_estimates`` say, once per module, whether a module has any, and a module without them
never calls those extractors.
"""

from __future__ import annotations

from collections.abc import Callable

from hlo_roofline.cost.base import array_bytes
from hlo_roofline.cost.depthwise import depthwise_taps
from hlo_roofline.cost.inplace import sliced_reads
from hlo_roofline.cost.intermediates import (
    expanded_elements,
    second_pass_elements,
    sublane_fold_results,
)
from hlo_roofline.cost.linalg import fused_operand_words, in_vmem, streamed_operand_words
from hlo_roofline.cost.row import Body, Build, Op, RowExtractor
from hlo_roofline.cost.tpu.tiling import (
    epilogue_pass,
    major_reduce_results,
    prologue_elements,
    tile_reread_bytes,
)
from hlo_roofline.cost.tpu.units import (
    folded_product_elements,
    lane_reduced_elements,
    major_reduced_elements,
    no_vector_loop,
    relaid_tile_elements,
    root_reduces,
    vector_elements,
)
from hlo_roofline.hlo import attrs
from hlo_roofline.hlo.ir import Computation, Instruction, Module, Shape

UNIT_COLUMNS = (
    "vector_elements", "lane_reduced_elements", "major_reduced_elements", "reduced_stream_words",
)  # fmt: skip
TILING_COLUMNS = ("tile_reread_bytes", "tile_k_steps", "epilogue_elements", "prologue_elements")
# the intermediates a fusion's body, a convolution or a relayout makes on the vector unit
INTERMEDIATE_COLUMNS = (
    "depthwise_taps", "expanded_elements", "sublane_fold_results", "second_pass_elements",
    "folded_product_elements", "relaid_elements",
)  # fmt: skip
_UNREAD = object()  # a memo's "not worked out yet" (None is a value)


def places_in_vmem(module: Module) -> bool:
    """The module may place an array in VMEM (its text has ``S(1)``, or there is no text)."""
    return not module.source_text or "S(1)" in module.source_text


def has_estimates(module: Module) -> bool:
    """XLA:TPU may have written its estimates and tiling loops in the module's configs."""
    return not module.source_text or "estimated_cycles" in module.source_text


# -- memory placement ---------------------------------------------------------------------------
def placement(build: Build) -> RowExtractor:
    """Bytes of an op's operands and results in VMEM (capped by what its rule counts: a slice
    reads less), and the readers of what an HBM→VMEM copy prefetches."""
    in_vmem: dict[int, int] = {}  # id(shape) -> its bytes in VMEM
    prefetches: dict[int, dict[Instruction, str]] = {}  # id(computation) -> its prefetches
    vmem_of, pad = in_vmem.get, build.pad_to_tiles
    vmem_at, prefetch_at = build.rare["vmem_bytes"], build.rare["prefetch_for"]

    def row(op: Op) -> None:
        instr = op.instr
        vmem = vmem_of(id(instr.shape))
        if vmem is None:
            vmem = _shape_vmem_bytes(instr.shape, in_vmem, pad)
        for operand in instr.operands:
            size = vmem_of(id(operand.shape))
            vmem += _shape_vmem_bytes(operand.shape, in_vmem, pad) if size is None else size
        if vmem:
            read = op.cost.bytes_accessed
            vmem_at[op.at] = (read if read < vmem else vmem) * op.count  # min(), inline
        if op.code == "copy-start":  # (a prefetch's readers are in its computation)
            readers = prefetches.get(id(instr.computation))
            if readers is None:
                readers = prefetches[id(instr.computation)] = _prefetch_consumers(instr.computation)
            if instr in readers:
                prefetch_at[op.at] = readers[instr]

    return row


def _shape_vmem_bytes(shape: Shape, cache: dict[int, int], pad_to_tiles: bool) -> int:
    """Bytes of the shape's leaves that live in VMEM (memory space ``S(1)``), kept in ``cache``
    (one row's shapes are mostly others' too)."""
    size = cache[id(shape)] = sum(
        array_bytes(leaf, pad_to_tiles) for leaf in shape.leaves() if in_vmem(leaf)
    )
    return size


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
        if len(leaves) >= 2 and in_vmem(leaves[0]) and not in_vmem(leaves[1]):
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
def vector_units(build: Build) -> RowExtractor:
    """Elements an op's loop passes through the vector unit (:func:`vector_elements`; none for a
    collective's), and those its reduces fold across the lanes or over major dimensions."""
    loops: dict[str, bool] = {}  # opcode -> a vector loop of its runs (a custom call's: per target)
    bodies = build.memo()  # id(fused computation) -> _body_units
    geometries = build.walks.geometries
    elements_at, stream_at = build.rare["vector_elements"], build.rare["reduced_stream_words"]
    lane_at, major_at = build.rare["lane_reduced_elements"], build.rare["major_reduced_elements"]

    def row(op: Op) -> None:
        instr, code, body, count, at = op.instr, op.code, op.body, op.count, op.at
        units = None if body is None else _body_units(instr, body, bodies, geometries)
        if op.found is None and _has_vector_loop(instr, code, loops):
            if units is None:
                streamed = streamed_operand_words(instr) if op.geometry is not None else 0.0
                elements = vector_elements(instr, op.cost, op.geometry, False, 0.0, None, streamed)
            else:
                prologue, sliced, streamed, reduced_stream, _ = units
                elements = vector_elements(
                    instr, op.cost, op.geometry, "dynamic-update-slice" in body.fused_ops,
                    prologue, sliced, streamed,
                )  # fmt: skip
                if reduced_stream and elements == reduced_stream:
                    stream_at[at] = elements * count
            elements_at[at] = elements * count
        if code == "reduce":
            lane_at[at] = lane_reduced_elements(instr) * count
            major_at[at] = major_reduced_elements((instr,)) * count
        elif units is not None and units[4]:
            major_at[at] = units[4] * count

    return row


def _has_vector_loop(instr: Instruction, code: str, memo: dict[str, bool]) -> bool:
    """A loop of the op's runs on the vector unit: by opcode once, a custom call by its target."""
    vector_loop = memo.get(code)
    if vector_loop is None:
        vector_loop = not no_vector_loop(code, instr)
        if code != "custom-call":
            memo[code] = vector_loop
    return vector_loop


def _body_units(
    fusion: Instruction, body: Body, memo: dict, geometries: dict
) -> tuple[float, dict[int, int], float, float, float]:
    """A fused body's vector work, walked once however many fusions call it (``memo``): the words
    of the operands a matmul's prologue computes, the operands read only through slices, the words
    of a matmul's wide operand streamed through the registers (those again where the fusion also
    reduces the product: XLA:TPU charges them at a rate of their own on some chips,
    ``calibrated.reduced_stream``), and the elements its reduces fold over major dimensions."""
    units = memo.get(id(fusion.called[0]))
    if units is None:
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


def intermediates(build: Build) -> RowExtractor:
    """A depthwise convolution's multiply-adds on the vector unit (:func:`depthwise_taps`, a
    fusion's once per body), the elements of an array a fusion expands and folds
    (:func:`expanded_elements`) and of those the results it folds a column strip at a time (its
    call's own tiling: :func:`sublane_fold_results`), a row a fusion folds with a
    ``reduce-window`` and then uses again (:func:`second_pass_elements`), a matmul's product its
    fusion folds (:func:`folded_product_elements`) and the tiles a copy that moves its lanes
    reads and writes in HBM (:func:`relaid_tile_elements`)."""
    bodies = build.memo()  # id(fused computation) -> (taps, expanded elements, folded product)
    taps_at, expanded_at = build.rare["depthwise_taps"], build.rare["expanded_elements"]
    folds_at, again_at = build.rare["sublane_fold_results"], build.rare["second_pass_elements"]
    product_at, relaid_at = build.rare["folded_product_elements"], build.rare["relaid_elements"]

    def row(op: Op) -> None:
        instr, expanded = op.instr, 0.0
        if op.body is not None:
            found = bodies.get(id(instr.called[0]))
            if found is None:
                fused = instr.called[0].instructions
                taps = (
                    depthwise_taps(fused) if any(i.opcode == "convolution" for i in fused) else 0.0
                )
                found = bodies[id(instr.called[0])] = (
                    taps,
                    expanded_elements(instr) if root_reduces(instr) else 0.0,
                    0.0 if taps else folded_product_elements(instr),
                )
            taps, expanded, product = found
            if product:  # a matmul's product folded in its own fusion
                product_at[op.at] = product * op.count
        else:
            taps = depthwise_taps((instr,)) if op.code == "convolution" else 0.0
            if op.code == "copy" and (relaid := relaid_tile_elements(instr)):
                relaid_at[op.at] = relaid * op.count
        if taps:
            taps_at[op.at] = taps * op.count
        if expanded:  # an array the fusion expands and folds
            expanded_at[op.at] = expanded * op.count
            # ... folded over its sublanes one lane tile at a time (this call's own tiling)
            if folds := sublane_fold_results(instr):
                folds_at[op.at] = folds * op.count
        if (  # a row folded, then used again
            op.body is not None
            and "reduce-window" in op.body.fused_ops
            and (again := second_pass_elements(instr))
        ):
            again_at[op.at] = again * op.count

    return row


# -- XLA:TPU's estimates and tiling loops --------------------------------------------------------
def estimates(build: Build) -> RowExtractor:
    """XLA:TPU's own estimate of the op (shown beside the roofline, never in it), the steps of the
    tiling loop it compiled the op into (``op.steps``, for :func:`tiling`), and the results a
    deeply pipelined reduce writes."""
    cycles_of = build.memo()  # backend_config -> XLA:TPU's estimated cycles
    steps_of: dict[str, int] = {}  # backend_config -> steps of its tiling loop
    returned = build.memo()  # id(fused body) -> the reduces it returns
    decoded = _decoder(build)
    cycles_at, steps_at = build.rare["xla_cycles"], build.rare["tile_steps"]
    results_at = build.rare["major_reduce_results"]

    def row(op: Op) -> None:
        if not op.has_estimate:
            return
        instr, config, count, at = op.instr, op.backend_config, op.count, op.at
        cycles = cycles_of.get(config, _UNREAD)  # decoded once per distinct config
        if cycles is _UNREAD:
            cycles = cycles_of[config] = attrs.estimated_cycles(instr)
        if cycles is not None:
            cycles_at[at] = cycles * count
        steps = steps_of.get(config)
        if steps is None:
            steps = steps_of[config] = attrs.tile_steps(instr)
        op.steps = steps
        if steps:
            steps_at[at] = steps * count
        if op.code == "reduce":
            reduces = (instr,)
        elif op.body is not None:
            reduces = returned.get(id(instr.called[0]))
            if reduces is None:
                reduces = returned[id(instr.called[0])] = root_reduces(instr)
        else:
            reduces = ()
        if reduces and "buffering_level" in config:  # a reduce's deep pipeline
            results = major_reduce_results(reduces, decoded(op))
            if results:
                results_at[at] = results * count

    return row


def tiling(build: Build) -> RowExtractor:
    """What a TPU matmul fusion's tiling loop (``op.steps``, from :func:`estimates`) adds: the
    operand tiles it fetches again, its K steps and epilogue, and a computed lhs's prologue."""
    geometries, decoded = build.walks.geometries, _decoder(build)
    reread_at, k_steps_at = build.rare["tile_reread_bytes"], build.rare["tile_k_steps"]
    epilogue_at, prologue_at = build.rare["epilogue_elements"], build.rare["prologue_elements"]

    def row(op: Op) -> None:
        body = op.body
        if not op.steps or op.geometry is None or body is None or body.runs_collective:
            return
        instr, count, at, config = op.instr, op.count, op.at, decoded(op)
        reread = tile_reread_bytes(instr, op.io, geometries, config)
        if reread:
            reread_at[at] = reread * count
        k_steps, epilogue = epilogue_pass(instr, geometries, config)
        if epilogue:  # a K-split tiling's pass over the result-sized arrays
            k_steps_at[at] = k_steps
            epilogue_at[at] = epilogue * count
        recomputed = prologue_elements(instr, geometries, config)
        if recomputed:  # a computed lhs, once per fetch of its window
            prologue_at[at] = recomputed * count

    return row


def _decoder(build: Build) -> Callable[[Op], dict]:
    """An op's ``backend_config`` decoded, once per distinct text for the table's extractors."""
    configs = build.memo_of(_decoder, trimmed=False)

    def decoded(op: Op) -> dict:
        config = configs.get(op.backend_config)
        if config is None:
            config = configs[op.backend_config] = attrs.backend_config(op.instr)
        return config

    return decoded
