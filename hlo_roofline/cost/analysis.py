"""Walk a module and price every executed op: one row per non-container instruction.

Containers (while, call, and conditional where the model's ``open_conditionals`` hook says so) are
opened and their bodies walked with an execution count; everything else, fusions included, is one
row whose cost comes from the rule registered for its opcode.
"""

from __future__ import annotations

import collections
import itertools
import math
import operator
from collections.abc import Generator, Iterable, Iterator, Sequence
from typing import NamedTuple

import numpy as np

from hlo_roofline import schema
from hlo_roofline.cost import custom_call
from hlo_roofline.cost.base import (
    BOOKKEEPING,
    COST_MODELS,
    COSTS_KEPT,
    RULE_ERRORS,
    ZERO,
    Cost,
    CostContext,
    array_bytes,
    callee,
    element_bytes,
)
from hlo_roofline.cost.collectives import (
    COLLECTIVES,
    MAY_HOLD_ONE,
    WRAPPERS,
    async_start_of,
    find_collective,
    group_text,
    kind,
)
from hlo_roofline.cost.control_flow import (
    CONTAINERS,
    branches,
    heaviest_branch,
    loop_multipliers,
    loop_paths,
)
from hlo_roofline.cost.depthwise import depthwise_taps
from hlo_roofline.cost.inplace import sliced_reads
from hlo_roofline.cost.intermediates import (
    expanded_elements,
    second_pass_elements,
    sublane_fold_results,
)
from hlo_roofline.cost.linalg import (
    MATMUL_OPCODES,
    VMEM_SPACE,
    MatmulIO,
    fused_operand_words,
    matmul_geometry,
    matmul_io,
    streamed_operand_words,
)
from hlo_roofline.cost.tpu_units import (
    epilogue_pass,
    lane_reduced_elements,
    major_reduce_results,
    major_reduced_elements,
    no_vector_loop,
    prologue_elements,
    root_reduces,
    tile_reread_bytes,
    vector_elements,
)
from hlo_roofline.hlo import attrs
from hlo_roofline.hlo.attribution import metadata_columns as _attribution  # rows' attribution
from hlo_roofline.hlo.ir import Computation, Instruction, Module, Shape

_RULE_ERRORS = RULE_ERRORS
ROW_COLUMNS = schema.COST_COLUMNS  # the columns rows() builds, each by its name
_NOT_LISTED = frozenset({"parameter", "get-tuple-element", "tuple", "bitcast", "constant"})
_MATMULS = MATMUL_OPCODES
_MATMULS_SET = frozenset(_MATMULS)
_WITH_GEOMETRY = frozenset({*_MATMULS, "fusion", "custom-call"})


_ROWS_PER_CHUNK = 4096
# How many entries each of the rows' memos (by attribute or metadata text, by fused body) may hold
# between chunks; past that it starts again. GPT-2's step has 743 distinct attribute texts.
_MEMO_KEPT = 2048
_FLOAT_COLUMNS = schema.names("cost", "float")
# Columns kept as NumPy values (8 bytes a number, 1 a flag) rather than Python objects.
_ARRAY_COLUMNS = {
    **dict.fromkeys(_FLOAT_COLUMNS, np.float64),
    **dict.fromkeys(schema.names("cost", "int"), np.int64),
    **dict.fromkeys(schema.names("cost", "bool"), np.bool_),
}
_GEOMETRY_COLUMNS = (
    "mm_batch", "mm_m", "mm_n", "mm_k", "mm_lhs_bytes", "mm_rhs_bytes", "mm_out_bytes", "mm_split_k",
)  # a matmul's (batch, M, N, K) and its MatmulIO, in their order  # fmt: skip
# Columns most rows leave at these values (an op that is no matmul, collective, fusion, ...): a row
# gives one only where it has its own, and each chunk starts from these.
_RARE_DEFAULTS = {
    **dict.fromkeys(("fusion_kind", "precision", "note", "fused_ops", "collective"), ""),
    **dict.fromkeys(("replica_group", "waits_for", "prefetch_for", "offload"), ""),
    **dict.fromkeys(("group_size", "mm_batch", "mm_m", "mm_n", "mm_k", "mm_split_k"), 0),
    **dict.fromkeys(("mm_lhs_bytes", "mm_rhs_bytes", "mm_out_bytes"), 0.0),
    **dict.fromkeys(
        ("vector_elements", "lane_reduced_elements", "major_reduced_elements",
         "major_reduce_results", "reduced_stream_words", "kernel_mxu_flops", "depthwise_taps",
         "expanded_elements", "sublane_fold_results", "second_pass_elements"),
        0.0,
    ),
    "xla_cycles": math.nan,
    "tile_steps": 0.0,
    "tile_reread_bytes": 0.0,
    "tile_k_steps": 0.0,
    "epilogue_elements": 0.0,
    "prologue_elements": 0.0,
}
_UNREAD = object()  # a memo's "not worked out yet" (None is a value)


