"""HLO's lexical grammar: the regular expressions that read a line at once, and the scanner that
splits the lines they do not read, reporting the column of whatever is wrong.

Two fast paths, both regular expressions whose quantifiers are all possessive (they never backtrack):
``_FAST_LINE`` reads a whole instruction line (name, shape, opcode, operands, attributes), and
``_FAST_OPERANDS`` + ``_FAST_ATTR`` read the operands and attributes of a line whose head the parser
read itself. A line neither reads goes to the careful path: ``_scan``, which understands quotes,
comments and nested brackets. :func:`split_attributes` splits attribute text the fast paths have
checked; the IR calls it when an instruction's attributes are first asked for.
"""

from __future__ import annotations

import itertools
import re
from sys import intern

from hlo_roofline.hlo.errors import HloParseError, SourceLine


def _atomic(pattern: str) -> str:
    """``pattern`` with each possessive repeat of a group, ``(...)*+``, written as the atomic group
    ``(?>(...)*)``: the same language. Python 3.11.0 to 3.11.2 match a possessive repeat of a
    group wrongly (``(?:ab*+c)*+`` matches "a" of "ab"), so there the fast paths use these."""
    out: list[str] = []
    opened: list[int] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if c == "[":  # a class: up to its unescaped "]" (a "]" first in it is literal)
            j = i + 1 + (pattern.startswith("^", i + 1))
            j += pattern.startswith("]", j)
            while pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            out.append(pattern[i : j + 1])
            i = j + 1
            continue
        out.append(c)
        i += 1
        if c == "(":
            opened.append(len(out) - 1)
        elif c == ")":
            start = opened.pop()
            m = _POSSESSIVE.match(pattern, i)
            if m is not None:
                group = "".join(out[start:])
                del out[start:]
                out.append(f"(?>{group}{m.group(1)})")
                i = m.end()
    return "".join(out)


_POSSESSIVE = re.compile(r"([*+?]|\{\d*,?\d*\})\+")
# Whether this Python matches possessive repeats of groups right (3.11.3 and later do).
_compile = (
    re.compile if re.match(r"(?:ab*+c)*+", "ab").end() == 0 else lambda p: re.compile(_atomic(p))
)
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
# The fast paths use regular expressions whose quantifiers are all possessive, so they never
# backtrack: a line they do not match fails in linear time and goes to the careful path. Strings and
# brace groups are written "unrolled" (runs of plain characters between the special ones), which
# the regex engine walks several times faster than an alternation tried at every character.
_STRING = r'"[^"\\]*+(?:\\.[^"\\]*+)*+"'


def _nested_braces(depth: int) -> str:
    """A ``{...}`` group holding strings and up to ``depth`` levels of nested groups."""
    group = r'\{[^{}"]*+(?:' + _STRING + r'[^{}"]*+)*+\}'
    for _ in range(depth):
        group = r'\{[^{}"]*+(?:(?:' + _STRING + "|" + group + r')[^{}"]*+)*+\}'
    return group


_BRACES = _nested_braces(6)
_FAST_OPERANDS = _compile(r'\(((?:[^()"]++|\((?:[^()"]++|\([^()"]*+\))*+\))*+)\)')
_FAST_ATTR = _compile(
    r",\s*([\w.\-]+)=((?:[^,{}()\[\]\"]++|"
    + _STRING
    + "|"
    + _BRACES
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
    "true_computation", "false_computation", "branch_computations", "called_computations",
)  # fmt: skip
# The whole-line fast path: name, shape, opcode and operands by one expression (shapes nest at most
# three parentheses deep here), then the attributes, as XLA prints them: ", key=value" each.
_ARRAY_TEXT = r"[a-z][a-z0-9]*+\[[^\]]*+\](?:\{[^}]*+\})?+"
_TUPLE_TEXT = r"\((?:[^()]++|\((?:[^()]++|\([^()]*+\))*+\))*+\)"  # nested 3 deep at most
# an array, or a tuple (checked by the careful shape parser the first time it is seen)
_SHAPE_TEXT = _ARRAY_TEXT + "|" + _TUPLE_TEXT
_FAST_OPERAND = r"(?:/\*[^*]*+\*/\s*+)?(?:(?:" + _SHAPE_TEXT + r")\s++)?%[^\s,()%]++"
_ALL_OPERANDS_NAMED = _compile(
    r"\s*+" + _FAST_OPERAND + r"\s*+(?:,\s*+" + _FAST_OPERAND + r"\s*+)*+"
)  # every operand written "%name"
_ATTR_PIECE = r'[^,{}()\[\]"\s]++|' + _STRING + "|" + _BRACES + r"|\[[^\[\]]*+\]|\([^()]*+\)"
_ATTR_VALUE = r"(?:" + _ATTR_PIECE + r")(?:\s*+(?:" + _ATTR_PIECE + r"))*+"
_FAST_ATTR_ITEM_TEXT = r", ([\w.\-]++)=(" + _ATTR_VALUE + ")"
_HEAD_TO_OPERANDS = (
    r"\s*+(ROOT\s+)?%?((?!//)[^\s=%]++)\s*+=\s*+"  # [ROOT] %name =
    r"(" + _SHAPE_TEXT + r")\s*+"  # shape
    r"([a-z][a-z0-9\-_]*+)\("  # opcode(
)
_FAST_HEAD_TEXT = _HEAD_TO_OPERANDS + (
    r"(?:(\s*+(?:" + _FAST_OPERAND + r"\s*+(?:,\s*+" + _FAST_OPERAND + r"\s*+)*+)?)"  # %a, %b
    r'|([^()"]*+(?:\([^()"]*+\)[^()"]*+)*+))\)'  # or a parameter's / constant's payload
)
# the attributes, each ", key=value" as XLA prints them, checked in the same pass (a line whose
# attributes are not in that form is not matched: the careful path reads it)
_FAST_TAIL_TEXT = r"((?:, [\w.\-]++=" + _ATTR_VALUE + r")*+)\s*+$"
_FAST_LINE = _compile(_FAST_HEAD_TEXT + _FAST_TAIL_TEXT)
# The same in two steps (groups 1-6, then the attributes as group 1): a module repeats a few
# hundred attribute texts over thousands of lines, so the parser checks each text once. A line
# whose head is read but whose attributes are not is read by _FAST_LINE (it may read the head
# another way).
_FAST_HEAD = _compile(_FAST_HEAD_TEXT)
_FAST_TAIL = _compile(_FAST_TAIL_TEXT)
# The head as XLA's printer writes almost every line, read with less work than _FAST_HEAD: one
# space each side of "=" and before the opcode; an array shape as the text up to that space (the
# parser takes it only where it is a shape it has read before, that is, a whole one) or a tuple as
# _FAST_HEAD reads it; and between the parentheses no parenthesis or quote (group 5: "%a, %b", or
# a parameter's or constant's payload), which the parser checks itself. A line this does not
# read, or whose shape or operands the parser does not take, goes to _FAST_HEAD.
_SHORT_HEAD = _compile(
    r"\s*+(ROOT\s+)?%?((?!//)[^\s=%]++) = ([a-z][^ ]*+|" + _TUPLE_TEXT + r") "
    r'([a-z][a-z0-9\-_]*+)\(([^()"]*+)\)'
)
_FAST_ATTR_ITEM = _compile(_FAST_ATTR_ITEM_TEXT)  # one ", key=value"
_FAST_ATTRS = _compile("(?:" + _FAST_ATTR_ITEM_TEXT + ")*+")  # all of them, nothing skipped
# Any attribute that names a computation (a cheap test on the unsplit text; a false hit is harmless).
_CALLED_KEY_TEXT = re.compile(", (?:" + "|".join(_CALLED_ATTRS) + ")=")
# A computation ends with "}", or with '}, execution_thread="sparsecore"' when it runs on another
# thread of the chip (TPU SparseCore offload); the profiler's printer adds "// name" after it.
_COMPUTATION_CLOSE = re.compile(r'\}(?:\s*,\s*execution_thread="([^"]*)")?\s*(?://.*)?$')


