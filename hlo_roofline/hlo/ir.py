"""The parsed form of an HLO module: Module → Computation → Instruction.

Only what the cost rules and reports need is decoded eagerly (names, opcodes, shapes, operands, called
computations). Every other attribute is kept as its raw text in ``Instruction.attrs`` and decoded on
demand by the helpers in :mod:`hlo_roofline.hlo.attrs`, which keeps parsing of large modules fast.
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from dataclasses import dataclass, field

from hlo_roofline.hlo.lexer import split_attributes

# Bytes per element of every element type of XLA's PrimitiveType (xla_data.proto), and the 6-bit
# floats PJRT names; sub-byte types are given as fractions.
DTYPE_BYTES: dict[str, float] = {
    "pred": 1, "s1": 0.125, "s2": 0.25, "s4": 0.5, "s8": 1, "s16": 2, "s32": 4, "s64": 8,
    "u1": 0.125, "u2": 0.25, "u4": 0.5, "u8": 1, "u16": 2, "u32": 4, "u64": 8,
    "f16": 2, "bf16": 2, "f32": 4, "f64": 8, "c64": 8, "c128": 16,
    "f4e2m1fn": 0.5, "f8e3m4": 1, "f8e4m3": 1, "f8e4m3fn": 1, "f8e4m3fnuz": 1,
    "f8e4m3b11fnuz": 1, "f8e5m2": 1, "f8e5m2fnuz": 1, "f8e8m0fnu": 1, "f6e2m3fn": 0.75,
    "f6e3m2fn": 0.75,
}  # fmt: skip
NON_ARRAY_TYPES = frozenset({"token", "opaque"})
# The types a kernel's indices, lengths, offsets and masks come in, not the data it computes on
# (the sub-byte integers are packed weights).
INDEX_DTYPES = frozenset({"s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64", "pred"})


@dataclass(frozen=True, slots=True)
class Layout:
    """A layout ``{minor_to_major:T(..)..S(n)..}``; only the parts that change a size are decoded."""

    minor_to_major: tuple[int, ...]
    tiles: tuple[tuple[int, ...], ...] = ()
    memory_space: int = 0
    element_size_bits: int = 0
    text: str = ""


def tiled_elements(dims: tuple[int, ...], layout: Layout) -> int:
    """Elements of an array as its layout's first tile stores it: the minor dimensions (in
    minor-to-major order) rounded up to the tile, which may have more dimensions than the array."""
    order = layout.minor_to_major or tuple(range(len(dims) - 1, -1, -1))
    physical = [dims[d] for d in reversed(order)]  # major → minor
    tile = layout.tiles[0]
    physical = [1] * max(len(tile) - len(physical), 0) + physical
    for k, t in enumerate(reversed(tile)):
        i = len(physical) - 1 - k
        physical[i] = -(-physical[i] // t) * t
    return math.prod(physical)


@dataclass(frozen=True, slots=True)
class Shape:
    """An array, tuple, token or opaque shape. ``dims`` of a dynamic dimension is its bound."""

    dtype: str  # primitive type, "tuple", "token" or "opaque"
    dims: tuple[int, ...] = ()
    layout: Layout | None = None
    tuple_shapes: tuple[Shape, ...] = ()
    dynamic: tuple[bool, ...] = ()
    # What the cost rules ask of a shape over and over, worked out when it is made (a module
    # makes one Shape per distinct spelling, and its instructions share them):
    is_tuple: bool = field(init=False, compare=False, repr=False)
    is_array: bool = field(init=False, compare=False, repr=False)
    # element count of an array (1 for a scalar); 0 for tuples, tokens and opaques
    elements: int = field(init=False, compare=False, repr=False)
    # and, on first use, its text and its leaves (reports print it and walk them once a row)
    _text: str | None = field(default=None, init=False, compare=False, repr=False)
    _leaves: tuple[Shape, ...] | None = field(default=None, init=False, compare=False, repr=False)
    # and its size in bytes as the cost layer counts it (``cost.base.CostContext.size``), as
    # stored and padded to its tiles: a rule asks it of nearly every operand of every op, and a
    # slot is read several times faster than a memo keyed by the shape's id
    _bytes: int | None = field(default=None, init=False, compare=False, repr=False)
    _tiled_bytes: int | None = field(default=None, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        is_tuple = self.dtype == "tuple"
        is_array = not is_tuple and self.dtype not in NON_ARRAY_TYPES
        object.__setattr__(self, "is_tuple", is_tuple)
        object.__setattr__(self, "is_array", is_array)
        object.__setattr__(self, "elements", math.prod(self.dims) if is_array else 0)

    def leaves(self) -> list[Shape]:
        """Array leaves in order (nested tuples flattened; tokens dropped)."""
        found = self._leaves
        if found is None:
            if self.dtype == "tuple":
                found = tuple(leaf for s in self.tuple_shapes for leaf in s.leaves())
            else:
                found = (self,) if self.is_array else ()
            object.__setattr__(self, "_leaves", found)
        return list(found)

    def __str__(self) -> str:
        text = self._text
        if text is None:
            text = self._spell()
            object.__setattr__(self, "_text", text)
        return text

    def _spell(self) -> str:
        if self.dtype == "tuple":
            return "(" + ", ".join(str(s) for s in self.tuple_shapes) + ")"
        if not self.is_array:
            return f"{self.dtype}[]"
        dims = ",".join(
            f"<={d}" if self.dynamic and self.dynamic[i] else str(d)
            for i, d in enumerate(self.dims)
        )
        layout = "{" + self.layout.text + "}" if self.layout is not None else ""
        return f"{self.dtype}[{dims}]{layout}"


@dataclass(frozen=True, slots=True)
class Metadata:
    """``metadata={...}`` decoded: the JAX name scope and the Python source line of an op."""

    op_name: str = ""
    op_type: str = ""
    source_file: str = ""
    source_line: int = 0
    stack_frame_id: int = 0


@dataclass(frozen=True, slots=True)
class StackFrame:
    file: str
    function: str
    line: int
    parent: int  # frame id of the caller, 0 for none


_SPAN_BITS = 32  # an attribute span is (start << _SPAN_BITS) | length, into the module's text
_SPAN_MASK = (1 << _SPAN_BITS) - 1


def attribute_span(start: int, end: int) -> int | None:
    """``text[start:end]`` packed in one int (None if too long to pack): an instruction can keep
    where its attribute text is instead of a copy of it."""
    length = end - start
    return (start << _SPAN_BITS) | length if 0 <= length < 1 << _SPAN_BITS else None


def span_bounds(span: int) -> tuple[int, int]:
    """(start, end) of a span made by :func:`attribute_span`."""
    start = span >> _SPAN_BITS
    return start, start + (span & _SPAN_MASK)


# How many instructions keep their split (and decoded) attributes at once: the oldest goes back
# to its text (split again if asked again). The rules read a fused op's attributes once, while they
# price its fusion, and the parser a caller's once, to link its callees; kept for every one they
# were half of a large module's parsed memory. A module of up to a few thousand splits (GPT-2's
# step: 2k) never splits one twice.
_KEEP_SPLIT = 4096


def _keep_split(instr: Instruction, unsplit: str | int) -> None:
    """Note ``instr``'s split in its module's queue of splits (``Computation.splits``, one for
    all of a module's computations: the module holds it, no weak reference to each instruction
    needed); the oldest goes back to its text. An instruction outside a parsed module keeps it."""
    computation = instr.computation
    kept = computation.splits if computation is not None else None
    if kept is None:
        return
    kept.append((instr, unsplit))
    if len(kept) > _KEEP_SPLIT:
        oldest, text = kept.popleft()
        oldest._attrs = text
        oldest._cache = None  # and what was decoded from them


class Instruction:
    """One HLO instruction. ``attrs`` maps attribute names to their unparsed text.

    A plain class with ``__slots__`` rather than a dataclass: a large module has ~100k of them, and
    a hand-written ``__init__`` without default factories builds them about twice as fast. Compared
    by identity. The parser may hand over the attributes as their checked text (``", key=value, ..."``),
    or as where that text is in the module's source (:func:`attribute_span`, read through
    ``computation.source``): most instructions are never asked for them, and an int is a fifth of
    the memory of the string (the module keeps its text anyway). They are split into the dict on
    first use; in a fused computation they go back to their text when many others have been split
    since (see :func:`_keep_split`): a walk over a large module asks for most of those once.
    """

    __slots__ = (
        "_attrs",
        "_cache",
        "_place",
        "called",
        "computation",
        "name",
        "opcode",
        "operands",
        "payload",
        "shape",
    )  # fmt: skip

    def __init__(
        self,
        name: str,
        opcode: str,
        shape: Shape,
        operands: tuple[Instruction, ...],
        attrs: dict[str, str] | str | int,
        computation: Computation,
        line: int,
        is_root: bool = False,
        called: tuple[Computation, ...] = (),
        payload: str = "",  # text inside the parentheses of constant(...) / parameter(...)
    ) -> None:
        self.name = name
        self.opcode = opcode
        self.shape = shape
        self.operands = operands
        self._attrs = attrs
        self.computation = computation
        # Its line from its computation's first, and whether it is the root, in one small int
        # (Python shares those; an int a line and a flag would be two slots and an object). Once
        # in its computation's list, the parser moves a large one into the computation's
        # ``line_offsets`` (see :meth:`Computation.keep_place`) and this holds None.
        offset = line - computation.line if computation is not None else line
        self._place: int | Instruction | None = offset << 1 | is_root
        self.called = called  # most instructions call nothing: they share one empty tuple
        self.payload = payload
        self._cache: dict | None = None  # decoded attributes (hlo.attrs), made on first use

    @property
    def parameter_number(self) -> int | None:
        """A parameter's number (the operand its caller passes in its place); None for other
        instructions."""
        number = self.payload.strip() if self.opcode == "parameter" else ""
        return int(number) if number.isdigit() else None

    @classmethod
    def stand_in(
        cls, instr: Instruction, opcode: str, shape: Shape, attrs: dict[str, str] | str | int
    ) -> Instruction:
        """An op made while pricing ``instr`` (the op an async start wraps): ``instr``'s name,
        operands, callees and line; never its computation's root."""
        made = cls(instr.name, opcode, shape, instr.operands, attrs, None, 0, False, instr.called)
        made.computation = instr.computation
        made._place = instr  # its line is instr's, found when asked
        return made

    @property
    def line(self) -> int:
        """The (1-based) line of the text the instruction starts on (asked for in messages:
        where the offset was moved to its computation, its place in the list is searched)."""
        computation, place = self.computation, self._place
        if place is None:
            index = computation.instructions.index(self)
            return computation.line + computation.line_offsets[index]
        if place.__class__ is Instruction:
            return place.line
        offset = place >> 1
        return offset + computation.line if computation is not None else offset

    @property
    def is_root(self) -> bool:
        place = self._place  # a moved place was never a root's (Computation.keep_place)
        return place.__class__ is int and bool(place & 1)

    @property
    def attrs(self) -> dict[str, str]:
        attrs = self._attrs
        if attrs.__class__ is not dict:
            unsplit = attrs
            attrs = self._attrs = split_attributes(self.attr_text)
            _keep_split(self, unsplit)
        return attrs

    @property
    def attr_text(self) -> str | None:
        """The attributes' text as the parser kept it (None once split, or if never text): equal
        texts have equal attributes, so a reader of many instructions can split each text once."""
        attrs = self._attrs
        if attrs.__class__ is int:
            start, end = span_bounds(attrs)
            return self.computation.source[start:end]
        return attrs if attrs.__class__ is str else None

    def peek_attrs(self) -> dict[str, str]:
        """The attributes, without keeping the split form (one read of many instructions)."""
        attrs = self._attrs
        if attrs.__class__ is dict:
            return attrs
        return split_attributes(self.attr_text)

    def __repr__(self) -> str:
        return f"<{self.opcode} %{self.name} {self.shape}>"


