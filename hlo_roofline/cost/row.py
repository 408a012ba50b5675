"""What a table's extractors share (:mod:`hlo_roofline.cost.extractors`): the op a row is made
of and the facts of its IR that several extractors read (:class:`Op`), the state of one
table's making (:class:`Build`), and what every fusion calling one computation shares
(:class:`Body`, found once per computation by :class:`Walks`).
"""

from __future__ import annotations

import collections
import operator
from collections.abc import Callable
from typing import NamedTuple

from hlo_roofline.cost import custom_call
from hlo_roofline.cost.base import NAMING_OPS, RULE_ERRORS, Cost, element_bytes
from hlo_roofline.cost.collectives import MAY_HOLD_ONE, find_collective
from hlo_roofline.cost.linalg import MATMUL_OPCODES, MatmulIO, matmul_geometry, matmul_io
from hlo_roofline.hlo import attrs
from hlo_roofline.hlo.ir import Instruction, Module, Shape

_MATMULS_SET = frozenset(MATMUL_OPCODES)
_opcode = operator.attrgetter("opcode")


class PricedOp(NamedTuple):
    """One executed instruction, its execution count per step and its cost per execution.

    A named tuple: immutable, and cheaper to build than a dataclass (there is one per row).
    """

    instr: Instruction
    count: float
    cost: Cost


class Op:
    """One row's op and what the extractors before an extractor found of it (in the order
    :data:`~hlo_roofline.cost.extractors.EXTRACTORS` declares them): one object, refilled for
    every row, so a row costs no allocation of its own."""

    __slots__ = (
        "at", "backend_config", "body", "code", "cost", "count", "dtype", "found", "geometry",
        "has_estimate", "instr", "io", "kind_attr", "steps",
    )  # fmt: skip

    def start(self, priced: PricedOp, at: int) -> None:
        """Refill for the next row (``at``: its place in its chunk, where a rare column's value
        goes), every fact an extractor finds back at "none found"."""
        self.instr, self.count, self.cost = priced
        self.code = self.instr.opcode
        self.at = at
        self.body = self.found = self.geometry = self.io = None
        self.steps = 0  # steps of XLA:TPU's tiling loop (set by the estimates' extractor)

    # set by the attributes' reader (:func:`hlo_roofline.cost.extractors.attributes`):
    # kind_attr, backend_config, has_estimate (its backend_config holds XLA's estimate) and dtype
    # (its first result's, until the matmuls' extractor says otherwise)
    instr: Instruction
    count: float
    cost: Cost
    code: str
    at: int
    kind_attr: str
    backend_config: str
    has_estimate: bool
    dtype: str
    body: Body | None  # a fusion's called computation (the fusions' extractor)
    found: Instruction | None  # the collective it performs (the collectives' extractor)
    geometry: tuple[int, int, int, int] | None  # a matmul's (the matmuls' extractor)
    io: MatmulIO | None
    steps: int


# An extractor made for one table: called once per row with the row's Op, it writes its columns.
RowExtractor = Callable[[Op], None]


class Build:
    """The state of one table's making: the module, the rare columns' values given so far in
    this chunk (``rare``: column -> row in chunk -> value; a row gives one only where it has its
    own), the full columns' builders (``put``), and the extractors' memos."""

    __slots__ = ("in_flight", "memos", "module", "owned", "pad_to_tiles", "put", "rare",
                 "user_packages", "walks")  # fmt: skip

    def __init__(self, module: Module, pad_to_tiles: bool, user_packages: tuple[str, ...]) -> None:
        self.module = module
        self.pad_to_tiles = pad_to_tiles
        self.user_packages = user_packages
        self.rare: dict[str, dict[int, object]] = {}
        self.put: dict[str, object] = {}
        self.walks = Walks()
        self.memos: list[dict] = [self.walks.collectives, self.walks.geometries]
        self.in_flight: frozenset[str] | None = None  # channels of TPU async collectives
        self.owned: dict[object, dict] = {}  # an extractor's memo by its owner (memo_of)

    def memo_of(self, owner: object, trimmed: bool = True) -> dict:
        """The memo of ``owner`` (an extractor, or what it memoizes), made on first use."""
        memo = self.owned.get(owner)
        if memo is None:
            memo = self.owned[owner] = self.memo(trimmed)
        return memo

    def memo(self, trimmed: bool = True) -> dict:
        """A new memo for an extractor; a ``trimmed`` one starts again between chunks once it
        holds more than a few thousand entries (:meth:`trim`): mostly texts seen once."""
        memo: dict = {}
        if trimmed:
            self.memos.append(memo)
        return memo

    def trim(self, kept: int) -> None:
        for memo in self.memos:
            if len(memo) > kept:
                memo.clear()

    def channels_in_flight(self) -> frozenset[str]:
        if self.in_flight is None:
            self.in_flight = attrs.in_flight_channels(self.module)
        return self.in_flight


class Body:
    """What the rows of every fusion calling one computation share, found in one pass over it."""

    __slots__ = (
        "async_done", "collective", "fused_ops", "geometry", "io", "matmul_dtype",
        "matmul_precision", "reduces", "runs_collective",
    )  # fmt: skip

    def __init__(self, fusion: Instruction, walks: Walks, in_flight: frozenset[str]) -> None:
        instructions = fusion.called[0].instructions
        # the listed opcodes, in order of first use (counted in C)
        counts = collections.Counter(map(_opcode, instructions))
        for code in NAMING_OPS.intersection(counts):
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
        self.reduces = "reduce" in counts
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
        self.matmul_precision = (
            precision(matmul) if matmul is not None else "default" if self.geometry else ""
        )


def precision(matmul: Instruction) -> str:
    try:
        return attrs.matmul_precision(matmul)
    except RULE_ERRORS:
        return "default"


class Walks:
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
                lhs, rhs, out = first_two(instr)
                return MatmulIO(element_bytes(lhs), element_bytes(rhs), element_bytes(out), 1)
            return matmul_io(instr, self.geometries)
        except (*RULE_ERRORS, RecursionError):
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
        except (*RULE_ERRORS, RecursionError):
            return None


def first_two(instr: Instruction) -> tuple:
    """The shapes of a matmul's two operands and its (first) result."""
    shapes = [op.shape for op in instr.operands[:2]]
    shapes += [Shape("token")] * (2 - len(shapes))
    return (*shapes, instr.shape)