class PricedOp(NamedTuple):
    """One executed instruction, its execution count per step and its cost per execution.

    A named tuple (immutable, like the frozen dataclass it replaced, and cheaper to build: there is
    one per row).
    """

    instr: Instruction
    count: float
    cost: Cost


_priced_op = tuple.__new__  # PricedOp(...) without its keyword-handling constructor (one per row)


def price(instr: Instruction, ctx: CostContext) -> Cost:
    """The rule's cost, or a flagged unknown cost if the rule cannot make sense of the op."""
    try:
        cost = ctx.cost(instr)
        if cost is ZERO:  # names, views, an async pair's done half: nothing to check
            return cost
        # Sums and reports use floats: a cost past their range (absurd windows, trip counts) is
        # flagged here rather than overflowing later.
        values = (
            float(cost.flops), float(cost.transcendentals), float(cost.bytes_accessed),
            float(cost.comm_bytes),
        )  # fmt: skip
        if min(values) < 0:  # e.g. a reduce whose result has more elements than its input
            return Cost(unknown=True, notes=(f"{instr.opcode}: its shapes and attributes "
                                             "disagree (a cost came out negative)",))  # fmt: skip
        return cost
    except RecursionError:
        return Cost(unknown=True, notes=("computation nesting too deep to price",))
    except _RULE_ERRORS as exc:
        return Cost(unknown=True, notes=(f"could not price {instr.opcode}: {exc!r}",))


def walk(
    module: Module, cost_model: str = "roofline", pad_to_tiles: bool = False
) -> list[PricedOp]:
    """Every executed op of the module's entry, with nested bodies opened."""
    return list(priced(module, cost_model, pad_to_tiles))


def priced(
    module: Module, cost_model: str = "roofline", pad_to_tiles: bool = False
) -> Iterator[PricedOp]:
    """:func:`walk`'s ops one at a time, each priced as it is asked for: a consumer that keeps
    only what it makes of them (:func:`rows`, :func:`tallied`) never holds them all."""
    if cost_model not in COST_MODELS:
        raise ValueError(f"cost_model must be one of {COST_MODELS}, not {cost_model!r}")
    walker = _Walk(CostContext(module, cost_model, pad_to_tiles))
    return walker.visit(module.entry, 1, None, False, 0)


class _Walk:
    """The state of one :func:`walk`: the context and the computations opened so far.

    Methods rather than nested functions: two closures calling each other form a reference cycle,
    which would keep the context (and its caches) alive until the next garbage collection.
    """

    __slots__ = ("ctx", "opened")

    def __init__(self, ctx: CostContext) -> None:
        self.ctx = ctx
        self.opened: set[int] = set()  # ids of the computations walked so far

    def visit(
        self, comp: Computation, count: float, note: str | None, short: bool, depth: int
    ) -> Generator[PricedOp, None, None]:
        """Price ``comp``'s ops ``count`` times each; ``note`` and ``short`` (the count is a lower
        bound) come from the loops and branches around them."""
        ctx = self.ctx
        costs = ctx._computation_costs
        for instr in comp.instructions:
            if instr.opcode in CONTAINERS and depth < 64:
                opened = yield from self.open(instr, count, note, short, depth)
                if opened:
                    continue
            cost = price(instr, ctx)
            if note:
                cost = cost.with_note(note)
            if short:
                cost = cost.replace(lower_bound=True)
            yield _priced_op(PricedOp, (instr, count, cost))
            if len(costs) > COSTS_KEPT:  # (between two ops: what the rules remember can go)
                ctx.trim()

    def open(
        self, instr: Instruction, count: float, note: str | None, short: bool, depth: int
    ) -> Generator[PricedOp, None, bool]:
        """Walk a container's bodies instead of pricing it; False if it is not one (or is broken).

        XLA's optimized modules give every body one caller (its call graph is flattened); a body
        called from several places is opened once and priced as one row at the others, so that
        the rows stay as many as the text's instructions (not one per path through the calls).
        A generator of the bodies' ops, which returns whether it opened the container."""
        ctx = self.ctx
        if instr.opcode == "conditional" and not ctx.cost_model.open_conditionals:
            return False  # priced as one row by its rule (XLA's: its branches' maximum)
        if any(id(comp) in self.opened for comp in instr.called):
            return False
        self.opened.update(id(comp) for comp in instr.called)
        try:
            if instr.opcode == "while":
                loop = loop_multipliers(instr, ctx)
                if not math.isfinite(count * loop.body * loop.condition):
                    raise OverflowError("execution count out of range")
                inner_note, inner_short = loop.note or note, loop.lower_bound or short
                for comp, times in (("body", loop.body), ("condition", loop.condition)):
                    yield from self.visit(
                        callee(instr, ctx, comp), count * times, inner_note, inner_short, depth + 1
                    )
                return True
            if instr.opcode == "call":
                yield from self.visit(callee(instr, ctx, "to_apply"), count, note, short, depth + 1)
                return True
            if instr.opcode == "conditional":
                taken = heaviest_branch(instr, ctx)
                for i, comp in enumerate(branches(instr, ctx)):
                    branch_note = (
                        None
                        if i == taken
                        else f"branch {i} not counted (branch {taken} does the most work)"
                    )
                    yield from self.visit(
                        comp, count if i == taken else 0, branch_note or note, short, depth + 1
                    )
                return True
        except _RULE_ERRORS:
            return False  # priced as one flagged row instead
        return False


