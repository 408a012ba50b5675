"""The report's price columns of a walk's priced ops: :func:`rows` runs the extractors
(:data:`hlo_roofline.cost.extractors.EXTRACTORS`) over them, a chunk of rows at a time, into
NumPy arrays made at full length at the start.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from hlo_roofline import schema
from hlo_roofline._frame import compact
from hlo_roofline.cost.control_flow import loop_paths
from hlo_roofline.cost.extractors import EXTRACTORS, GEOMETRY_COLUMNS, Chunk, attributes
from hlo_roofline.cost.row import Build, Op, PricedOp
from hlo_roofline.cost.tpu.extractors import INTERMEDIATE_COLUMNS, TILING_COLUMNS, UNIT_COLUMNS
from hlo_roofline.hlo.ir import Module

ROW_COLUMNS = schema.COST_COLUMNS  # the columns rows() builds, each by its name
_INTERNAL = frozenset(schema.INTERNAL_COLUMNS)
# each model internal's (default, whether it is text): how _Table.cut compacts it
_INTERNAL_FACTS = {
    name: (schema.internal_default(name), name in schema.TEXT_COLUMNS) for name in _INTERNAL
}
# Rows made between two moves into the arrays: what waits for its move (the priced ops, each row's
# Python values) was the analysis' largest transient at 4096 rows (GPT-2's step: peak RSS 4.2x
# its text, 3.7x at 1024). 1024 costs no measurable time; 512 cost GPT-2's analysis 4 %.
_ROWS_PER_CHUNK = 1024
# How many entries each of the rows' memos (by attribute or metadata text, by fused body) may hold
# between chunks; past that it starts again. GPT-2's step has 743 distinct attribute texts.
_MEMO_KEPT = 2048
# Columns kept as NumPy values (8 bytes a number, 1 a flag) rather than Python objects.
_ARRAY_COLUMNS = {
    **dict.fromkeys(schema.names("cost", "float"), np.float64),
    **dict.fromkeys(schema.names("cost", "int"), np.int64),
    **dict.fromkeys(schema.names("cost", "bool"), np.bool_),
}
# Columns most rows leave at these values (an op that is no matmul, collective, fusion, ...): a row
# gives one only where it has its own, and each chunk starts from these.
RARE_DEFAULTS: dict[str, object] = {
    **dict.fromkeys(("fusion_kind", "precision", "fused_ops", "collective"), ""),
    **dict.fromkeys(("replica_group", "waits_for", "prefetch_for", "offload"), ""),
    **dict.fromkeys(("group_size", *GEOMETRY_COLUMNS), 0),
    **dict.fromkeys(("mm_lhs_bytes", "mm_rhs_bytes", "mm_out_bytes", "vmem_bytes"), 0.0),
    **dict.fromkeys((*UNIT_COLUMNS, *TILING_COLUMNS, "tile_steps", "major_reduce_results"), 0.0),
    **dict.fromkeys(INTERMEDIATE_COLUMNS, 0.0),
    "xla_cycles": math.nan,
}

# Each column's (dtype, default) as _Table._full makes it: None where the default is 0 (np.zeros
# makes it faster than np.full, a cost a small module's table pays 56 times).
_FILLS: dict[str, tuple[type, object]] = {
    name: (dtype, None if (default == 0 and not isinstance(default, str)) else default)
    for name in ROW_COLUMNS
    for dtype, default in [(_ARRAY_COLUMNS.get(name, object), RARE_DEFAULTS.get(name, 0))]
}


def rows(
    module: Module,
    ops: Iterable[PricedOp],
    pad_to_tiles: bool = False,
    user_packages: Sequence[str] = (),
    *,
    consume: bool = False,
) -> dict[str, np.ndarray]:
    """Report columns (one NumPy array each, text as objects): identity, metadata and per-step
    totals (cost × count), each made by its extractor.

    ``user_packages`` (names or directories) are the user's code in ``user_source`` and
    ``layer_caller`` even where installed (see :func:`attribution.is_library`). ``ops`` is a list
    or a stream (:func:`~hlo_roofline.cost.analysis.priced`: then no more than a chunk of them
    exists at once, and the arrays are made as long as the rows can be and cut to the rows made);
    with ``consume`` a list's ops become ``None`` as their rows are made.
    """
    build = Build(module, pad_to_tiles, tuple(user_packages))
    build.rare = {name: {} for name in RARE_DEFAULTS}
    full = {name: [] for name in ROW_COLUMNS if name not in RARE_DEFAULTS and name not in _MADE}
    build.put = {name: column.append for name, column in full.items()}
    active = [e for e in EXTRACTORS if e.applies(module)]
    per_row = [(e.row(build), e.opcodes) for e in active if e.row is not None]
    by_opcode: dict[str, tuple] = {}  # opcode -> the row extractors its rows run, in order
    per_chunk = [e.chunk for e in active if e.chunk is not None]
    listed = isinstance(ops, Sequence)
    table = _Table(len(ops) if listed else _most_rows(module))
    released = ops if consume and isinstance(ops, list) else None
    read = attributes(build)
    chunk = Chunk([], [], [], loop_paths(module))
    append_op, append_shape, append_meta = chunk.ops.append, chunk.shapes.append, chunk.metas.append
    op = Op()
    at = 0  # the row's place in its chunk
    for priced in _by_chunks(ops):  # (consume: a chunk of rows made, its ops become None)
        append_op(priced)
        described, meta = read(priced, op, at)
        append_shape(described)
        append_meta(meta)
        extractors = by_opcode.get(op.code)
        if extractors is None:
            extractors = by_opcode[op.code] = _running(per_row, op.code)
        for extract in extractors:
            extract(op)
        at += 1
        if at == _ROWS_PER_CHUNK:
            table.take(full, build.rare, chunk, per_chunk, released)
            at = 0
            build.trim(_MEMO_KEPT)  # mostly texts seen once: a large module's would hold a copy
            # of half its attribute text until the table is made
    table.take(full, build.rare, chunk, per_chunk, released, True)  # the last chunk
    return table.cut()


# the columns the chunk extractors make
_MADE = frozenset(name for e in EXTRACTORS if e.chunk is not None for name in e.columns)


def _running(per_row: list[tuple], opcode: str) -> tuple:
    """The row extractors an op of ``opcode`` runs (those of no opcodes, or of it), in order."""
    return tuple(extract for extract, codes in per_row if codes is None or opcode in codes)


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


class _Table:
    """The report's columns at full length (a rare column's filled with its default), filled a
    chunk of rows at a time. The arrays are made at the first chunk: as long as its rows where it
    is the last (a module of a chunk's rows, most modules: nothing to cut), else as ``rows``."""

    __slots__ = ("columns", "done", "length", "rows")

    def __init__(self, rows: int) -> None:
        self.done = 0
        self.rows = rows  # as many as the table may need
        self.length = 0  # the arrays' length, once made
        self.columns: dict[str, np.ndarray] = {}

    def _make(self, rows: int, given: Iterable[str]) -> None:
        """The arrays at ``rows`` rows: each column the chunk gives every row of (``given``) left
        unfilled, the others at their default. A model internal most ops leave at its default
        is made at full length once a row gives it a value (a CPU or flat module gives most none)
        and kept sparse at the end."""
        given = set(given)
        self.length = rows
        self.columns = {
            name: np.empty(rows, _FILLS[name][0]) if name in given else self._full(name, rows)
            for name in ROW_COLUMNS
            if name not in _INTERNAL or name not in RARE_DEFAULTS
        }

    def take(
        self,
        values: dict[str, list],
        rare: dict[str, dict[int, object]],
        chunk: Chunk,
        per_chunk: list,
        released: list | None,
        last: bool = False,
    ) -> None:
        """Move a chunk of rows into the arrays: the full columns the row extractors made
        (``values``, one list per column, emptied: the builders keep their ``append``), the rare
        values rows gave (``rare``: row in the chunk -> value, emptied), and the columns the chunk
        extractors make of ``chunk`` (emptied). Every full column must have been given every row.
        ``released``: the list of all the ops, whose chunk becomes None. ``last``: no chunk
        follows."""
        rows = len(chunk.shapes)
        start, end = self.done, self.done + rows
        short = [name for name, column in values.items() if len(column) != rows]
        if short:
            raise AssertionError(f"rows() left out columns {short}: give every row a value of each")
        made = {name: column for extract in per_chunk for name, column in extract(chunk).items()}
        if not self.columns:
            exact = last and start == 0
            self._make(rows if exact else max(self.rows, end), (*values, *made) if exact else ())
        elif end > self.length:
            self._grow(max(end, 2 * self.length))
        chunk.ops.clear()
        chunk.shapes.clear()
        chunk.metas.clear()
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

    @staticmethod
    def _full(name: str, rows: int) -> np.ndarray:
        """The column ``name`` at ``rows`` rows, each its default (a rare column's, else 0)."""
        dtype, default = _FILLS[name]
        if default is None:  # 0 as the dtype writes it: zeros, made in C at once
            return np.zeros(rows, dtype)
        array = np.empty(rows, dtype)
        array.fill(default)
        return array

    def _grow(self, rows: int) -> None:
        """Longer arrays (a stream with more ops than its module's bound: hostile text)."""
        for name, array in self.columns.items():
            longer = self._full(name, rows)  # the array's dtype: _full made it, or _make
            longer[: len(array)] = array
            self.columns[name] = longer
        self.length = rows

    def cut(self) -> dict[str, np.ndarray]:
        """The columns, cut to the rows made (in place: the arrays keep their memory's start), in
        the schema's order; the model internals compact (:func:`_frame.compact`)."""
        if self.length > self.done:
            for array in self.columns.values():
                array.resize(self.done, refcheck=False)  # nothing else refers to it
        out = {}
        columns, rows = self.columns, self.done
        for name in ROW_COLUMNS:
            internal = _INTERNAL_FACTS.get(name)
            if internal is None:
                out[name] = columns[name]
                continue
            values = columns.pop(name, None)
            if values is None:  # no row gave it a value: every row's is the default
                values = self._full(name, rows)
            out[name] = compact(values, *internal)
        return out

    def _put(self, name: str, where, column: list) -> None:
        array = self.columns.get(name)
        if array is None:  # a rare internal's first value: its array made now
            array = self.columns[name] = self._full(name, self.length)
        try:
            array[where] = column
        except (OverflowError, ValueError, TypeError):  # past int64 (hostile text), or not a
            array = self.columns[name] = array.astype(object)  # number: kept as they are
            array[where] = column