class _Unclosed(HloParseError):
    """A line that ends inside a bracket or a string. Inside a ``{...}`` value the text may go on
    on the next line (``in_braces``): XLA prints some values verbatim, line breaks and all."""

    in_braces = False


def _unclosed(line: SourceLine, message: str, pos: int, in_braces: bool) -> _Unclosed:
    """The error for a line that ends open, made here so that the frame that raises it holds no
    reference to it: an exception a frame of its own traceback names is a cycle, which would keep
    the parser's frames (all of its working state) alive until the next collection, and the
    parser and the analysis run with collections paused."""
    error = line.error(message, pos, _Unclosed)
    error.in_braces = in_braces
    return error


def _scan(line: SourceLine, start: int, grouped: bool = True) -> tuple[int, list[int], list[int]]:
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
            raise _unclosed(line, "unterminated string", m.start(), stack[:1] == ["}"])
        else:
            if not stack or stack.pop() != tok:
                raise line.error(f"unbalanced '{tok}'", m.start())
            if not stack and close < 0 and grouped:
                close = m.start()
    if stack:
        raise _unclosed(line, f"missing '{stack[-1]}'", len(text), stack[0] == "}")
    return close, inner, outer


def _logical_end(text: str, start: int) -> int | None:
    """Where the instruction (or header) that starts at ``start`` ends: the first line break
    outside every bracket and string, which may be several lines down when an attribute's value
    holds line breaks (XLA prints frontend attributes and some backend configs verbatim). None
    when the text ends first (the caller reports the line that opened what is not closed). A
    closer that does not match ends it at the end of its line, for the caller to report there."""
    stack: list[str] = []
    find = text.find
    previous = start
    for m in _TOKEN.finditer(text, start):
        if not stack:
            newline = find("\n", previous, m.start())
            if newline >= 0:
                return newline
        tok = m.group()
        previous = m.end()
        if len(tok) != 1 or tok == ",":
            continue
        if tok in _CLOSER:
            stack.append(_CLOSER[tok])
        elif tok == '"':
            return None
        elif not stack or stack.pop() != tok:
            newline = find("\n", previous)
            return len(text) if newline < 0 else newline
    if stack:
        return None
    newline = find("\n", previous)
    return len(text) if newline < 0 else newline


def _split_top_level(line: SourceLine, start: int) -> list[tuple[int, int]]:
    """Split ``line.text[start:]`` on commas outside brackets and quotes; return (begin, end) spans."""
    _, _, commas = _scan(line, start, grouped=False)
    bounds = [start - 1, *commas, len(line.text)]
    return [(a + 1, b) for a, b in itertools.pairwise(bounds)]


def split_attributes(text: str) -> dict[str, str]:
    """``", key=value, ..."`` (already checked by ``_FAST_ATTRS``) as a dict."""
    return {intern(key): value for key, value in _FAST_ATTR_ITEM.findall(text)}


def _called_names(value: str) -> list[str]:
    return [v.strip().lstrip("%") for v in value.strip("{} ").split(",") if v.strip()]