def rows(
    module: Module,
    ops: Iterable[PricedOp],
    pad_to_tiles: bool = False,
    user_packages: Sequence[str] = (),
    *,
    consume: bool = False,
) -> dict[str, np.ndarray]:
    """Report columns (one NumPy array each, text as objects): identity, metadata and per-step
    totals (cost × count).

    ``user_packages`` (names or directories) are the user's code in ``user_source`` and
    ``layer_caller`` even where installed (see :func:`attribution.is_library`).

    Most ops share their shape, metadata, fusion config or fused computation with others, so each
    of those is decoded once (the dicts below) rather than once per row. Each row's value of a
    column is appended by the column's schema name (``put["dtype"](...)``), never by its place in
    the schema; the columns a row's priced op, shape and attribution alone give are made by name
    for a chunk of rows at once (:func:`_op_columns`), and a rare column's value given only where
    a row has one. Every few thousand rows the values move into the columns' arrays, made at full
    length at the start (8 bytes a number rather than a Python float, and no second copy made by
    joining pieces), so they never all exist as objects at once. With ``consume`` the priced ops
    are released (``ops`` holds ``None``) as their rows are made: a large module's ops need not
    outlive their rows. ``ops`` may also be a stream (:func:`priced`): then no more than a chunk
    of them exists at once, and the arrays are made as long as the rows can be (the instructions
    of the computations a walk can open) and cut to the rows made.
    """
    columns: dict[str, list] = {
        name: [] for name in ROW_COLUMNS if name not in _OP_COLUMNS and name not in _RARE_DEFAULTS
    }
    put = {name: column.append for name, column in columns.items()}  # a builder per column
    # the columns most rows leave at their default: row (in its chunk) -> value, where not
    rare: dict[str, dict[int, object]] = {name: {} for name in _RARE_DEFAULTS}
    no_loop: dict[str, bool] = {}  # opcode -> a vector loop of its runs (tpu_units.no_vector_loop)
    listed = isinstance(ops, Sequence)
    table = _Table(len(ops) if listed else _most_rows(module))
    released = ops if consume and isinstance(ops, list) else None
    shapes: dict[int, tuple[str, str]] = {}  # id(shape) -> (its text, dtype of its first leaf)
    # metadata text -> (op_name, source, user_source, call_stack, layer_caller)
    metadata: dict[str, tuple[str, str, str, str, str]] = {}
    stacks: dict[tuple[str, int, int], tuple[str, str, str, str]] = {}  # see _attribution
    callers: dict[tuple[str, int, int, str], str] = {}  # see _attribution
    user_packages = tuple(user_packages)
    # attribute text -> (attribution, kind, backend_config, whether that holds XLA's estimate):
    # many rows share one text (a TPU module of 17k instructions has 750 distinct ones), so each
    # is split once
    attributes_read: dict[str, tuple[tuple[str, str, str, str, str], str, str, bool]] = {}
    fusion_kinds: dict[tuple[str, str], str] = {}  # (kind, backend_config) -> fusion_kind
    estimates: dict[str, float | None] = {}  # backend_config -> XLA:TPU's estimated cycles
    configs: dict[str, dict] = {}  # backend_config -> decoded (a matmul's tiling loop's rereads)
    tile_steps: dict[str, int] = {}  # backend_config -> steps of its tiling loop
    bodies: dict[int, _Body] = {}  # id(fused computation) -> what its fusions' rows say
    own_collective: dict[str, bool] = {}  # opcode -> the op is itself a collective (or its start)
    in_vmem: dict[int, int] = {}  # id(shape) -> bytes of its leaves placed in VMEM
    vmem_of = in_vmem.get
    walks = _Walks()  # what nested bodies hold, shared by every row that looks into them
    groups: dict[int, tuple[str, str]] = {}  # id(collective) -> (kind, devices it talks to)
    in_flight: frozenset[str] | None = None  # channels of TPU async collectives (found once)
    # Only TPU modules place arrays in VMEM; the others skip the per-row look at their layouts.
    vmem_layouts = not module.source_text or "S(1)" in module.source_text
    prefetches: dict[int, dict[Instruction, str]] = {}  # id(computation) -> its prefetches
    loops = loop_paths(module)  # id(computation) -> the while loops it runs in
    in_chunk = 0  # rows in this chunk
    # each row's (shape text, dtype) and attribution, for the columns made of them per chunk
    shapes_in_chunk: list[tuple[str, str]] = []
    metas_in_chunk: list[tuple[str, str, str, str, str]] = []
    # the rare columns, by name, bound once (a row gives a value with one store)
    fusion_kinds_at, fused_ops_at, precision_at = (
        rare["fusion_kind"],
        rare["fused_ops"],
        rare["precision"],
    )
    collective_at, replica_group_at, group_size_at = (
        rare["collective"],
        rare["replica_group"],
        rare["group_size"],
    )
    waits_for_at, xla_cycles_at, note_at = rare["waits_for"], rare["xla_cycles"], rare["note"]
    vector_elements_at = rare["vector_elements"]
    put_vmem, put_dtype = put["vmem_bytes"], put["dtype"]
    append_shape, append_meta = shapes_in_chunk.append, metas_in_chunk.append
    memos = (attributes_read, metadata, stacks, callers, bodies, fusion_kinds, estimates, groups)
    memos += (walks.collectives, walks.geometries)
    # the ops a chunk at a time (a stream's walk prices a chunk, then its rows are made: each
    # keeps its working set; one op at a time, the two would take turns with theirs)
    chunk: list[PricedOp] = []  # this chunk's ops
    append_op = chunk.append
    for op in _by_chunks(ops):  # (consume: a chunk of rows made, its ops become None)
        append_op(op)
        instr, count, cost = op
        code = instr.opcode
        text = instr.attr_text
        read = attributes_read.get(text) if text is not None else None
        if read is None:  # split here, not kept by the instruction: one read of many rows
            split = instr.peek_attrs()
            meta_text = split.get("metadata", "")
            meta = metadata.get(meta_text)
            if meta is None:
                meta = metadata[meta_text] = _attribution(
                    attrs.parse_metadata(meta_text), module, stacks, callers, user_packages
                )
            config = split.get("backend_config", "")
            read = (meta, split.get("kind", ""), config, "estimated_cycles" in config)
            if text is not None:
                attributes_read[text] = read
        meta, kind_attr, backend_config, has_estimate = read
        described = shapes.get(id(instr.shape))
        if described is None:
            leaves = instr.shape.leaves()
            first = leaves[0].dtype if leaves else instr.shape.dtype
            described = shapes[id(instr.shape)] = (str(instr.shape), first)
        dtype = described[1]
        found = geometry = io = None
        body = None
        at = in_chunk  # the row's place in its chunk: where a rare column's value goes
        if code == "fusion":
            config_key = (kind_attr, backend_config)
            kind = fusion_kinds.get(config_key)
            if kind is None:
                kind = fusion_kinds[config_key] = attrs.fusion_kind(instr)
            fusion_kinds_at[at] = kind
            if instr.called:
                body = bodies.get(id(instr.called[0]))
                if body is None:
                    if in_flight is None:
                        in_flight = attrs.in_flight_channels(module)
                    body = bodies[id(instr.called[0])] = _Body(instr, walks, in_flight)
                found, geometry, io = body.collective, body.geometry, body.io
                fused_ops_at[at] = body.fused_ops
                dtype = body.matmul_dtype or dtype
                precision_at[at] = body.matmul_precision
        else:
            if code in _MATMULS and instr.operands:
                dtype = instr.operands[0].shape.dtype
            own = own_collective.get(code)
            if own is None:
                own = own_collective[code] = (
                    not code.endswith("-done") and code.removesuffix("-start") in COLLECTIVES
                )
            if own:
                found = instr
            elif code in WRAPPERS:
                found = walks.collective(instr)
                if code != "fusion" and custom_call.on_sparsecore(instr):
                    rare["offload"][at] = custom_call.SPARSECORE
            if code in _WITH_GEOMETRY:
                geometry = walks.geometry(instr)
                if geometry:
                    precision_at[at] = _precision(instr)
                    io = walks.io(instr)
                    if code == "custom-call":  # a library gemm runs in its inputs' type (fp8 in,
                        dtype = instr.operands[0].shape.dtype  # bf16 out: the fp8 rate)
        if geometry is not None:
            if io is None:  # a matmul whose arrays cannot be traced: its own types
                io = MatmulIO(*(element_bytes(s) for s in _first_two(instr)), 1)
            for name, value in zip(_GEOMETRY_COLUMNS, (*geometry, *io), strict=True):
                rare[name][at] = value
        if found is not None:
            known = groups.get(id(found))
            if known is None:
                known = groups[id(found)] = (_kind(found, module), _group_text(found, module))
            collective_at[at], replica_group_at[at] = known
            group_size_at[at] = _group_size(found, module)
        if (body is not None and body.async_done) or code.endswith("-done"):
            start = _async_start(instr)
            if start is not None:
                waits_for_at[at] = start.name
        vmem = 0
        if vmem_layouts:  # bytes of its operands and results in VMEM (each shape's worked out once)
            vmem = vmem_of(id(instr.shape))
            if vmem is None:
                vmem = _shape_vmem_bytes(instr.shape, in_vmem, pad_to_tiles)
            for op in instr.operands:
                size = vmem_of(id(op.shape))
                vmem += _shape_vmem_bytes(op.shape, in_vmem, pad_to_tiles) if size is None else size
        if has_estimate:  # decoded once per distinct config
            # XLA:TPU's own estimate of the op, shown beside the roofline (never in it)
            cycles = estimates.get(backend_config, _UNREAD)
            if cycles is _UNREAD:
                cycles = estimates[backend_config] = attrs.estimated_cycles(instr)
            if cycles is not None:
                xla_cycles_at[at] = cycles * count
            steps = tile_steps.get(backend_config)  # the tiling loop XLA:TPU compiled it into
            if steps is None:
                steps = tile_steps[backend_config] = attrs.tile_steps(instr)
            reduces = (instr,) if code == "reduce" else body.root_reduces if body else ()
            if reduces and "buffering_level" in backend_config:  # a reduce's deep pipeline
                decoded = configs.get(backend_config)
                if decoded is None:
                    decoded = configs[backend_config] = attrs.backend_config(instr)
                results = major_reduce_results(reduces, decoded)
                if results:
                    rare["major_reduce_results"][at] = results * count
            if steps:
                rare["tile_steps"][at] = steps * count
                if geometry is not None and body is not None and not body.runs_collective:
                    decoded = configs.get(backend_config)
                    if decoded is None:
                        decoded = configs[backend_config] = attrs.backend_config(instr)
                    reread = tile_reread_bytes(instr, io, walks.geometries, decoded)  # rereads
                    if reread:
                        rare["tile_reread_bytes"][at] = reread * count
                    k_steps, epilogue = epilogue_pass(instr, walks.geometries, decoded)
                    if epilogue:  # a K-split tiling's pass over the result-sized arrays
                        rare["tile_k_steps"][at] = k_steps
                        rare["epilogue_elements"][at] = epilogue * count
                    recomputed = prologue_elements(instr, walks.geometries, decoded)
                    if recomputed:  # a computed lhs, once per fetch of its window
                        rare["prologue_elements"][at] = recomputed * count
        if vmem:  # a boundary array in VMEM; capped by what the rule counts (a slice reads less)
            vmem = cost.bytes_accessed if cost.bytes_accessed < vmem else vmem  # min(), inline
        put_vmem(vmem * count)
        put_dtype(dtype)
        append_shape(described)
        append_meta(meta)
        if cost.notes:
            note_at[at] = "; ".join(cost.notes)
        if code == "copy-start" and vmem_layouts:  # (a prefetch's readers are in its computation)
            readers = prefetches.get(id(instr.computation))
            if readers is None:
                readers = prefetches[id(instr.computation)] = _prefetch_consumers(instr.computation)
            if instr in readers:
                rare["prefetch_for"][at] = readers[instr]
        if found is None:
            vector_loop = no_loop.get(code)
            if vector_loop is None:  # per opcode, except a custom call's (by its target)
                vector_loop = not no_vector_loop(code, instr)
                if code != "custom-call":
                    no_loop[code] = vector_loop
            if vector_loop and body is None:
                streamed = streamed_operand_words(instr) if geometry is not None else 0.0
                elements = vector_elements(instr, cost, geometry, False, streamed_words=streamed)
                vector_elements_at[at] = elements * count
            elif vector_loop:
                elements = vector_elements(
                    instr, cost, geometry, "dynamic-update-slice" in body.fused_ops,
                    body.prologue_words, body.sliced, body.streamed_words,
                )  # fmt: skip
                vector_elements_at[at] = elements * count
                if body.reduced_stream_words and elements == body.reduced_stream_words:
                    rare["reduced_stream_words"][at] = elements * count
        if code == "reduce":
            rare["lane_reduced_elements"][at] = lane_reduced_elements(instr) * count
            rare["major_reduced_elements"][at] = major_reduced_elements((instr,)) * count
        elif body is not None and body.major_reduced:
            rare["major_reduced_elements"][at] = body.major_reduced * count
        if cost.mxu_flops:
            rare["kernel_mxu_flops"][at] = cost.mxu_flops * count
        taps = body.depthwise_taps if body is not None else (
            depthwise_taps((instr,)) if code == "convolution" else 0.0
        )  # a depthwise conv's multiply-adds on the vector unit (cost/depthwise.py)
        if taps:
            rare["depthwise_taps"][at] = taps * count
        if body is not None and body.expanded:  # an array the fusion expands and folds
            rare["expanded_elements"][at] = body.expanded * count
            # ... folded over its sublanes one lane tile at a time (this call's own tiling)
            if folds := sublane_fold_results(instr):
                rare["sublane_fold_results"][at] = folds * count
        if (  # a row folded, then used again
            body is not None
            and "reduce-window" in body.fused_ops
            and (again := second_pass_elements(instr))
        ):
            rare["second_pass_elements"][at] = again * count
        in_chunk += 1
        if in_chunk == _ROWS_PER_CHUNK:
            table.take(columns, rare, chunk, shapes_in_chunk, metas_in_chunk, loops, released)
            in_chunk = 0
            for memo in memos:
                if len(memo) > _MEMO_KEPT:  # mostly texts seen once: a large module's would
                    memo.clear()  # hold a copy of half its attribute text until the table is made
    table.take(columns, rare, chunk, shapes_in_chunk, metas_in_chunk, loops, released)
    return table.cut()