@dataclass(slots=True, eq=False)
class Computation:
    name: str
    instructions: list[Instruction] = field(default_factory=list)
    root: Instruction | None = None
    is_entry: bool = False
    is_fusion: bool = False  # called by a fusion: its ops are not rows of a report
    line: int = 0
    execution_thread: str = "main"  # "sparsecore" for a TPU SparseCore offload
    source: str = field(default="", repr=False)  # the module's text (attribute spans point in it)
    # the module's instructions whose attributes are split, oldest first (see _keep_split): one
    # queue shared by its computations
    splits: deque[tuple[Instruction, str | int]] | None = field(default=None, repr=False)
    _parameters: list[Instruction] | None = field(default=None, repr=False)
    # each instruction's line from the computation's first, in the list's order (keep_place)
    line_offsets: array = field(default_factory=lambda: array("I"), repr=False)

    def __repr__(self) -> str:
        return f"<computation %{self.name} ({len(self.instructions)} instructions)>"

    def keep_place(self, instr: Instruction) -> None:
        """Append ``instr`` (made for this computation, not yet in it) to its instructions, its
        line to ``line_offsets``. A line far from the computation's first was an int object of
        the instruction's own (32 bytes, against 4 in the array; Python shares the small ones):
        the instruction then asks the list for its place when its line is wanted (a message).
        The root keeps its own (``is_root``)."""
        self.instructions.append(instr)
        place = instr._place
        self.line_offsets.append(place >> 1)
        if place > 256 and not place & 1:
            instr._place = None

    @property
    def parameters(self) -> list[Instruction]:
        """Its parameters by number (found once: every caller of a shared body asks)."""
        if self._parameters is None:
            params = [i for i in self.instructions if i.opcode == "parameter"]
            self._parameters = sorted(params, key=lambda p: int(p.payload or 0))
        return self._parameters


@dataclass(slots=True, eq=False)
class Module:
    name: str
    computations: dict[str, Computation]
    entry: Computation
    attrs: dict[str, str] = field(default_factory=dict)
    frames: dict[int, StackFrame] = field(default_factory=dict)
    source_text: str = field(default="", repr=False)

    @property
    def num_partitions(self) -> int:
        return int(self.attrs.get("num_partitions", "1"))

    @property
    def replica_count(self) -> int:
        return int(self.attrs.get("replica_count", "1"))

    def instructions(self):
        """All instructions of all computations, callees before callers."""
        for comp in self.computations.values():
            yield from comp.instructions
