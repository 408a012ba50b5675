"""Fuzzing: real compiler output, mutated, through the parser and every cost rule.

Whatever the text, ``parse_module`` either returns a module or raises ``HloParseError``, and
``analyze_hlo`` on a module never raises (an op its rule cannot make sense of becomes a flagged
``unknown`` row), in bounded time. The suite runs a bounded number of cases; a long campaign is
``HLO_ROOFLINE_FUZZ_EXAMPLES=100000 .venv/bin/python -m pytest tests/test_fuzz.py`` (see
docs/performance.md).
"""

from __future__ import annotations

import math
import os
import re
import signal
import time
from contextlib import contextmanager

import pytest
from conftest import FIXTURES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hlo_roofline import HloParseError, analyze_hlo
from hlo_roofline.hlo import parse_module
from hlo_roofline.hlo import parser as hlo_parser

EXAMPLES = int(os.environ.get("HLO_ROOFLINE_FUZZ_EXAMPLES", "120"))
SECONDS_PER_EXAMPLE = float(os.environ.get("HLO_ROOFLINE_FUZZ_SECONDS", "20"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,  # time is checked per example below (machines in CI are shared and slow)
    database=None,  # no .hypothesis/ directory in the work tree
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# Real modules small enough to mutate quickly: every program's smaller targets.
SEEDS = sorted(p for p in FIXTURES.glob("*/*.hlo.txt") if p.stat().st_size <= 20_000)
TEXTS = [p.read_text() for p in SEEDS]
HUGE_DIMS = ("9999999999999,99999999999", "99999999999999999999999", ",".join(["9" * 22] * 15),
             "-5", "<=-1", "0,0,0", "?", "1," * 300 + "1")  # fmt: skip
JUNK = ("(", ")", "{", "}", "[", "]", '"', ",", "=", "%", ":", "/*", "*/", "\\", "\n", "\x00",
        "é", "ROOT ", "ENTRY ", "%x", "-1", "0", "}\n", "{\n", "T(0)", "S(", "<=")  # fmt: skip


class Hang(Exception):
    """An example ran past SECONDS_PER_EXAMPLE."""


@contextmanager
def time_limit(seconds: float):
    """Raise Hang in the main thread after ``seconds`` (where signals allow; else check after)."""
    start = time.monotonic()
    use_alarm = hasattr(signal, "setitimer") and _in_main_thread()
    if use_alarm:

        def expire(signum, frame):
            raise Hang(f"no result after {seconds} s")

        previous = signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    elapsed = time.monotonic() - start
    if elapsed > seconds:
        raise Hang(f"took {elapsed:.1f} s")


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def check(text: str) -> None:
    """The property: HloParseError or a module; analysis of a module never raises."""
    with time_limit(SECONDS_PER_EXAMPLE):
        try:
            module = parse_module(text)
        except HloParseError as exc:
            assert str(exc)  # the message (and its snippet) can be formatted
            return
        for cost_model in ("roofline", "xla"):
            report = analyze_hlo(module, cost_model=cost_model)
            ops = report.ops
            assert set(ops["unknown"].unique()) <= {True, False}
            for column in ("flops", "bytes_accessed", "transcendentals", "comm_bytes"):
                assert not ops[column].isna().any(), column
            assert 0.0 <= report.summary["coverage"] <= 1.0 or math.isnan(
                report.summary["coverage"]
            )


# -- mutations ----------------------------------------------------------------------------------

_TOKEN = re.compile(r"%[\w.\-]+|[a-z][a-z0-9]*\[[^\]]*\]|\w+|[^\w\s]")
_DIMS = re.compile(r"(?<=[a-z0-9])\[([^\]]*)\]")
_ATTR_VALUE = re.compile(r"(?<=, )([\w.\-]+)=")


@st.composite
def mutated(draw) -> str:
    text = TEXTS[draw(st.integers(0, len(TEXTS) - 1))]
    kind = draw(
        st.sampled_from(
            ["truncate", "swap", "junk", "bytes", "dims", "nest", "duplicate", "remove", "value",
             "repeat"]
        )
    )  # fmt: skip
    pos = draw(st.integers(0, len(text) - 1))
    if kind == "truncate":
        return text[:pos]
    if kind == "swap":  # two tokens (names, shapes, words, punctuation) trade places
        tokens = [m.span() for m in _TOKEN.finditer(text)]
        i, j = sorted(draw(st.lists(st.integers(0, len(tokens) - 1), min_size=2, max_size=2)))
        (a, b), (c, d) = tokens[i], tokens[j]
        if i == j:
            return text
        return text[:a] + text[c:d] + text[b:c] + text[a:b] + text[d:]
    if kind == "junk":
        return text[:pos] + draw(st.sampled_from(JUNK)) + text[pos + draw(st.integers(0, 3)) :]
    if kind == "bytes":
        junk = draw(st.binary(min_size=1, max_size=16)).decode("latin-1")
        return text[:pos] + junk + text[pos:]
    if kind == "dims":  # one shape's dimensions become huge, negative, zero or unknown
        spans = [m.span(1) for m in _DIMS.finditer(text)]
        a, b = spans[draw(st.integers(0, len(spans) - 1))]
        return text[:a] + draw(st.sampled_from(HUGE_DIMS)) + text[b:]
    if kind == "nest":  # deep tuples or brackets
        depth = draw(st.sampled_from([3, 40, 400, 3000]))
        opener, closer = draw(st.sampled_from([("(", ")"), ("{", "}"), ("[", "]"), ('"', "")]))
        inner = draw(st.sampled_from(["f32[]", "", "s32[2]{0}", "1"]))
        return text[:pos] + opener * depth + inner + closer * depth + text[pos:]
    lines = text.split("\n")
    k = draw(st.integers(0, len(lines) - 1))
    if kind == "duplicate":
        return "\n".join(lines[: k + 1] + lines[k:])
    if kind == "remove":
        return "\n".join(lines[:k] + lines[k + 1 :])
    if kind == "repeat":  # a whole computation twice, or a line many times
        return "\n".join(lines[:k] + [lines[k]] * draw(st.sampled_from([2, 50])) + lines[k + 1 :])
    # "value": one attribute's value replaced by something a rule must survive
    spans = [m.end() for m in _ATTR_VALUE.finditer(text)]
    if not spans:
        return text
    start = spans[draw(st.integers(0, len(spans) - 1))]
    end = start
    depth = 0
    while end < len(text) and text[end] != "\n" and (depth or text[end] != ","):
        depth += {"{": 1, "[": 1, "(": 1, "}": -1, "]": -1, ")": -1}.get(text[end], 0)
        end += 1
    value = draw(
        st.sampled_from(
            ["{}", "{99}", "{0,0,0,0}", "{-1}", "[]", "[0:-5]", "{[0:1:0]}", "-1", "0",
             "99999999999999999999", "{size=0x0 stride=0 pad=-9_-9}", "{{0,1},{2}}", "[2,2]<=[3]",
             "mesh['a'=0] {'b'}", '"not json"', "{\"n\":\"x\"}", "b01f_01io->", "%nowhere",
             "{%nowhere}", "kCustom", "true", '{"known_trip_count":{"n":"' + "9" * 400 + '"}}',
             "{size=" + "9" * 300 + "}"]
        )
    )  # fmt: skip
    return text[:start] + value + text[end:]


@FUZZ
@given(mutated())
def test_mutated_fixtures_only_raise_parse_errors(text):
    check(text)


PIECES = st.sampled_from([*JUNK, "f32", "[4]", " ", "a", "1", "HloModule m\n", "parameter(0)"])


@FUZZ
@given(st.lists(PIECES, max_size=80).map("".join))
def test_random_text_only_raises_parse_errors(text):
    check(text)


# -- hostile inputs the strategies might not reach in a short run ------------------------------


def fusion_chain(depth: int) -> str:
    """Fusions nested ``depth`` deep, an all-reduce at the bottom."""
    lines = ["HloModule m", "", "%add (a: f32[], b: f32[]) -> f32[] {", "  %a = f32[] parameter(0)",
             "  %b = f32[] parameter(1)", "  ROOT %s = f32[] add(%a, %b)", "}", "",
             "%c0 (p0: f32[4]) -> f32[4] {", "  %p0 = f32[4]{0} parameter(0)",
             "  ROOT %r0 = f32[4]{0} all-reduce(%p0), replica_groups={{0}}, to_apply=%add", "}"]  # fmt: skip
    for i in range(1, depth):
        lines += [f"%c{i} (p{i}: f32[4]) -> f32[4] {{", f"  %p{i} = f32[4]{{0}} parameter(0)",
                  f"  ROOT %r{i} = f32[4]{{0}} fusion(%p{i}), kind=kLoop, calls=%c{i - 1}", "}"]  # fmt: skip
    lines += ["ENTRY %e (x: f32[4]) -> f32[4] {", "  %x = f32[4]{0} parameter(0)",
              f"  ROOT %y = f32[4]{{0}} fusion(%x), kind=kLoop, calls=%c{depth - 1}", "}"]  # fmt: skip
    return "\n".join(lines) + "\n"


GOOD = """HloModule m

ENTRY %e (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %n = f32[4]{0} negate(%p)
}
"""


@pytest.mark.parametrize(
    "text",
    [
        GOOD.replace("f32[4]{0} negate", "f32[9999999999999,99999999999]{1,0} negate"),
        GOOD.replace("f32[4]{0} negate", "f32[99999999999999999999999]{0} negate"),
        GOOD.replace("f32[4]{0} negate", "f32[" + ",".join(["9" * 22] * 15) + "] negate"),
        GOOD.replace("f32[4]{0} negate", "f32[" + "9" * 5000 + "] negate"),
        fusion_chain(1).replace(
            "all-reduce(%p0), replica_groups={{0}}",
            "reduce-window(%p0, %p0), window={size=" + "9" * 400 + "}",
        ),
        (FIXTURES / "scan10" / "cpu.hlo.txt")
        .read_text()
        .replace('"n":"10"', '"n":"' + "9" * 400 + '"'),
        GOOD.replace("f32[4]{0} negate", "(" * 100_000 + "f32[]" + ")" * 100_000 + " negate"),
        GOOD.replace("negate(%p)", "negate(%p), metadata={" + "{" * 100_000 + "}" * 100_000 + "}"),
        GOOD.replace("negate(%p)", "negate(" + "(" * 100_000 + "%p" + ")" * 100_000 + ")"),
        GOOD.replace("negate(%p)", 'negate(%p), custom_call_target="' + "\\" * 100_001),
        GOOD.replace("negate(%p)", "negate(%p), metadata={source_line=" + "9" * 5000 + "}"),
        GOOD.replace("  ROOT", "  %q = f32[4]{0} negate(%p)\n" * 20_000 + "  ROOT"),
        GOOD.replace("negate(%p)", "negate(%p), " + "a=b, " * 50_000 + "c=d"),
        GOOD.replace("%p)", "%p" + ", %p" * 50_000 + ")"),
        GOOD + "\n".join(GOOD.split("\n")[2:]).replace("%e", "%f").replace("ENTRY ", "") * 500,
        GOOD.replace(
            "negate(%p)", "fusion(%p), kind=kLoop, calls=%e"
        ),  # a computation calling itself
        fusion_chain(3000),
        fusion_chain(2).replace(
            "calls=%c1",
            'calls=%c1, backend_config={"k":{"kind":' + "[" * 100_000 + "]" * 100_000 + "}}",
        ),
        GOOD.replace(
            "  ROOT", "  %t = " + "(" * 300 + "f32[]" + ")" * 300 + " parameter(1)\n  ROOT"
        ),
        "HloModule m\n" + "\x00" * 10_000,
        "HloModule " + "m" * 1_000_000,
    ],
    ids=[
        "huge-dims",
        "overflowing-dim",
        "15-huge-dims",
        "5000-digit-dim",
        "huge-window",
        "huge-trip-count",
        "deep-tuple",
        "deep-braces",
        "deep-operands",
        "backslashes",
        "5000-digit-line-number",
        "20k-lines",
        "50k-attributes",
        "50k-operands",
        "500-computations",
        "self-call",
        "fusion-chain",
        "deep-json",
        "deep-tuple-parameter",
        "nul-bytes",
        "long-header",
    ],
)
def test_hostile_input(text):
    check(text)


def test_operands_must_be_defined_above_their_users():
    """XLA's rule, and what keeps operand chains acyclic: ``%c = copy(%c)`` used to hang the
    trip-count inference (it follows copies down to a constant)."""
    loop = (FIXTURES / "fori_loop" / "tpu_v5e.hlo.txt").read_text()
    limit = re.search(r"compare\(%\S+, %(\S+)\)", loop).group(1)
    cyclic = re.sub(
        rf"%{re.escape(limit)} = (\S+) constant\(\d+\)", rf"%{limit} = \1 copy(%{limit})", loop
    )
    forward = GOOD.replace("negate(%p)", "negate(%q)").replace(
        "  ROOT", "  %q = f32[4]{0} negate(%n)\n  ROOT"
    )  # %q uses %n, defined below it
    for text in (cyclic, forward):
        with pytest.raises(HloParseError, match="not defined above"):
            parse_module(text)
        check(text)


def test_self_calling_computations_are_rejected():
    text = GOOD.replace("negate(%p)", "fusion(%p), kind=kLoop, calls=%e")
    with pytest.raises(HloParseError, match="calls itself"):
        parse_module(text)


def test_whole_line_fast_path_agrees_with_careful_path_on_every_fixture_line():
    """What ``_FAST_LINE`` reads from a line is what the careful path reads from it."""
    checked = 0
    for path in sorted(FIXTURES.glob("*/*.hlo.txt")):
        for number, raw in enumerate(path.read_text().split("\n"), 1):
            m = hlo_parser._FAST_LINE.match(raw)
            head = hlo_parser._INSTRUCTION_HEAD.match(raw)
            if m is None or head is None:
                continue
            line = hlo_parser._Line(number, raw.rstrip())
            careful, operands = hlo_parser._parse_instruction(line, head, None)
            fast = hlo_parser._fast_instruction(m, number, None)
            assert fast is not None, raw[:200]
            instr, names = fast
            assert names == [name for name, _ in operands], raw[:200]
            for field in ("name", "opcode", "shape", "attrs", "is_root", "payload", "line"):
                assert getattr(instr, field) == getattr(careful, field), (field, raw[:200])
            checked += 1
    assert checked > 10_000