def _by_chunks(ops: Iterable[PricedOp]) -> Iterator[PricedOp]:
    """``ops`` one at a time, read from their source a chunk at a time (in C)."""
    stream = iter(ops)
    chunks = iter(lambda: list(itertools.islice(stream, _ROWS_PER_CHUNK)), [])
    return itertools.chain.from_iterable(chunks)


def _most_rows(module: Module) -> int:
    """As many rows as a walk can make: the instructions of the computations it can open (every
    computation but the fused ones, each opened once)."""
    computations = module.computations.values()
    return sum(len(comp.instructions) for comp in computations if not comp.is_fusion)


def _in_vmem(shape) -> bool:
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
        for i, op in enumerate(operands):
            start = aliases.get(op)
            if start is None or op in operands[:i]:  # each operand once
                continue
            if instr.opcode == "bitcast":
                aliases[instr] = start
            else:
                readers.setdefault(start, []).append(instr.name)
    return {start: ",".join(names) for start, names in readers.items()}


def _shape_vmem_bytes(shape: Shape, cache: dict[int, int], pad_to_tiles: bool) -> int:
    """Bytes of the shape's leaves that live in VMEM (memory space ``S(1)``), kept in ``cache``
    (one row's shapes are mostly others' too)."""
    size = cache[id(shape)] = sum(
        array_bytes(leaf, pad_to_tiles)
        for leaf in shape.leaves()
        if leaf.layout is not None and leaf.layout.memory_space == VMEM_SPACE
    )
    return size


