"""HLO text → :class:`~hlo_roofline.hlo.ir.Module`.

The printer XLA uses (``compiled.as_text()``, ``--xla_dump_to`` files) writes one instruction per line,
so the parser works line by line. Almost every line is read by two regular expressions of the
lexer (:mod:`hlo_roofline.hlo.lexer`): one for the name, shape, opcode and operands
(``_SHORT_HEAD``; ``_FAST_HEAD`` where operands are printed with their shapes or comments), one
that checks the attributes (``_FAST_TAIL``, once per distinct text). A line they do not read
exactly goes to the careful path, where the lexer's scanner splits operands and attributes and
reports the column of whatever is wrong. Shapes are parsed once per distinct spelling (they repeat
a lot). Operands must be defined above their users, as XLA requires, and each opcode gets the
number of operands XLA's parser requires. Anything the parser does not understand raises
:class:`HloParseError` with the line, the column and the offending text. What is not syntax (call
signatures, parameter numbers, cycles) is checked by :mod:`hlo_roofline.hlo.verifier` as the
parser goes; reading files is :mod:`hlo_roofline.hlo.files`.

Beyond one instruction a line, XLA's printers write: attribute values with line breaks in them
(frontend attributes and pretty JSON backend configs are printed verbatim; a Pallas kernel's
``kernel_metadata``), read on from a line that ends inside ``{...}``; and, in ``--xla_dump_to``
files, ``%x#N`` for element N of tuple %x with no get-tuple-element printed, which the parser makes
back as XLA's parser does. Text cut short is refused: a computation the text does not close, and
no ``ENTRY`` where XLA's printer would have written one.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import deque
from collections.abc import Iterator
from sys import intern

from hlo_roofline._gc import gc_paused
from hlo_roofline.hlo.errors import HloParseError, SourceLine, line_text
from hlo_roofline.hlo.ir import (
    DTYPE_BYTES,
    NON_ARRAY_TYPES,
    Computation,
    Instruction,
    Layout,
    Module,
    Shape,
    StackFrame,
    attribute_span,
    span_bounds,
    tiled_elements,
)
from hlo_roofline.hlo.lexer import (
    _ALL_OPERANDS_NAMED,
    _ARRAY,
    _CALLED_ATTRS,
    _CALLED_KEY_TEXT,
    _COMMENT,
    _COMPUTATION_CLOSE,
    _COMPUTATION_HEAD,
    _FAST_ATTR,
    _FAST_ATTR_ITEM,
    _FAST_HEAD,
    _FAST_LINE,
    _FAST_OPERANDS,
    _FAST_TAIL,
    _INSTRUCTION_HEAD,
    _OPCODE,
    _OPERAND_NAME,
    _SHORT_HEAD,
    _TILE,
    _TILES,
    _called_names,
    _logical_end,
    _scan,
    _split_top_level,
    _Unclosed,
)
from hlo_roofline.hlo.verifier import (
    CALLER_OPCODES,
    check_acyclic,
    check_caller,
    check_parameter_numbers,
    check_shapes,
)

# How many operands an opcode takes, where XLA fixes it: (fewest, most, the count & 1 that is wrong:
# 1 where the count must be even, 0 where odd, -1 for either).
# Opcodes not listed (fusion, call, custom-call, tuple, async wrappers, ops a future XLA adds) take
# any number. A rule indexes the operands it reads, so a wrong count is an error of the text.
_UNARY = (
    "abs", "negate", "sign", "floor", "ceil", "round-nearest-afz", "round-nearest-even", "not",
    "popcnt", "count-leading-zeros", "clz", "is-finite", "real", "imag", "convert",
    "bitcast-convert", "reduce-precision", "exponential", "exponential-minus-one", "log",
    "log-plus-one", "logistic", "sqrt", "cbrt", "rsqrt", "tanh", "tan", "sine", "cosine", "erf",
    "acos", "acosh", "asin", "asinh", "atanh", "cosh", "sinh", "copy", "reshape", "transpose",
    "broadcast", "reverse", "slice", "bitcast", "get-tuple-element", "cholesky", "fft",
    "get-dimension-size", "copy-start", "copy-done", "while", "rng-bit-generator", "topk",
    "domain", "recv", "recv-done", "send-done", "all-gather-done", "all-reduce-done",
    "collective-permute-done", "async-done", "infeed",
)  # fmt: skip
_BINARY = (
    "add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "power", "atan2",
    "and", "or", "xor", "shift-left", "shift-right-arithmetic", "shift-right-logical", "compare",
    "complex", "stochastic-convert", "dot", "convolution", "triangular-solve", "pad", "gather",
    "set-dimension-size", "add-dependency", "send", "outfeed", "rng",
)  # fmt: skip
_AT_LEAST_ONE = (
    "concatenate", "sort", "map", "all-reduce", "all-gather", "all-to-all", "reduce-scatter",
    "all-reduce-start", "all-gather-start", "collective-permute", "dynamic-reshape",
    "collective-permute-start", "collective-broadcast", "opt-barrier",
)  # fmt: skip
_ANY = 2**62
_ARITY: dict[str, tuple[int, int, int]] = {
    **dict.fromkeys(_UNARY, (1, 1, -1)),
    **dict.fromkeys(_BINARY, (2, 2, -1)),
    **dict.fromkeys(("select", "clamp", "select-and-scatter", "batch-norm-training"), (3, 3, -1)),
    **dict.fromkeys(("batch-norm-inference", "batch-norm-grad"), (5, 5, -1)),
    **dict.fromkeys(("parameter", "constant", "iota", "partition-id", "replica-id"), (0, 0, -1)),
    **dict.fromkeys(("reduce", "reduce-window"), (2, _ANY, 1)),  # inputs and their inits
    "scatter": (3, _ANY, 0),  # inputs, the indices, updates
    **dict.fromkeys(_AT_LEAST_ONE, (1, _ANY, -1)),
    "dynamic-slice": (1, _ANY, -1),  # a scalar's takes no index (the verifier counts them)
    "async-update": (1, _ANY, -1),  # TPU7x SparseCore offloads pass it operands of their own
    "dynamic-update-slice": (2, _ANY, -1),
    "conditional": (2, _ANY, -1),
}
_FRAME_TABLES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
_KV = re.compile(r"(\w+)=(-?\d+)")
# A location and a frame as jax prints them, read by one match each (any other form, field by
# field with _KV): a module with stack frames has hundreds of both, and small ones spent an eighth
# of their parse decoding them
_LOCATION = re.compile(
    r"\{file_name_id=(\d+) function_name_id=(\d+) line=(\d+) end_line=\d+ column=\d+ "
    r"end_column=\d+\}"
)
_FRAME = re.compile(r"\{file_location_id=(\d+) parent_frame_id=(\d+)\}")
_LEAF_OPCODES = frozenset({"parameter", "constant"})
_CALLED_KEYS = frozenset(_CALLED_ATTRS)
_MAX_ELEMENTS = 2**63 - 1
_MAX_TUPLE_DEPTH = 64  # XLA nests a few levels; what walks shapes recursively must not overflow
# Parameter numbers and scalar constants ("0", "1", "-inf") repeat across a module: one string
# each, shared, rather than one per instruction.
_SHARED_PAYLOAD = 8
_TAILS_KEPT = 4096  # distinct attribute texts whose check is remembered within one parse
_SHAPE_CACHE_LIMIT = 100_000  # distinct spellings kept across parses (fuzzed input makes many)


_shape_cache: dict[str, Shape] = {}
_layout_cache: dict[str, Layout] = {}


def _parse_layout(text: str, line: SourceLine, pos: int) -> Layout:
    """A layout, checked on its own: minor_to_major a permutation of 0..n-1, tiles positive.
    (That n is the shape's rank is checked by the caller: the layout is cached by its text.)"""
    layout = _layout_cache.get(text)
    if layout is not None:
        return layout
    m2m_text, _, extras = text.partition(":")
    try:
        m2m = tuple(int(d) for d in m2m_text.split(",")) if m2m_text.strip() else ()
    except ValueError:
        raise line.error(f"bad layout '{{{text}}}'", pos) from None
    if sorted(m2m) != list(range(len(m2m))):
        message = f"layout {{{m2m_text}}} is not a permutation of the dimensions 0..{len(m2m) - 1}"
        raise line.error(message, pos)
    tiles: tuple[tuple[int, ...], ...] = ()
    memory_space = element_bits = 0
    if extras:
        t = _TILES.search(extras)
        if t:
            tiles = tuple(
                tuple(int(d) for d in group.split(",") if d) for group in _TILE.findall(t.group(1))
            )
            if any(not 0 < d <= _MAX_ELEMENTS for tile in tiles for d in tile) or () in tiles:
                raise line.error(f"layout tiles {t.group()} must be positive sizes", pos)
        s = re.search(r"(?<![A-Z])S\((\d+)\)", extras)
        memory_space = int(s.group(1)) if s else 0
        e = re.search(r"E\((\d+)\)", extras)
        element_bits = int(e.group(1)) if e else 0
    layout = Layout(m2m, tiles, memory_space, element_bits, text)
    _layout_cache[text] = layout
    return layout


def _parse_array(line: SourceLine, pos: int) -> tuple[Shape, int]:
    m = _ARRAY.match(line.text, pos)
    if m is None:
        raise line.error("expected a shape", pos)
    key = m.group()
    shape = _shape_cache.get(key)
    if shape is None:
        dtype, dims_text, layout_text = m.groups()
        if dtype not in DTYPE_BYTES and dtype not in NON_ARRAY_TYPES:
            raise line.error(f"unknown element type '{dtype}'", pos)
        dims: list[int] = []
        dynamic: list[bool] = []
        for d in dims_text.split(",") if dims_text.strip() else ():
            d = d.strip()
            is_dynamic = d.startswith("<=") or d == "?"
            try:
                dims.append(-1 if d == "?" else int(d[2:] if d.startswith("<=") else d))
            except ValueError:
                raise line.error(f"bad dimension '{d}'", pos + len(dtype) + 1) from None
            if dims[-1] < -1:
                raise line.error(f"negative dimension '{d}'", pos + len(dtype) + 1)
            if dims[-1] > _MAX_ELEMENTS:
                raise line.error(f"dimension '{d}' is past 2^63 - 1", pos + len(dtype) + 1)
            dynamic.append(is_dynamic)
        if math.prod(d for d in dims if d > 0) > _MAX_ELEMENTS:  # XLA's limit too (int64 sizes)
            raise line.error("shape has more than 2^63 elements", pos)
        layout = None
        if layout_text is not None:
            layout_pos = pos + m.group().index("{") + 1
            layout = _parse_layout(layout_text, line, layout_pos)
            if len(layout.minor_to_major) != len(dims):
                message = f"layout {{{layout_text}}} does not fit a shape of rank {len(dims)}"
                raise line.error(message, layout_pos)
            if layout.tiles and tiled_elements(tuple(dims), layout) > _MAX_ELEMENTS:
                message = f"layout {{{layout_text}}} tiles the shape past 2^63 elements"
                raise line.error(message, layout_pos)
        shape = Shape(dtype, tuple(dims), layout, (), tuple(dynamic) if any(dynamic) else ())
        _shape_cache[key] = shape
    return shape, m.end()


def _parse_shape(line: SourceLine, pos: int, depth: int = 0) -> tuple[Shape, int]:
    """Parse the shape starting at ``pos``; return it and the index just after it."""
    text = line.text
    if pos < len(text) and text[pos] == "(":
        if depth >= _MAX_TUPLE_DEPTH:
            raise line.error(f"tuple shape nested more than {_MAX_TUPLE_DEPTH} deep", pos)
        elements: list[Shape] = []
        pos += 1
        while True:
            while pos < len(text) and text[pos] == " ":
                pos += 1
            if pos < len(text) and text[pos] == ")":
                return Shape("tuple", tuple_shapes=tuple(elements)), pos + 1
            if text.startswith("/*", pos):  # /*index=5*/ comments inside long tuples
                end = text.find("*/", pos)
                if end < 0:
                    raise line.error("unterminated comment", pos)
                pos = end + 2
                continue
            element, pos = _parse_shape(line, pos, depth + 1)
            elements.append(element)
            while pos < len(text) and text[pos] == " ":
                pos += 1
            if pos < len(text) and text[pos] == ",":
                pos += 1
            elif pos >= len(text) or text[pos] != ")":
                raise line.error("expected ',' or ')' in tuple shape", pos)
    return _parse_array(line, pos)


def parse_shape(text: str) -> Shape:
    """Parse a standalone shape such as ``f32[8,128]{1,0}`` or ``(s32[], bf16[4])``."""
    line = SourceLine(1, text.strip())
    shape, end = _parse_shape(line, 0)
    if end != len(line.text):
        raise line.error("unexpected text after shape", end)
    return shape


def _parse_attrs(line: SourceLine, start: int) -> dict[str, str]:
    attrs: dict[str, str] = {}
    text = line.text
    for begin, end in _split_top_level(line, start):
        item = text[begin:end].strip()
        if not item:
            continue
        key, eq, value = item.partition("=")
        if not eq or not key or " " in key.strip():
            raise line.error(f"expected 'name=value', got '{item[:60]}'", begin + 1)
        attrs[key.strip()] = value.strip()
    return attrs


def _parse_header(header: SourceLine) -> tuple[str, dict[str, str]]:
    """The module's name and attributes from ``HloModule name, key=value, ...``."""
    name, comma, attr_text = header.text[len("HloModule ") :].partition(",")
    name, attr_text = name.strip(), comma + attr_text
    items = _FAST_ATTR_ITEM.findall(attr_text)
    covered = sum([len(key) + len(value) + 3 for key, value in items]) == len(attr_text)
    if covered and name and " " not in name:
        return name, dict(items)
    parts = _split_top_level(header, len("HloModule "))  # the careful path, for its errors
    name = header.text[parts[0][0] : parts[0][1]].strip()
    return name, _parse_attrs(header, parts[0][1] + 1) if len(parts) > 1 else {}


def _parse_instruction(
    line: SourceLine, head: re.Match, computation: Computation
) -> tuple[Instruction, list[tuple[str, int]]]:
    """The careful path for one instruction line: every error points at its column."""
    text = line.text
    pos = head.end()
    shape, end = _parse_shape(line, pos)
    if len(_shape_cache) < _SHAPE_CACHE_LIMIT:
        _shape_cache[text[pos:end]] = shape  # tuples too: the fast path finds them by spelling
    m = _OPCODE.match(text, end)
    if m is None:
        raise line.error("expected an opcode followed by '('", end)
    opcode = m.group(1)
    open_pos = m.end() - 1
    parsed = None
    if opcode not in _LEAF_OPCODES:
        parsed = _fast_operands_and_attrs(text, open_pos)
    if parsed is None:
        parsed = _slow_operands_and_attrs(line, opcode, open_pos)
    operands, attrs, payload = parsed
    instr = Instruction(
        head.group(2), opcode, shape, (), attrs, computation, line.number,
        head.group(1) is not None, (), payload,
    )  # fmt: skip
    return instr, operands


def _fast_instruction(
    m: re.Match, number: int, computation: Computation, start: int = -1, end: int = -1
) -> tuple[Instruction, list[str]] | None:
    """The instruction a ``_FAST_LINE`` match describes, with its operand names; None when the
    careful path must look at the line (a shape seen for the first time, an odd parameter). A
    ``_FAST_HEAD`` match comes with where its checked attributes are (``start``, ``end``)."""
    root, name, shape_text, opcode, operand_text, payload = m.group(1, 2, 3, 4, 5, 6)
    shape = _shape_cache.get(shape_text)
    if shape is None:
        return None
    if operand_text is not None and opcode not in _LEAF_OPCODES:
        names = _OPERAND_NAME.findall(operand_text)
        payload = ""
    elif opcode in _LEAF_OPCODES:
        payload = (payload if operand_text is None else operand_text).strip()
        names = []
        if opcode == "parameter" and not payload.isdigit():
            return None
        if len(payload) <= _SHARED_PAYLOAD:
            payload = intern(payload)
    else:
        return None  # operands printed without '%'
    if start < 0:
        start, end = m.span(7)
    attrs = attribute_span(start, end) if computation is not None and start < end else None
    if attrs is None:  # no attributes (one shared empty string), or a line read on its own
        attrs = m.string[start:end] if start < end else ""
    instr = Instruction(
        name, intern(opcode), shape, (), attrs, computation, number, root is not None, (), payload,
    )  # fmt: skip
    return instr, names


def _with_index_comments(names: list[str]) -> str:
    """Operands as XLA prints a long list: ``%a, %b, %c, %d, %e, /*index=5*/%f, ...``."""
    return ", ".join(
        [f"/*index={i}*/%{name}" if i % 5 == 0 and i else f"%{name}" for i, name in enumerate(names)]
    )


def _fast_forms(
    text: str,
    start: int,
    end: int,
    number: int,
    computation: Computation,
    tails: dict[str, tuple[int, str, bool]],
) -> tuple[Instruction, list[str]] | None:
    """The line ``text[start:end]`` as ``_FAST_HEAD`` and ``_FAST_LINE`` read it (operands with
    their shapes or comments, a payload in parentheses, attributes not as XLA prints them), or
    None for the careful path. ``tails``: attribute text -> its checked length (see the loop)."""
    m = _FAST_HEAD.match(text, start, end)
    if m is None:
        return None
    tail = m.end()
    attr_text = text[tail:end]
    known = tails.get(attr_text)
    if known is None:
        t = _FAST_TAIL.match(text, tail, end)
        checked = t.end(1) - tail if t is not None else -1
        if len(tails) < _TAILS_KEPT:
            calls = checked > 0 and _CALLED_KEY_TEXT.search(text, tail, tail + checked) is not None
            tails[attr_text] = (checked, attr_text[: max(checked, 0)], calls)
    else:
        checked = known[0]
    if checked >= 0:
        return _fast_instruction(m, number, computation, tail, tail + checked)
    m = _FAST_LINE.match(text, start, end)
    return _fast_instruction(m, number, computation) if m is not None else None


def _fast_operands_and_attrs(
    text: str, open_pos: int
) -> tuple[list[tuple[str, int]], dict[str, str], str] | None:
    """Operands and attributes of a line in XLA's usual form, or None to use the scanner."""
    m = _FAST_OPERANDS.match(text, open_pos)
    if m is None:
        return None
    inside = m.group(1)
    if inside.strip() and _ALL_OPERANDS_NAMED.fullmatch(inside) is None:
        return None  # operands printed without '%' (some or all): let the scanner split them
    base = open_pos + 1
    operands = [(o.group(1), base + o.start()) for o in _OPERAND_NAME.finditer(inside)]
    attrs: dict[str, str] = {}
    pos, end = m.end(), len(text)
    while pos < end:
        a = _FAST_ATTR.match(text, pos)
        if a is None:
            return None
        attrs[a.group(1)] = a.group(2).strip()
        pos = a.end()
    return operands, attrs, ""


def _slow_operands_and_attrs(
    line: SourceLine, opcode: str, open_pos: int
) -> tuple[list[tuple[str, int]], dict[str, str], str]:
    """The scanner's path: handles every form and reports the column of what is wrong."""
    text = line.text
    close, commas, attr_commas = _scan(line, open_pos)
    operands: list[tuple[str, int]] = []
    payload = ""
    if opcode in ("parameter", "constant"):
        payload = text[open_pos + 1 : close].strip()
        if opcode == "parameter" and not payload.isdigit():
            raise line.error("parameter needs its number", open_pos + 1)
    elif close > open_pos + 1:
        bounds = [open_pos, *commas, close]
        for a, b in itertools.pairwise(bounds):
            segment = text[a + 1 : b]
            if "/*" in segment:
                segment = _COMMENT.sub("", segment)
            name = segment.strip().rsplit(" ", 1)[-1].lstrip("%")
            if not name:
                raise line.error("empty operand", a + 1)
            operands.append((name, a + 1))
    attrs: dict[str, str] = {}
    if close + 1 < len(text):
        first = attr_commas[0] if attr_commas else len(text)
        if text[close + 1 : first].strip():
            raise line.error("expected ',' before attributes", close + 1)
        bounds = [*attr_commas, len(text)]
        for a, b in itertools.pairwise(bounds):
            key, eq, value = text[a + 1 : b].partition("=")
            key = key.strip()
            if not eq or not key or " " in key:
                item = text[a + 1 : b].strip()[:60]
                raise line.error(f"expected 'name=value', got '{item}'", a + 1)
            attrs[key] = value.strip()
    return operands, attrs, payload


def _names_computations(instr: Instruction) -> bool:
    attrs = instr._attrs
    if attrs.__class__ is int:  # a span of the module's text: searched in place
        return _CALLED_KEY_TEXT.search(instr.computation.source, *span_bounds(attrs)) is not None
    if attrs.__class__ is str:
        return _CALLED_KEY_TEXT.search(attrs) is not None
    return not _CALLED_KEYS.isdisjoint(attrs)


def _line_spans(text: str, number: int = 1, start: int = 0) -> Iterator[tuple[int, int, int]]:
    """(line number, start, end) of every line of ``text`` from ``start``, without splitting it."""
    find, size = text.find, len(text)
    while start <= size:
        end = find("\n", start)
        if end < 0:
            end = size
        yield number, start, end
        number, start = number + 1, end + 1


def _is_code(line: str) -> bool:
    """Not blank and not a ``//`` comment."""
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("//")


def _parse_frame_tables(
    text: str, spans: Iterator[tuple[int, int, int]]
) -> tuple[dict[int, StackFrame], tuple[int, int, int] | None]:
    """Read the FileNames/FunctionNames/FileLocations/StackFrames tables that precede computations.

    Returns the frames and the span of the first line after the tables (None at the end of text).
    """
    tables: dict[str, dict[int, str]] = {name: {} for name in _FRAME_TABLES}
    current = None
    following = None
    for span in spans:
        number, start, end = span
        stripped = text[start:end].strip()
        if stripped in tables:
            current = tables[stripped]
        elif not stripped:
            pass
        elif current is not None and stripped[0].isdigit():
            key, _, value = stripped.partition(" ")
            if not key.isdigit():
                raise HloParseError("bad table entry", number, 1, text[start:end])
            current[int(key)] = value.strip()
        else:
            following = span
            break
    frames: dict[int, StackFrame] = {}
    files = {k: v.strip('"') for k, v in tables["FileNames"].items()}
    functions = {k: v.strip('"') for k, v in tables["FunctionNames"].items()}
    locations = {k: _location(v) for k, v in tables["FileLocations"].items()}
    for frame_id, value in tables["StackFrames"].items():
        location, parent = _frame(value)
        file_id, function_id, line = locations.get(location, (0, 0, 0))
        frames[frame_id] = StackFrame(
            file=files.get(file_id, ""),
            function=functions.get(function_id, ""),
            line=line,
            # jax prints the parent's id plus one; 1 (and 0) mean "no parent".
            parent=max(parent - 1, 0),
        )
    return frames, following


def _location(value: str) -> tuple[int, int, int]:
    """A ``FileLocations`` entry's file name id, function name id and line (0 where absent)."""
    m = _LOCATION.fullmatch(value)
    if m is not None:
        return int(m[1]), int(m[2]), int(m[3])
    fields = dict(_KV.findall(value))
    return (
        int(fields.get("file_name_id", 0)),
        int(fields.get("function_name_id", 0)),
        int(fields.get("line", 0)),
    )


def _frame(value: str) -> tuple[int, int]:
    """A ``StackFrames`` entry's location id and parent frame id as printed (0 where absent)."""
    m = _FRAME.fullmatch(value)
    if m is not None:
        return int(m[1]), int(m[2])
    fields = dict(_KV.findall(value))
    return int(fields.get("file_location_id", 0)), int(fields.get("parent_frame_id", 0))


def parse_module(text: str) -> Module:
    """Parse the text of one HLO module (as printed by XLA) into a :class:`Module`."""
    try:
        with gc_paused():
            return _parse_module(text)
    except HloParseError:
        raise
    except RecursionError:
        raise HloParseError("input nested too deeply") from None
    except (ValueError, IndexError, KeyError, OverflowError) as exc:  # a gap in the checks above
        raise HloParseError(f"malformed HLO ({type(exc).__name__}: {exc})") from None


def _parse_module(text: str) -> Module:
    if not isinstance(text, str):
        raise HloParseError(f"expected HLO text (str), got {type(text).__name__}")
    if len(_shape_cache) >= _SHAPE_CACHE_LIMIT:
        _shape_cache.clear()
    spans = _line_spans(text)
    first = next((s for s in spans if _is_code(text[s[1] : s[2]])), None)
    if first is None:
        raise HloParseError("empty input: no 'HloModule' header")
    number, start, end = first
    header = SourceLine(number, text[start:end].rstrip())
    if not header.text.startswith("HloModule "):
        raise header.error("expected 'HloModule <name>'", 0)
    try:
        module_name, module_attrs = _parse_header(header)
    except _Unclosed as unclosed:  # an attribute over several lines (origin_recovery_table=)
        end = _header_end(text, start) if unclosed.in_braces else None
        if end is None:
            raise
        header = SourceLine(number, text[start:end].rstrip())
        _skip_to(spans, end)
        module_name, module_attrs = _parse_header(header)
    frames, following = _parse_frame_tables(text, spans)

    computations: dict[str, Computation] = {}
    splits: deque[tuple[Instruction, str | int]] = deque()  # the module's (Computation.splits)
    callers: list[tuple[Instruction, int]] = []  # instructions that name computations
    entry: Computation | None = None
    current: Computation | None = None
    by_name: dict[str, Instruction] = {}  # the current computation's instructions so far
    append = [].append  # and its instructions' append, bound once a computation
    keep_offset = [].append  # and its line offsets' (Computation.keep_place)
    parameters: list[Instruction] = []  # and its parameters
    elements: dict[tuple[int, int], Instruction] = {}  # get-tuple-elements made for "%x#N"
    short_head, fast_tail, called_key = _SHORT_HEAD.match, _FAST_TAIL.match, _CALLED_KEY_TEXT.search
    # the loop's other globals as locals (a lookup less each, per line)
    arity_of, caller_opcodes, shape_of = _ARITY.get, CALLER_OPCODES, _shape_cache.get
    operand_names, leaf_opcodes = _OPERAND_NAME.findall, _LEAF_OPCODES
    tails_kept, shared_payload = _TAILS_KEPT, _SHARED_PAYLOAD
    # attribute text -> its checked length (-1: not in the form), the checked text, which the
    # instructions after the first that have it share (a module repeats a few hundred texts over
    # thousands of lines: one string each, rather than an int per instruction saying where it is,
    # that the rows would slice out again), and whether an attribute in it may name a computation
    # (searched once a text, not once an instruction)
    tails: dict[str, tuple[int, str, bool]] = {}
    # The lines from the one after the tables, walked here rather than by _line_spans (its
    # tuples, a generator's step each): ``start``, ``end`` and ``number`` as it gives them.
    size, find = len(text), text.find
    next_number, next_start = following[:2] if following is not None else (0, size + 1)
    while next_start <= size:
        number, start = next_number, next_start
        end = find("\n", start)
        if end < 0:
            end = size
        next_number, next_start = number + 1, end + 1
        if current is not None:
            instr = None
            names_computations = None  # known from the attribute text (the short head's lines)
            other_form = True  # _FAST_HEAD may read what the short head did not
            m = short_head(text, start, end)
            if m is not None:
                tail = m.end()
                attr_text = text[tail:end]
                known = tails.get(attr_text)
                if known is None:
                    t = fast_tail(text, tail, end)
                    checked = t.end(1) - tail if t is not None else -1
                    attrs = None  # a text seen once: where it is (see below)
                    calls = checked > 0 and called_key(text, tail, tail + checked) is not None
                    if len(tails) < tails_kept:
                        tails[attr_text] = (checked, attr_text[: max(checked, 0)], calls)
                else:
                    checked, attrs, calls = known
                if checked >= 0:  # _fast_instruction's work, written out for the usual line
                    other_form = False  # (it would refuse a new shape or a parameter's payload)
                    root, name, shape_text, opcode, inside = m.groups()
                    shape = shape_of(shape_text)
                    if opcode in leaf_opcodes:
                        names = []
                        payload = inside.strip()
                        if len(payload) <= shared_payload:
                            payload = intern(payload)
                        if opcode == "parameter" and not payload.isdigit():
                            shape = None  # the careful path says what is wrong
                    else:
                        names = operand_names(inside)
                        payload = ""
                        # "%a, %b" exactly; any other form is read by _FAST_HEAD below
                        if ("%" + ", %".join(names) if names else "") != inside and (
                            "/*" not in inside or _with_index_comments(names) != inside
                        ):
                            shape = None
                            other_form = True
                    if shape is not None:
                        if attrs is None:  # where the text is: an int, not a copy of it
                            attrs = attribute_span(tail, tail + checked) if checked else ""
                            if attrs is None:  # too long to pack
                                attrs = attr_text[:checked]
                        instr = Instruction(
                            name, intern(opcode), shape, (), attrs, current, number,
                            root is not None, (), payload,
                        )  # fmt: skip
                        names_computations = calls
            # the other forms _FAST_HEAD and _FAST_LINE read (not a computation's "}")
            if other_form and (m is not None or text[start:end].strip() != "}"):
                parsed = _fast_forms(text, start, end, number, current, tails)
                if parsed is not None:
                    instr, names = parsed
            if instr is None:
                raw = text[start:end]
                stripped = raw.strip()
                closing = _COMPUTATION_CLOSE.match(stripped)
                if not stripped or stripped.startswith("//") or closing is not None:
                    pass
                else:
                    line = SourceLine(number, raw.rstrip())
                    head = _INSTRUCTION_HEAD.match(raw)
                    if head is None:
                        raise line.error("expected an instruction ('%name = shape opcode(...)')", 0)
                    try:
                        instr, operands = _parse_instruction(line, head, current)
                    except _Unclosed as unclosed:  # an attribute value with line breaks: read on
                        end = _logical_end(text, start) if unclosed.in_braces else None
                        if end is None:
                            raise
                        # on after the statement's last line (``end``: its line break)
                        next_number = number + 1 + text.count("\n", start, end)
                        next_start = end + 1
                        line = SourceLine(number, text[start:end].rstrip())
                        instr, operands = _parse_instruction(line, head, current)
                    names = [operand for operand, _ in operands]
            if instr is not None:
                if names:  # operands come before their users (XLA's rule): no cycles
                    try:
                        instr.operands = tuple([by_name[name] for name in names])
                    except KeyError:
                        instr.operands = tuple([
                            by_name.get(name)
                            or _tuple_element(name, by_name, elements, instr, text)
                            for name in names
                        ])  # fmt: skip
                code = instr.opcode
                arity = arity_of(code)
                if arity is not None:
                    n = len(names)
                    if n < arity[0] or n > arity[1] or n & 1 == arity[2]:
                        raise _wrong_arity(instr, arity, n, text[start:end])
                if code == "parameter":
                    parameters.append(instr)
                if by_name.setdefault(instr.name, instr) is not instr:  # the name is taken
                    spelled = instr.name
                    if not elements or _made_for_compact_gte(by_name[spelled], elements) is None:
                        col = text.find(spelled, start, end) - start
                        message = f"duplicate instruction name '{spelled}'"
                        raise HloParseError(message, number, col + 1, text[start:end].rstrip())
                    # The name of a get-tuple-element made for "%x#N" above: as in XLA's parser,
                    # this instruction takes the next free one, and the text's name means it.
                    instr.name = _unique_name(spelled, by_name)
                    by_name[spelled] = instr
                    by_name[instr.name] = instr
                append(instr)  # Computation.keep_place, written out (per instruction)
                place = instr._place
                keep_offset(place >> 1)
                if place & 1:  # is_root, read without the property
                    current.root = instr
                elif place > 256:
                    instr._place = None
                if code in caller_opcodes or (
                    names_computations
                    if names_computations is not None
                    else _names_computations(instr)
                ):
                    callers.append((instr, number))
                continue
            if closing is None:
                continue
            if closing.group(1):
                current.execution_thread = closing.group(1)
            if current.root is None and current.instructions:
                current.root = current.instructions[-1]
            if current.root is None:
                line = SourceLine(number, stripped)
                raise line.error(f"computation '{current.name}' has no instructions", 0)
            if parameters:
                current._parameters = check_parameter_numbers(parameters, text)
            computations[current.name] = current
            if current.is_entry:
                if entry is not None:
                    raise SourceLine(number, stripped).error("more than one ENTRY computation", 0)
                entry = current
            current = None
            continue
        raw = text[start:end]
        stripped = raw.strip()
        if not stripped or stripped.startswith("//"):
            continue
        m = _COMPUTATION_HEAD.match(raw)
        if m is None:
            line = SourceLine(number, raw.rstrip())
            raise line.error("expected a computation ('%name (...) -> ... {')", 0)
        current = Computation(
            m.group(2), is_entry=m.group(1) is not None, line=number, source=text, splits=splits
        )
        if current.name in computations:
            line = SourceLine(number, raw.rstrip())
            raise line.error(f"duplicate computation '{current.name}'", m.start(2))
        by_name = {}
        append = current.instructions.append
        keep_offset = current.line_offsets.append
        parameters = []
        elements = {}
    if current is not None:  # the text ends inside a computation: truncated
        lines = text.split("\n")
        last = max((n for n, raw in enumerate(lines) if raw.strip()), default=0)
        which = "ENTRY computation" if current.is_entry else "computation"
        message = (
            f"text ends inside {which} '{current.name}' (opened at line {current.line}): "
            "it is not closed with '}' (truncated?)"
        )
        raise HloParseError(message, last + 1, len(lines[last].rstrip()) + 1, lines[last])
    if not computations:
        raise HloParseError("no computations found", header.number, 1, header.text)
    if entry is None:
        entry = _implicit_entry(computations, callers, module_attrs, text)
    _resolve_callees(callers, computations, text)
    check_acyclic(callers, text)
    check_shapes(computations, text)
    return Module(module_name, computations, entry, module_attrs, frames, text)


def _skip_to(spans: Iterator[tuple[int, int, int]], end: int) -> None:
    """Advance ``spans`` past the lines that end at or before ``end`` (a statement's last line)."""
    for _, _, line_end in spans:
        if line_end >= end:
            return


def _header_end(text: str, start: int) -> int | None:
    """The end of an ``HloModule`` header printed over several lines: XLA ends a multi-line
    attribute with a line break and goes on with ``, key=value`` on the next line."""
    end = _logical_end(text, start)
    while end is not None and end < len(text):
        following = end + 1
        while following < len(text) and text[following] in " \t\r":
            following += 1
        if not text.startswith(",", following):
            break
        end = _logical_end(text, following)
    return end


# "%x#1#0": the dump printer's compact get-tuple-element (``--xla_dump_compact_gte``, on by default
# in XLA's dumps): element 0 of element 1 of %x, with no get-tuple-element instruction printed.
# XLA's parser makes the get-tuple-element instructions back, named "x_1" and "x_1_0" (".1", ".2",
# ... appended where a name is taken); so does this one, so the IR is the one ``as_text()`` gives.
_COMPACT_INDEX = re.compile(r"\d{1,9}")


def _tuple_element(
    name: str,
    by_name: dict[str, Instruction],
    elements: dict[tuple[int, int], Instruction],
    user: Instruction,
    text: str,
) -> Instruction:
    """The instruction operand ``name`` stands for: ``%x#N`` (and ``%x#N#M``...) is element N of
    the tuple %x, made once per computation as XLA's parser makes it."""
    base, _, rest = name.partition("#")
    operand = by_name.get(base)
    if operand is None or not rest:
        raise _unknown_operand(name, user.line, line_text(text, user.line))
    spelled = base
    for index_text in rest.split("#"):
        if _COMPACT_INDEX.fullmatch(index_text) is None:
            line = SourceLine(user.line, line_text(text, user.line))
            message = f"bad tuple index '#{index_text}' in operand '%{name}'"
            raise line.error(message, _operand_column(line.text, name))
        index = int(index_text)
        spelled = f"{spelled}_{index}"
        made = elements.get((id(operand), index))
        if made is None:
            shape = operand.shape
            if not shape.is_tuple or index >= len(shape.tuple_shapes):
                line = SourceLine(user.line, line_text(text, user.line))
                what = f"a tuple of {len(shape.tuple_shapes)}" if shape.is_tuple else str(shape)
                message = f"operand '%{name}': %{operand.name} is {what}, it has no element {index}"
                raise line.error(message, _operand_column(line.text, name))
            made = Instruction(
                _unique_name(spelled, by_name), "get-tuple-element", shape.tuple_shapes[index],
                (operand,), f", index={index}", user.computation, user.line,
            )  # fmt: skip
            elements[(id(operand), index)] = made
            by_name[made.name] = made
            user.computation.keep_place(made)  # just before its user
        operand = made
    return operand


def _made_for_compact_gte(
    instr: Instruction, elements: dict[tuple[int, int], Instruction]
) -> Instruction | None:
    """``instr`` if the parser made it for a ``%x#N`` operand (a later instruction of the same
    name is then renamed, as in XLA's parser)."""
    if instr.opcode != "get-tuple-element" or len(instr.operands) != 1:
        return None
    index = instr.attrs.get("index", "")
    found = elements.get((id(instr.operands[0]), int(index))) if index.isdigit() else None
    return instr if found is instr else None


def _unique_name(name: str, by_name: dict[str, Instruction]) -> str:
    """``name``, or ``name.1``, ``name.2``... the first that no instruction has."""
    if name not in by_name:
        return name
    k = 1
    while f"{name}.{k}" in by_name:
        k += 1
    return f"{name}.{k}"


def _implicit_entry(
    computations: dict[str, Computation],
    callers: list[tuple[Instruction, int]],
    module_attrs: dict[str, str],
    text: str,
) -> Computation:
    """The entry of a module without an ``ENTRY`` marker: the last computation, as in XLA's parser
    (hand-written modules). XLA's module printer always marks its entry, and writes
    ``entry_computation_layout=`` in the header: text that has the layout but no marker, or whose
    last computation is called by another, was cut before its entry computation."""
    last = list(computations.values())[-1]
    called = any(_names_computation(instr, last.name) for instr, _ in callers)
    if "entry_computation_layout" in module_attrs or called:
        lines = text.split("\n")
        end = max((n for n, raw in enumerate(lines) if raw.strip()), default=0)
        reason = (
            f"its last computation '{last.name}' is called by another"
            if called
            else "the header has entry_computation_layout= (printed by XLA)"
        )
        message = (
            f"no ENTRY computation, and {reason}: the text was cut before its entry (truncated?)"
        )
        raise HloParseError(message, end + 1, len(lines[end].rstrip()) + 1, lines[end])
    last.is_entry = True
    return last


def _names_computation(instr: Instruction, name: str) -> bool:
    """Whether one of ``instr``'s calls=, body=, to_apply=... attributes names computation ``name``."""
    attrs = instr.attrs
    return any(name in _called_names(attrs[key]) for key in _CALLED_ATTRS if key in attrs)


def _wrong_arity(
    instr: Instruction, arity: tuple[int, int, int], count: int, raw: str
) -> HloParseError:
    fewest, most, odd_is_wrong = arity
    if most == fewest:
        wanted = f"{fewest} operand{'' if fewest == 1 else 's'}"
    elif odd_is_wrong >= 0:
        parity = "even" if odd_is_wrong else "odd"
        wanted = f"an {parity} number of operands (at least {fewest})"
    else:
        wanted = f"at least {fewest} operand{'' if fewest == 1 else 's'}"
    line = SourceLine(instr.line, raw.rstrip())
    col = line.text.find(instr.opcode + "(", line.text.find("="))
    return line.error(
        f"{instr.opcode} takes {wanted}, not {count}", max(col, 0) + len(instr.opcode)
    )


def _unknown_operand(name: str, number: int, raw: str) -> HloParseError:
    line = SourceLine(number, raw.rstrip())
    message = f"unknown operand '%{name}' (not defined above)"
    return line.error(message, _operand_column(line.text, name))


def _operand_column(line: str, name: str) -> int:
    """Where operand ``name`` is written in its user's operand list (0 if not found)."""
    operands = line.find("(", line.find("="))
    col = line.find("%" + name, operands)
    if col < 0:  # printed without '%'
        col = line.find(name, operands)
    return max(col, 0)


def _resolve_callees(
    callers: list[tuple[Instruction, int]], computations: dict[str, Computation], text: str
) -> None:
    """Link each caller to the computations its attributes name (and mark fusion bodies); the
    verifier checks each call as it is linked."""
    agree: dict[tuple[int, int], bool] = {}  # shape pairs already compared
    for instr, number in callers:
        attrs = instr.attrs  # kept for the rules, as long as the most recent splits are
        called = []
        named = _CALLED_KEYS.intersection(attrs)
        # one attribute names computations (a fusion's calls=, a reduce's to_apply=): read it
        # alone; several: in _CALLED_ATTRS' order (a while loop's body, then its condition)
        for key in named if len(named) == 1 else _CALLED_ATTRS:
            value = attrs.get(key)
            if value is None:
                continue
            for name in _called_names(value):
                callee = computations.get(name)
                if callee is None:
                    line = SourceLine(number, line_text(text, number))
                    col = line.text.find(key + "=")
                    raise line.error(f"unknown computation '%{name}' in {key}=", max(col, 0))
                called.append(callee)
        instr.called = tuple(called)
        check_caller(instr, attrs, number, text, agree)
        if instr.opcode == "fusion":
            for callee in instr.called:
                callee.is_fusion = True
