"""HLO text → :class:`~hlo_roofline.hlo.ir.Module`.

The printer XLA uses (``compiled.as_text()``, ``--xla_dump_to`` files) writes one instruction per line,
so the parser works line by line: a regular expression finds the instruction head, a small scanner that
understands quotes, comments and nested brackets splits operands and attributes, and shapes are parsed
once per distinct spelling (they repeat a lot). Anything it does not understand raises
:class:`HloParseError` with the line, the column and the offending text.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from hlo_roofline._gc import gc_paused
from hlo_roofline.hlo.ir import (
    DTYPE_BYTES,
    NON_ARRAY_TYPES,
    Computation,
    Instruction,
    Layout,
    Module,
    Shape,
    StackFrame,
)


class HloParseError(ValueError):
    """Malformed HLO text; ``line`` and ``column`` are 1-based, ``text`` is the offending line."""

    def __init__(self, message: str, line: int = 0, column: int = 0, text: str = "") -> None:
        self.message, self.line, self.column, self.text = message, line, column, text
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"line {self.line}:{self.column}: " if self.line else ""
        if not self.text:
            return where + self.message
        snippet = self.text if len(self.text) <= 200 else self.text[: max(self.column, 1) + 80]
        return f"{where}{self.message}\n  {snippet}\n  {' ' * max(self.column - 1, 0)}^"


# One regex pass splits a line into the tokens that matter for structure. Strings, comments,
# bracket groups with no nested brackets (dims "[8,128]", layouts "{1,0}", metadata "{op_name=...}")
# come out as single tokens; every other token is one character that opens, closes or separates.
_TOKEN = re.compile(
    r'"(?:[^"\\]|\\.)*"'
    r"|/\*.*?\*/"
    r"|\[[^\[\]\"{}()]*\]"
    r'|\{(?:[^{}"\[\]()]|"(?:[^"\\]|\\.)*")*\}'
    r'|[(){}\[\],"]'
)
_CLOSER = {"(": ")", "{": "}", "[": "]"}

# The fast path: regular expressions (possessive, so they never backtrack) for the operand list and
# each attribute of a well-formed line. Whatever they do not match exactly goes to the scanner.
_STRING = r'"(?:[^"\\]++|\\.)*+"'


def _nested_braces(depth: int) -> str:
    group = r'\{(?:[^{}"]++|' + _STRING + r")*+\}"
    for _ in range(depth):
        group = r'\{(?:[^{}"]++|' + _STRING + "|" + group + r")*+\}"
    return group


_FAST_OPERANDS = re.compile(r'\(((?:[^()"]++|\((?:[^()"]++|\([^()"]*+\))*+\))*+)\)')
_FAST_ATTR = re.compile(
    r",\s*([\w.\-]+)=((?:[^,{}()\[\]\"]++|"
    + _STRING
    + "|"
    + _nested_braces(6)
    + r"|\[[^\[\]]*+\]|\([^()]*+\))++)\s*"
)
_OPERAND_NAME = re.compile(r"%([^\s,()%]+)")
_INSTRUCTION_HEAD = re.compile(r"\s*(ROOT\s+)?%?([^\s=%]+)\s*=\s*")
_OPCODE = re.compile(r"\s*([a-z][a-z0-9\-_]*)\(")
_ARRAY = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\](?:\{([^}]*)\})?")
_COMPUTATION_HEAD = re.compile(r"\s*(ENTRY\s+)?%?([^\s(){}=%]+)\s*(.*)\{\s*$")
_TILE = re.compile(r"\(([\d,]*)\)")
_TILES = re.compile(r"T((?:\([\d,]*\))+)")
_COMMENT = re.compile(r"/\*.*?\*/")
_CALLED_ATTRS = (
    "calls", "to_apply", "body", "condition", "select", "scatter",
    "true_computation", "false_computation", "branch_computations",
)  # fmt: skip
# Attributes an opcode cannot do without: XLA's parser rejects the op when they are missing.
_REQUIRED_CALLEES = {
    "fusion": ("calls",), "while": ("body", "condition"), "call": ("to_apply",),
    "reduce": ("to_apply",), "reduce-window": ("to_apply",), "map": ("to_apply",),
    "scatter": ("to_apply",), "select-and-scatter": ("select", "scatter"),
    "all-reduce": ("to_apply",), "reduce-scatter": ("to_apply",), "async-start": ("calls",),
}  # fmt: skip
_FRAME_TABLES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
_KV = re.compile(r"(\w+)=(-?\d+)")


class _Line:
    """One source line and its number, for errors that point at the right column."""

    __slots__ = ("number", "text")

    def __init__(self, number: int, text: str) -> None:
        self.number, self.text = number, text

    def error(self, message: str, pos: int) -> HloParseError:
        return HloParseError(message, self.number, pos + 1, self.text)


def _scan(line: _Line, start: int, grouped: bool = True) -> tuple[int, list[int], list[int]]:
    """Scan ``line.text`` from ``start`` to its end, checking that brackets balance.

    With ``grouped``, ``start`` is an opening bracket: returns the index of the bracket that closes
    it and the commas directly inside it. Always returns the commas outside every bracket after
    that (the separators of an attribute list).
    """
    text = line.text
    stack: list[str] = []
    close = -1
    inner: list[int] = []
    outer: list[int] = []
    for m in _TOKEN.finditer(text, start):
        tok = m.group()
        if len(tok) != 1:
            continue  # a string, comment or flat bracket group
        if tok == ",":
            depth = len(stack)
            if depth == 0:
                outer.append(m.start())
            elif depth == 1 and close < 0 and grouped:
                inner.append(m.start())
        elif tok in _CLOSER:
            stack.append(_CLOSER[tok])
        elif tok == '"':
            raise line.error("unterminated string", m.start())
        else:
            if not stack or stack.pop() != tok:
                raise line.error(f"unbalanced '{tok}'", m.start())
            if not stack and close < 0 and grouped:
                close = m.start()
    if stack:
        raise line.error(f"missing '{stack[-1]}'", len(text))
    return close, inner, outer


def _split_top_level(line: _Line, start: int) -> list[tuple[int, int]]:
    """Split ``line.text[start:]`` on commas outside brackets and quotes; return (begin, end) spans."""
    _, _, commas = _scan(line, start, grouped=False)
    bounds = [start - 1, *commas, len(line.text)]
    return [(a + 1, b) for a, b in itertools.pairwise(bounds)]


_shape_cache: dict[str, Shape] = {}
_layout_cache: dict[str, Layout] = {}


def _parse_layout(text: str, line: _Line, pos: int) -> Layout:
    layout = _layout_cache.get(text)
    if layout is not None:
        return layout
    m2m_text, _, extras = text.partition(":")
    try:
        m2m = tuple(int(d) for d in m2m_text.split(",")) if m2m_text.strip() else ()
    except ValueError:
        raise line.error(f"bad layout '{{{text}}}'", pos) from None
    tiles: tuple[tuple[int, ...], ...] = ()
    memory_space = element_bits = 0
    if extras:
        t = _TILES.search(extras)
        if t:
            tiles = tuple(
                tuple(int(d) for d in group.split(",") if d) for group in _TILE.findall(t.group(1))
            )
        s = re.search(r"(?<![A-Z])S\((\d+)\)", extras)
        memory_space = int(s.group(1)) if s else 0
        e = re.search(r"E\((\d+)\)", extras)
        element_bits = int(e.group(1)) if e else 0
    layout = Layout(m2m, tiles, memory_space, element_bits, text)
    _layout_cache[text] = layout
    return layout


def _parse_array(line: _Line, pos: int) -> tuple[Shape, int]:
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
            dynamic.append(is_dynamic)
        layout = None
        if layout_text is not None:
            layout = _parse_layout(layout_text, line, pos + m.group().index("{") + 1)
        shape = Shape(dtype, tuple(dims), layout, (), tuple(dynamic) if any(dynamic) else ())
        _shape_cache[key] = shape
    return shape, m.end()


def _parse_shape(line: _Line, pos: int) -> tuple[Shape, int]:
    """Parse the shape starting at ``pos``; return it and the index just after it."""
    text = line.text
    if pos < len(text) and text[pos] == "(":
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
            element, pos = _parse_shape(line, pos)
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
    line = _Line(1, text.strip())
    shape, end = _parse_shape(line, 0)
    if end != len(line.text):
        raise line.error("unexpected text after shape", end)
    return shape


def _parse_attrs(line: _Line, start: int) -> dict[str, str]:
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


def _called_names(value: str) -> list[str]:
    return [v.strip().lstrip("%") for v in value.strip("{} ").split(",") if v.strip()]


class _Pending:
    """An instruction whose operands and callees are resolved once its computation is complete."""

    __slots__ = ("instr", "line", "operands")

    def __init__(self, instr: Instruction, line: _Line, operands: list[tuple[str, int]]) -> None:
        self.instr, self.line, self.operands = instr, line, operands


def _parse_instruction(
    line: _Line, head: re.Match, computation: Computation
) -> tuple[Instruction, list[tuple[str, int]]]:
    text = line.text
    pos = head.end()
    shape, pos = _parse_shape(line, pos)
    m = _OPCODE.match(text, pos)
    if m is None:
        raise line.error("expected an opcode followed by '('", pos)
    opcode = m.group(1)
    open_pos = m.end() - 1
    parsed = None
    if opcode not in ("parameter", "constant"):
        parsed = _fast_operands_and_attrs(text, open_pos)
    if parsed is None:
        parsed = _slow_operands_and_attrs(line, opcode, open_pos)
    operands, attrs, payload = parsed
    instr = Instruction(
        name=head.group(2),
        opcode=opcode,
        shape=shape,
        operands=[],
        attrs=attrs,
        computation=computation,
        line=line.number,
        is_root=head.group(1) is not None,
        payload=payload,
    )
    return instr, operands


def _fast_operands_and_attrs(
    text: str, open_pos: int
) -> tuple[list[tuple[str, int]], dict[str, str], str] | None:
    """Operands and attributes of a line in XLA's usual form, or None to use the scanner."""
    m = _FAST_OPERANDS.match(text, open_pos)
    if m is None:
        return None
    inside = m.group(1)
    if inside.strip() and "%" not in inside:
        return None  # operands printed without '%': let the scanner split them
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
    line: _Line, opcode: str, open_pos: int
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