class _Table:
    """The report's columns at full length (a rare column's filled with its default), filled a
    chunk of rows at a time."""

    __slots__ = ("columns", "done")

    def __init__(self, rows: int) -> None:
        self.done = 0
        self.columns: dict[str, np.ndarray] = {
            name: np.full(rows, _RARE_DEFAULTS.get(name, 0), _ARRAY_COLUMNS.get(name, object))
            for name in ROW_COLUMNS
        }

    def take(
        self,
        values: dict[str, list],
        rare: dict[str, dict[int, object]],
        ops: list,
        shapes: list[tuple[str, str]],
        metas: list[tuple[str, str, str, str, str]],
        loops: dict[int, str],
        released: list | None,
    ) -> None:
        """Move a chunk of rows into the arrays: the columns the row builders made (``values``,
        one list per column, emptied: the builders keep their ``append``), the rare values
        rows gave (``rare``: row in the chunk -> value, emptied), and the columns of the chunk's
        priced ops (``ops``, emptied), shapes and attributions (:func:`_op_columns`). Every
        builder's column must have been given every row. ``released``: the list of all the ops,
        whose chunk becomes None."""
        rows = len(shapes)
        start, end = self.done, self.done + rows
        short = [name for name, column in values.items() if len(column) != rows]
        if short:
            raise AssertionError(f"rows() left out columns {short}: give every row a value of each")
        if end > len(self.columns["name"]):
            self._grow(max(end, 2 * len(self.columns["name"])))
        made = _op_columns(ops, shapes, metas, loops)
        ops.clear()
        shapes.clear()
        metas.clear()
        for name, column in itertools.chain(values.items(), made.items()):
            self._put(name, slice(start, end), column)
            if name in values:
                column.clear()
        for name, given in rare.items():
            if given:
                self._put(name, [start + row for row in given], list(given.values()))
                given.clear()
        if released is not None:
            released[start:end] = itertools.repeat(None, rows)
        self.done = end

    def _grow(self, rows: int) -> None:
        """Longer arrays (a stream with more ops than its module's bound: hostile text)."""
        for name, array in self.columns.items():
            longer = np.full(rows, _RARE_DEFAULTS.get(name, 0), array.dtype)
            longer[: len(array)] = array
            self.columns[name] = longer

    def cut(self) -> dict[str, np.ndarray]:
        """The columns, cut to the rows made (in place: the arrays keep their memory's start)."""
        for array in self.columns.values():
            if len(array) > self.done:
                array.resize(self.done, refcheck=False)  # nothing else refers to it
        return self.columns

    def _put(self, name: str, where, column: list) -> None:
        array = self.columns[name]
        try:
            array[where] = column
        except (OverflowError, ValueError, TypeError):  # past int64 (hostile text), or not a
            array = self.columns[name] = array.astype(object)  # number: kept as they are
            array[where] = column


