"""The report's price columns, one extractor per concern, each a small function over an op's IR:
the declared list :data:`EXTRACTORS` says which columns each one makes (every column is one
extractor's), and for which modules it runs (as jax's experimental roofline package keeps one rule per
primitive in a registry, this keeps one extractor per concern in a list).

An extractor runs either per row (``row(build)`` makes the table's function of an op, with its
memos and columns bound once; that gives a rare column's value only where the row has one,
``rare[column][op.at] = value``, and a full column's every row, ``build.put[column](value)``) or
per chunk of rows (``chunk(chunk) -> {column: values}``: columns
that are what the priced ops, their shapes and attributions say, made with ``map`` over C getters,
no Python step per value). Row extractors run in the list's order, and a later one reads what an
earlier one found (:class:`~hlo_roofline.cost.row.Op`: a fusion's body, the collective it
performs, a matmul's geometry). An extractor whose inputs only some compiles write (XLA:TPU's VMEM
placement, its estimates and tiling loops: :mod:`hlo_roofline.cost.tpu`) says so in ``applies``,
read once per module: a module without them never calls it, and its columns keep their defaults.
:mod:`hlo_roofline.cost.table` runs them and holds the columns.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable
from dataclasses import dataclass

from hlo_roofline.cost import custom_call
from hlo_roofline.cost.base import RULE_ERRORS, Cost, element_bytes
from hlo_roofline.cost.collectives import COLLECTIVES, WRAPPERS, async_start_of, group_text, kind
from hlo_roofline.cost.facts import remember_shape
from hlo_roofline.cost.linalg import MATMUL_OPCODES, MatmulIO
from hlo_roofline.cost.row import (
    Body,
    Build,
    Op,
    PricedOp,
    RowExtractor,
    first_two,
    precision,
)
from hlo_roofline.cost.tpu import extractors as tpu
from hlo_roofline.hlo import attrs
from hlo_roofline.hlo.attribution import metadata_columns
from hlo_roofline.hlo.ir import Instruction, Module

_MATMULS = MATMUL_OPCODES
_WITH_GEOMETRY = frozenset({*_MATMULS, "fusion", "custom-call"})
GEOMETRY_COLUMNS = (
    "mm_batch", "mm_m", "mm_n", "mm_k", "mm_lhs_bytes", "mm_rhs_bytes", "mm_out_bytes", "mm_split_k",
)  # a matmul's (batch, M, N, K) and its MatmulIO, in their order  # fmt: skip


@dataclass
class Chunk:
    """A chunk of rows for the chunk extractors: the priced ops, each one's (shape text, dtype of
    its first leaf) and attribution (:func:`attributes`), and the loops of each computation."""

    ops: list[PricedOp]
    shapes: list[tuple[str, str]]
    metas: list[tuple[str, str, str, str, str]]
    loops: dict[int, str]




@dataclass(frozen=True)
class Extractor:
    """One concern's columns: made per row (``row(build)`` makes the table's row function, its
    memos and columns bound once) or per chunk (``chunk``), for the modules ``applies`` accepts
    (every module by default)."""

    concern: str
    columns: tuple[str, ...]
    row: Callable[[Build], RowExtractor] | None = None
    chunk: Callable[[Chunk], dict[str, list]] | None = None
    applies: Callable[[Module], bool] = lambda module: True
    # the opcodes whose rows a row extractor gives a value (None: any op's); the table calls it
    # for those alone, another op's row keeping its columns' defaults
    opcodes: frozenset[str] | None = None


# -- per chunk --------------------------------------------------------------------------------
_first, _second, _third = (operator.itemgetter(i) for i in range(3))
_name, _opcode, _computation = map(operator.attrgetter, ("name", "opcode", "computation"))


def _cost_field(name: str) -> operator.itemgetter:
    """A getter of one of :class:`Cost`'s fields by its place (a little cheaper than by name)."""
    return operator.itemgetter(Cost._fields.index(name))


def _note(notes: tuple[str, ...]) -> str:
    return "; ".join(notes) if notes else ""


def counts(chunk: Chunk) -> dict[str, list]:
    """What each op is, where, how often, and its cost per step (cost × count)."""
    instrs = list(map(_first, chunk.ops))
    per_run = list(map(_second, chunk.ops))
    costs = list(map(_third, chunk.ops))
    computations = list(map(_computation, instrs))

    def per_step(quantity: str) -> list:
        return list(map(operator.mul, map(_cost_field(quantity), costs), per_run))

    return {
        "name": list(map(_name, instrs)),
        "opcode": list(map(_opcode, instrs)),
        "computation": list(map(_name, computations)),
        "count": list(map(float, per_run)),
        "flops": per_step("flops"),
        "transcendentals": per_step("transcendentals"),
        "bytes_accessed": per_step("bytes_accessed"),
        "comm_bytes": per_step("comm_bytes"),
        "kernel_mxu_flops": per_step("mxu_flops"),
        "unknown": list(map(_cost_field("unknown"), costs)),
        "lower_bound": list(map(_cost_field("lower_bound"), costs)),
        "upper_bound": list(map(_cost_field("upper_bound"), costs)),
        "note": list(map(_note, map(_cost_field("notes"), costs))),
        "loop": list(map(chunk.loops.get, map(id, computations), itertools.repeat(""))),
        "shape": list(map(_first, chunk.shapes)),
    }