def _parse_frame_tables(lines: list[str], i: int) -> tuple[dict[int, StackFrame], int]:
    """Read the FileNames/FunctionNames/FileLocations/StackFrames tables that precede computations."""
    tables: dict[str, dict[int, str]] = {name: {} for name in _FRAME_TABLES}
    current = None
    while i < len(lines):
        stripped = lines[i].strip()
        if stripped in tables:
            current = tables[stripped]
        elif not stripped:
            pass
        elif current is not None and stripped[0].isdigit():
            key, _, value = stripped.partition(" ")
            if not key.isdigit():
                raise HloParseError("bad table entry", i + 1, 1, lines[i])
            current[int(key)] = value.strip()
        else:
            break
        i += 1
    frames: dict[int, StackFrame] = {}
    files = {k: v.strip('"') for k, v in tables["FileNames"].items()}
    functions = {k: v.strip('"') for k, v in tables["FunctionNames"].items()}
    locations = {k: dict(_KV.findall(v)) for k, v in tables["FileLocations"].items()}
    for frame_id, value in tables["StackFrames"].items():
        fields = dict(_KV.findall(value))
        loc = locations.get(int(fields.get("file_location_id", 0)), {})
        frames[frame_id] = StackFrame(
            file=files.get(int(loc.get("file_name_id", 0)), ""),
            function=functions.get(int(loc.get("function_name_id", 0)), ""),
            line=int(loc.get("line", 0)),
            # jax prints the parent's id plus one; 1 (and 0) mean "no parent".
            parent=max(int(fields.get("parent_frame_id", 0)) - 1, 0),
        )
    return frames, i


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
    lines = text.split("\n")
    i = 0
    while i < len(lines) and (not lines[i].strip() or lines[i].lstrip().startswith("//")):
        i += 1
    if i == len(lines):
        raise HloParseError("empty input: no 'HloModule' header")
    header = _Line(i + 1, lines[i].rstrip())
    if not header.text.startswith("HloModule "):
        raise header.error("expected 'HloModule <name>'", 0)
    parts = _split_top_level(header, len("HloModule "))
    name = header.text[parts[0][0] : parts[0][1]].strip()
    module_attrs = _parse_attrs(header, parts[0][1] + 1) if len(parts) > 1 else {}
    frames, i = _parse_frame_tables(lines, i + 1)

    computations: dict[str, Computation] = {}
    pending: list[_Pending] = []
    entry: Computation | None = None
    current: Computation | None = None
    by_name: dict[str, Instruction] = {}
    current_pending: list[_Pending] = []
    for number in range(i, len(lines)):
        raw = lines[number]
        stripped = raw.strip()
        if not stripped or stripped.startswith("//"):
            continue
        line = _Line(number + 1, raw.rstrip())
        if current is None:
            m = _COMPUTATION_HEAD.match(raw)
            if m is None:
                raise line.error("expected a computation ('%name (...) -> ... {')", 0)
            current = Computation(m.group(2), is_entry=m.group(1) is not None, line=number + 1)
            if current.name in computations:
                raise line.error(f"duplicate computation '{current.name}'", m.start(2))
            by_name, current_pending = {}, []
            continue
        if stripped == "}":
            _resolve_operands(current_pending, by_name)
            if current.root is None and current.instructions:
                current.root = current.instructions[-1]
            if current.root is None:
                raise line.error(f"computation '{current.name}' has no instructions", 0)
            computations[current.name] = current
            if current.is_entry:
                if entry is not None:
                    raise line.error("more than one ENTRY computation", 0)
                entry = current
            pending.extend(current_pending)
            current = None
            continue
        head = _INSTRUCTION_HEAD.match(raw)
        if head is None:
            raise line.error("expected an instruction ('%name = shape opcode(...)')", 0)
        instr, operands = _parse_instruction(line, head, current)
        if instr.name in by_name:
            raise line.error(f"duplicate instruction name '{instr.name}'", head.start(2))
        by_name[instr.name] = instr
        current.instructions.append(instr)
        if instr.is_root:
            current.root = instr
        current_pending.append(_Pending(instr, line, operands))
    if current is not None:
        last = max((n for n, raw in enumerate(lines) if raw.strip()), default=0)
        message = f"computation '{current.name}' is not closed with '}}'"
        raise HloParseError(message, last + 1, 1, lines[last])
    if not computations:
        raise HloParseError("no computations found", header.number, 1, header.text)
    if entry is None:  # XLA's rule: without an ENTRY marker the last computation is the entry
        entry = list(computations.values())[-1]
        entry.is_entry = True
    _resolve_callees(pending, computations)
    return Module(name, computations, entry, module_attrs, frames, text)