def _op_columns(
    ops: list[PricedOp],
    shapes: list[tuple[str, str]],
    metas: list[tuple[str, str, str, str, str]],
    loops: dict[int, str],
) -> dict[str, list]:
    """The columns, by name, of rows that are what their priced ops, their shapes (text, dtype)
    and their attributions (:func:`_attribution`) say, per step (cost × count). Made with ``map``
    over C getters: no Python step per value."""
    instrs = list(map(_first, ops))
    counts = list(map(_second, ops))
    costs = list(map(_third, ops))
    computations = list(map(_computation, instrs))

    def per_step(quantity: str) -> list:
        return list(map(operator.mul, map(_cost_field(quantity), costs), counts))

    return {
        "name": list(map(_name, instrs)),
        "opcode": list(map(_opcode, instrs)),
        "computation": list(map(_name, computations)),
        "count": list(map(float, counts)),
        "flops": per_step("flops"),
        "transcendentals": per_step("transcendentals"),
        "bytes_accessed": per_step("bytes_accessed"),
        "comm_bytes": per_step("comm_bytes"),
        "unknown": list(map(_cost_field("unknown"), costs)),
        "lower_bound": list(map(_cost_field("lower_bound"), costs)),
        "upper_bound": list(map(_cost_field("upper_bound"), costs)),
        "loop": list(map(loops.get, map(id, computations), itertools.repeat(""))),
        "shape": list(map(_first, shapes)),
        "op_name": list(map(_first, metas)),
        "source": list(map(_second, metas)),
        "user_source": list(map(_third, metas)),
        "call_stack": list(map(operator.itemgetter(3), metas)),
        "layer_caller": list(map(operator.itemgetter(4), metas)),
    }