def attribution(chunk: Chunk) -> dict[str, list]:
    """Where each op came from in the user's program (:func:`metadata_columns`)."""
    metas = chunk.metas
    return {
        "op_name": list(map(_first, metas)),
        "source": list(map(_second, metas)),
        "user_source": list(map(_third, metas)),
        "call_stack": list(map(operator.itemgetter(3), metas)),
        "layer_caller": list(map(operator.itemgetter(4), metas)),
    }


def attributes(build: Build) -> Callable[[PricedOp, Op, int], tuple]:
    """The table's reader of a row's op (before its extractors): ``read(priced, op, at)`` refills
    ``op`` (:meth:`Op.start`) with its attribute facts (its kind, backend_config and whether that
    holds XLA's estimate; its first result's dtype) and returns its (shape text, first dtype) and
    attribution. Each distinct attribute text is split once (a TPU module of 17k instructions has
    750), each distinct shape described once."""
    # attribute text -> (attribution, kind, backend_config, whether that holds XLA's estimate)
    by_text: dict[str, tuple[tuple[str, str, str, str, str], str, str, bool]] = build.memo()
    metadata: dict[str, tuple[str, str, str, str, str]] = build.memo()  # text -> its columns
    stacks, callers = build.memo(), build.memo()  # see metadata_columns
    shapes: dict[int, tuple[str, str]] = {}  # id(shape) -> (its text, dtype of its first leaf)
    module, user_packages = build.module, build.user_packages

    def read(priced: PricedOp, op: Op, at: int) -> tuple:
        op.start(priced, at)
        instr = op.instr
        text = instr.attr_text
        read = by_text.get(text) if text is not None else None
        if read is None:  # split here, not kept by the instruction: one read of many rows
            split = instr.peek_attrs()
            meta_text = split.get("metadata", "")
            meta = metadata.get(meta_text)
            if meta is None:
                meta = metadata[meta_text] = metadata_columns(
                    attrs.parse_metadata(meta_text), module, stacks, callers, user_packages
                )
            config = split.get("backend_config", "")
            read = (meta, split.get("kind", ""), config, "estimated_cycles" in config)
            if text is not None:
                by_text[text] = read
        meta, op.kind_attr, op.backend_config, op.has_estimate = read
        described = shapes.get(id(instr.shape))
        if described is None:
            leaves = instr.shape.leaves()
            first = leaves[0].dtype if leaves else instr.shape.dtype
            described = shapes[id(instr.shape)] = (str(instr.shape), first)
            remember_shape(described[0], instr.shape)  # the judges' typed value of the text
        op.dtype = described[1]
        return described, meta

    return read


# -- per row ----------------------------------------------------------------------------------
def fusions(build: Build) -> RowExtractor:
    """A fusion's kind and the ops inside it; its body (:class:`Body`) for the extractors after."""
    kinds, bodies = build.memo(), build.memo()  # (kind, backend_config) -> kind; id(body) -> Body
    kind_at, fused_ops_at, walks = build.rare["fusion_kind"], build.rare["fused_ops"], build.walks

    def row(op: Op) -> None:
        if op.code != "fusion":
            return
        instr = op.instr
        config_key = (op.kind_attr, op.backend_config)
        fusion_kind = kinds.get(config_key)
        if fusion_kind is None:
            fusion_kind = kinds[config_key] = attrs.fusion_kind(instr)
        kind_at[op.at] = fusion_kind
        if instr.called:
            body = bodies.get(id(instr.called[0]))
            if body is None:
                body = bodies[id(instr.called[0])] = Body(instr, walks, build.channels_in_flight())
            op.body = body
            fused_ops_at[op.at] = body.fused_ops

    return row


def matmuls(build: Build) -> RowExtractor:
    """The dtype an op computes in, and a matmul's precision and geometry (its batch, M, N, K and
    how its arrays cross HBM); ``op.geometry`` and ``op.io`` for the extractors after."""
    precision_at, put_dtype, walks = build.rare["precision"], build.put["dtype"], build.walks
    geometry_at = [build.rare[name] for name in GEOMETRY_COLUMNS]

    def row(op: Op) -> None:
        instr, code, body, at = op.instr, op.code, op.body, op.at
        dtype, geometry, io = op.dtype, None, None
        if code == "fusion":
            if body is not None:
                geometry, io = body.geometry, body.io
                dtype = body.matmul_dtype or dtype
                precision_at[at] = body.matmul_precision
        else:
            if code in _MATMULS and instr.operands:
                dtype = instr.operands[0].shape.dtype
            if code in _WITH_GEOMETRY:
                geometry = walks.geometry(instr)
                if geometry:
                    precision_at[at] = precision(instr)
                    io = walks.io(instr)
                    if code == "custom-call":  # a library gemm runs in its inputs' type (fp8
                        dtype = instr.operands[0].shape.dtype  # in, bf16 out: the fp8 rate)
        if geometry is not None:
            if io is None:  # a matmul whose arrays cannot be traced: its own types
                io = MatmulIO(*(element_bytes(s) for s in first_two(instr)), 1)
            for column, value in zip(geometry_at, (*geometry, *io), strict=True):
                column[at] = value
        op.geometry, op.io = geometry, io
        put_dtype(dtype)

    return row