def _resolve_operands(pending: list[_Pending], by_name: dict[str, Instruction]) -> None:
    for p in pending:
        ops = p.instr.operands
        for name, col in p.operands:
            operand = by_name.get(name)
            if operand is None:
                raise p.line.error(f"unknown operand '%{name}'", col)
            ops.append(operand)


def _resolve_callees(pending: list[_Pending], computations: dict[str, Computation]) -> None:
    for p in pending:
        instr = p.instr
        attrs = instr.attrs
        for key in _CALLED_ATTRS:
            value = attrs.get(key)
            if value is None:
                continue
            for name in _called_names(value):
                callee = computations.get(name)
                if callee is None:
                    col = p.line.text.find(key + "=")
                    raise p.line.error(f"unknown computation '%{name}' in {key}=", max(col, 0))
                instr.called.append(callee)
        for key in _REQUIRED_CALLEES.get(instr.opcode, ()):
            if key not in attrs:
                raise p.line.error(f"{instr.opcode} needs {key}=", 0)
        if instr.opcode == "conditional" and not instr.called:
            raise p.line.error("conditional needs branch_computations=", 0)
        if instr.opcode == "fusion":
            for callee in instr.called:
                callee.is_fusion = True


def parse_file(path: str | Path) -> Module:
    """Parse an HLO text file; a parse error names the file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise HloParseError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        return parse_module(text)
    except HloParseError as exc:
        exc.message = f"{path}: {exc.message}"
        raise exc from None


def parse(path_or_text: str | Path) -> Module:
    """Parse HLO given either as text or as the path of a text file."""
    if isinstance(path_or_text, Path):
        return parse_file(path_or_text)
    text = path_or_text
    if isinstance(text, str) and text.strip() and "\n" not in text and "HloModule" not in text:
        return parse_file(text)
    return parse_module(path_or_text)