_first, _second, _third = (operator.itemgetter(i) for i in range(3))


def _cost_field(name: str) -> operator.itemgetter:
    """A getter of one of :class:`Cost`'s fields by its place (a little cheaper than by name)."""
    return operator.itemgetter(Cost._fields.index(name))


_name, _opcode, _computation = map(operator.attrgetter, ("name", "opcode", "computation"))
# the columns _op_columns makes (no row builder of their own)
_OP_COLUMNS = frozenset(_op_columns([], [], [], {}))


class _Body:
    """What the rows of every fusion calling one computation share, found in one pass over it."""

    __slots__ = (
        "async_done", "collective", "depthwise_taps", "expanded", "fused_ops", "geometry", "io",
        "major_reduced",
        "matmul_dtype", "matmul_precision", "prologue_words", "reduced_stream_words",
        "root_reduces", "runs_collective", "sliced", "streamed_words",
    )  # fmt: skip

    def __init__(self, fusion: Instruction, walks: _Walks, in_flight: frozenset[str]) -> None:
        instructions = fusion.called[0].instructions
        # the listed opcodes, in order of first use (counted in C)
        counts = collections.Counter(map(_opcode, instructions))
        for code in _NOT_LISTED.intersection(counts):
            counts.pop(code)  # (dict's, in C: Counter's own del is a Python method)
        matmul = collective = None
        has_geometry = "fusion" in counts or not _MATMULS_SET.isdisjoint(counts)
        if not _MATMULS_SET.isdisjoint(counts):
            matmul = next(inner for inner in instructions if inner.opcode in _MATMULS_SET)
        if not MAY_HOLD_ONE.isdisjoint(counts):  # the first op that holds one
            for inner in instructions:
                if inner.opcode in MAY_HOLD_ONE:
                    collective = walks.collective(inner)
                    if collective is not None:
                        break
        self.matmul_dtype = (
            matmul.operands[0].shape.dtype if matmul is not None and matmul.operands else None
        )
        self.fused_ops = ", ".join([op if n == 1 else f"{op} ×{n}" for op, n in counts.items()])
        marker = attrs.async_marker(fusion)  # (its body's root says)
        # the done half of a TPU async collective: its row waits for the start
        self.async_done = marker == attrs.ASYNC_COLLECTIVE_MARKERS[1]
        continued = (
            collective is not None
            and collective.attrs.get("channel_id") in in_flight
            and marker != attrs.ASYNC_COLLECTIVE_MARKERS[0]
        )  # a fusion that only continues (or finishes) a TPU async collective started earlier
        self.collective = None if continued else collective
        # a collective matmul: its transfers, not its tiling loop, move the operands it gathers
        self.runs_collective = collective is not None
        self.geometry = walks.geometry(fusion) if has_geometry else None
        self.io = walks.io(fusion) if self.geometry else None
        # the body's vector work, walked once however many fusions call it
        self.prologue_words = (
            fused_operand_words(fusion, walks.geometries) if self.geometry else 0.0
        )
        self.sliced = {} if self.geometry else sliced_reads(fusion)
        self.streamed_words = (
            streamed_operand_words(fusion, walks.geometries) if self.geometry else 0.0
        )
        # the keys of decode's scores streamed where the fusion also reduces them (their max):
        # XLA:TPU charges those at a rate of their own on some chips (``calibrated.reduced_stream``)
        self.reduced_stream_words = self.streamed_words if "reduce" in counts else 0.0
        self.major_reduced = (
            major_reduced_elements(i for i in instructions if i.opcode == "reduce")
            if "reduce" in counts
            else 0.0
        )
        self.root_reduces = root_reduces(fusion)
        self.depthwise_taps = depthwise_taps(instructions) if "convolution" in counts else 0.0
        self.expanded = expanded_elements(fusion) if self.root_reduces else 0.0
        self.matmul_precision = (
            _precision(matmul) if matmul is not None else "default" if self.geometry else ""
        )