def collectives(build: Build) -> RowExtractor:
    """The collective an op performs (its own, or one it wraps), its kind and device groups, the
    start an async done waits for, and a SparseCore offload; ``op.found`` for the extractors
    after."""
    module, rare, walks = build.module, build.rare, build.walks
    own: dict[str, bool] = {}  # opcode -> the op is itself a collective (or its start)
    groups = build.memo()  # id(collective) -> (kind, group text)
    collective_at, group_at, size_at = rare["collective"], rare["replica_group"], rare["group_size"]

    def row(op: Op) -> None:
        instr, code, body = op.instr, op.code, op.body
        found = None
        if code == "fusion":
            found = body.collective if body is not None else None
        elif own.get(code) or (code not in own and _is_collective(code, own)):
            found = instr
        elif code in WRAPPERS:
            found = walks.collective(instr)
            if custom_call.on_sparsecore(instr):
                rare["offload"][op.at] = custom_call.SPARSECORE
        if found is not None:
            known = groups.get(id(found))
            if known is None:
                known = groups[id(found)] = (_kind(found, module), _group_text(found, module))
            collective_at[op.at], group_at[op.at] = known
            size_at[op.at] = _group_size(found, module)
        if (body is not None and body.async_done) or code.endswith("-done"):
            start = _async_start(instr)
            if start is not None:
                rare["waits_for"][op.at] = start.name
        op.found = found

    return row


def _is_collective(code: str, memo: dict[str, bool]) -> bool:
    """The opcode is a collective's own (or its start), kept in ``memo``."""
    own = memo[code] = not code.endswith("-done") and code.removesuffix("-start") in COLLECTIVES
    return own


def _group_size(collective: Instruction, module: Module) -> int:
    try:
        return attrs.replica_group_size(collective, module)
    except RULE_ERRORS:
        return 0  # replica_groups it cannot read: the op's own row is flagged by its rule


def _group_text(collective: Instruction, module: Module) -> str:
    try:
        return group_text(collective, module)
    except (*RULE_ERRORS, RecursionError):
        return ""  # groups it cannot read: priced as one ring (see hlo_roofline.judge.interconnect)


def _kind(collective: Instruction, module: Module) -> str:
    try:
        return kind(collective, module)
    except (*RULE_ERRORS, RecursionError):
        return collective.opcode.removesuffix("-start")


def _async_start(done: Instruction) -> Instruction | None:
    try:
        return async_start_of(done)
    except (*RULE_ERRORS, RecursionError):
        return None


# -- the list -----------------------------------------------------------------------------------
_FUSION = frozenset({"fusion"})
EXTRACTORS: tuple[Extractor, ...] = (
    Extractor("counts", (*counts(Chunk([], [], [], {})),), chunk=counts),
    Extractor("attribution", (*attribution(Chunk([], [], [], {})),), chunk=attribution),
    Extractor("fusions", ("fusion_kind", "fused_ops"), row=fusions, opcodes=_FUSION),
    Extractor("matmuls", ("dtype", "precision", *GEOMETRY_COLUMNS), row=matmuls),
    Extractor(
        "collectives",
        ("collective", "group_size", "replica_group", "waits_for", "offload"),
        row=collectives,
    ),
    # XLA:TPU's arrays in VMEM: only its layouts place one there (memory space S(1))
    Extractor(
        "memory placement",
        ("vmem_bytes", "prefetch_for"),
        row=tpu.placement,
        applies=tpu.places_in_vmem,
    ),
    # The vector unit's counts run for every module: the GPU time model's op floor reads them too
    # (judge.compute.op_floors: an op with vector_elements > 0 launches a kernel), a TPU chip may
    # judge any module, and a CPU or GPU module's report has always carried them.
    Extractor("vector units", tpu.UNIT_COLUMNS, row=tpu.vector_units),
    Extractor(
        "intermediates",
        tpu.INTERMEDIATE_COLUMNS,
        row=tpu.intermediates,
        opcodes=frozenset({"fusion", "convolution", "copy"}),  # a body's, a conv's, a relayout's
    ),
    Extractor(
        "XLA estimates",
        ("xla_cycles", "tile_steps", "major_reduce_results"),
        row=tpu.estimates,
        applies=tpu.has_estimates,
    ),
    Extractor(
        "tiling", tpu.TILING_COLUMNS, row=tpu.tiling, applies=tpu.has_estimates, opcodes=_FUSION
    ),  # a fusion's tiling loop
)