def _precision(matmul: Instruction) -> str:
    try:
        return attrs.matmul_precision(matmul)
    except _RULE_ERRORS:
        return "default"


def _group_size(collective: Instruction, module: Module) -> int:
    try:
        return attrs.replica_group_size(collective, module)
    except _RULE_ERRORS:
        return 0  # replica_groups it cannot read: the op's own row is flagged by its rule


class _Walks:
    """The collective and the matmul geometry of called computations, found once per computation
    for the whole table: nested fusions sharing bodies are not walked once per path to them."""

    __slots__ = ("collectives", "geometries")

    def __init__(self) -> None:
        self.collectives: dict[int, Instruction | None] = {}
        # id(fused computation or convolution) -> its geometry (linalg.matmul_geometry's memo)
        self.geometries: dict[int, tuple[int, int, int, int] | None] = {}

    def io(self, instr: Instruction) -> MatmulIO | None:
        """How a matmul's arrays cross HBM (a library call: its operands and main result)."""
        try:
            if instr.opcode == "custom-call":
                lhs, rhs, out = _first_two(instr)
                return MatmulIO(element_bytes(lhs), element_bytes(rhs), element_bytes(out), 1)
            return matmul_io(instr, self.geometries)
        except (*_RULE_ERRORS, RecursionError):
            return None

    def collective(self, instr: Instruction) -> Instruction | None:
        try:
            return find_collective(instr, self.collectives)
        except RecursionError:  # fusions nested thousands deep: the row says nothing of them
            return None

    def geometry(self, instr: Instruction) -> tuple[int, int, int, int] | None:
        try:
            if instr.opcode == "custom-call":
                return custom_call.geometry(instr)
            return matmul_geometry(instr, self.geometries)
        except (*_RULE_ERRORS, RecursionError):
            return None


def _first_two(instr: Instruction) -> tuple:
    """The shapes of a matmul's two operands and its (first) result."""
    shapes = [op.shape for op in instr.operands[:2]]
    shapes += [Shape("token")] * (2 - len(shapes))
    return (*shapes, instr.shape)


def _group_text(collective: Instruction, module: Module) -> str:
    try:
        return group_text(collective, module)
    except (*_RULE_ERRORS, RecursionError):
        return ""  # groups it cannot read: priced as one ring (see hlo_roofline.judge.interconnect)


def _kind(collective: Instruction, module: Module) -> str:
    try:
        return kind(collective, module)
    except (*_RULE_ERRORS, RecursionError):
        return collective.opcode.removesuffix("-start")


def _async_start(done: Instruction) -> Instruction | None:
    try:
        return async_start_of(done)
    except (*_RULE_ERRORS, RecursionError):
        return None


def summarize(ops: Iterable[PricedOp], cost_model: str) -> schema.CostSummary:
    """Module totals, and how much of the step could be priced."""
    summary: dict = {}
    collections.deque(tallied(ops, cost_model, summary), maxlen=0)  # (run through, in C)
    return summary  # type: ignore[return-value]


def tallied(ops: Iterable[PricedOp], cost_model: str, summary: dict) -> Iterator[PricedOp]:
    """``ops`` passed on one at a time; once they have all gone through, ``summary`` holds what
    :func:`summarize` says of them (a stream of ops is summed as it goes to :func:`rows`)."""
    flops = transcendentals = bytes_accessed = comm_bytes = 0.0
    priced = counted = 0.0
    notes: dict[str, None] = {}
    unknown_ops: list[str] = []
    lower_bound = False
    for op in ops:
        yield op
        instr, count, cost = op
        if cost is not ZERO:  # (a zero cost adds nothing: every sum starts at +0.0)
            lower_bound = lower_bound or cost.lower_bound
            flops += cost.flops * count
            transcendentals += cost.transcendentals * count
            bytes_accessed += cost.bytes_accessed * count
            comm_bytes += cost.comm_bytes * count
            for n in cost.notes:
                notes[n] = None
        if count == 0 or instr.opcode in BOOKKEEPING:
            continue
        counted += count
        if cost.unknown:
            unknown_ops.append(instr.name)
        else:
            priced += count
    summary.update({
        "cost_model": cost_model,
        "flops": flops,
        "transcendentals": transcendentals,
        "bytes_accessed": bytes_accessed,
        "comm_bytes": comm_bytes,
        "coverage": priced / counted if counted else 1.0,
        "unknown_ops": unknown_ops,
        "lower_bound": lower_bound,
        "notes": list(notes),
    })  # fmt: skip
