"""Fuzzing: real compiler output, mutated, through the parser and every cost rule.

Whatever the text, ``parse_module`` either returns a module or raises ``HloParseError``, and
``analyze_hlo`` on a module never raises (an op its rule cannot make sense of becomes a flagged
``unknown`` row), gives sane rows and verdicts, in bounded time (``benchmarks/fuzz.py: check``).
Two kinds of mutants: broken syntax (bytes, tokens, nesting), and valid syntax that means nonsense
(``benchmarks/mutate.py``: numbers, dims, dtypes, opcodes, layouts, attributes, operands,
callees). The suite runs a bounded number of cases; a long campaign is
``.venv/bin/python benchmarks/fuzz.py`` (100,000 semantic mutants) or
``HLO_ROOFLINE_FUZZ_EXAMPLES=100000 .venv/bin/python -m pytest tests/test_fuzz.py`` (see
docs/performance.md).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from contextlib import contextmanager

import pytest
from conftest import FIXTURES, HAND_WRITTEN_HLO, ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hlo_roofline import HloParseError, analyze_dump, analyze_hlo, chips
from hlo_roofline.cost.base import MAX_NOTES
from hlo_roofline.hlo import parse_module
from hlo_roofline.hlo import parser as hlo_parser

sys.path.insert(0, str(ROOT / "benchmarks"))
import fuzz as campaign  # the semantic fuzzer: its property and mutations
from mutate import MUTATIONS, mutate

pytestmark = HAND_WRITTEN_HLO  # hand-written modules: not scheduled, no fusions

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
CHIPS = campaign.judging_chips()
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


def check(text: str) -> str:
    """The property (``benchmarks/fuzz.py``'s): HloParseError or a module; analysis of a module
    never raises, under either cost model, and gives sane rows and verdicts on three chips."""
    with time_limit(SECONDS_PER_EXAMPLE):
        return campaign.check(text, CHIPS)


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


# -- semantic mutants: valid syntax, nonsense meaning --------------------------------------------


@FUZZ
@given(st.randoms(use_true_random=False), st.sampled_from(TEXTS))
def test_semantic_mutants_only_raise_parse_errors(rng, text):
    """Numbers, dims, dtypes, opcodes, layouts, attributes, operand lists and callees of real
    modules changed in XLA's own syntax (``benchmarks/mutate.py``)."""
    check(mutate(text, rng)[0])


@pytest.mark.parametrize("kind", sorted(MUTATIONS))
@settings(FUZZ, max_examples=max(EXAMPLES // 4, 10))
@given(rng=st.randoms(use_true_random=False), text=st.sampled_from(TEXTS))
def test_each_kind_of_semantic_mutation(kind, rng, text):
    """Every kind on its own, so that a short run still reaches each of them."""
    mutant, done = mutate(text, rng, most=2, kinds=(kind,))
    assert set(done) <= {kind}
    check(mutant)


def test_semantic_mutants_reach_the_cost_rules():
    """The mutations are not all rejected by the parser: the rules see nonsense too."""
    texts = campaign.seeds()
    outcomes = [campaign.check(campaign.make_input(texts, 7, i)[1]) for i in range(60)]
    assert outcomes.count("analyzed") >= 10 and outcomes.count("rejected") >= 10


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


def shared_bodies(depth: int, opcode: str) -> str:
    """Computation i calls computation i − 1 twice (``fusion`` or ``call``): 2^depth paths through
    ``depth`` computations. XLA flattens its call graph, a hostile or hand-made text need not."""
    call = "kind=kLoop, calls=%c{}" if opcode == "fusion" else "to_apply=%c{}"
    lines = ["HloModule m", "", "%c0 (p0: f32[4,4]) -> f32[4,4] {", "  %p0 = f32[4,4]{1,0} parameter(0)",
             "  ROOT %r0 = f32[4,4]{1,0} negate(%p0)", "}"]  # fmt: skip
    for i in range(1, depth):
        lines += [f"%c{i} (p{i}: f32[4,4]) -> f32[4,4] {{", f"  %p{i} = f32[4,4]{{1,0}} parameter(0)",
                  f"  %a{i} = f32[4,4]{{1,0}} {opcode}(%p{i}), {call.format(i - 1)}",
                  f"  %b{i} = f32[4,4]{{1,0}} {opcode}(%p{i}), {call.format(i - 1)}",
                  f"  ROOT %s{i} = f32[4,4]{{1,0}} add(%a{i}, %b{i})", "}"]  # fmt: skip
    lines += ["ENTRY %e (x: f32[4,4]) -> f32[4,4] {", "  %x = f32[4,4]{1,0} parameter(0)",
              f"  ROOT %y = f32[4,4]{{1,0}} {opcode}(%x), {call.format(depth - 1)}", "}"]  # fmt: skip
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("opcode", ["fusion", "call"])
def test_bodies_reached_along_many_paths_are_walked_once(opcode):
    """2^40 paths through 40 computations: priced (and tabled) in time linear in the text, with
    every path's work counted: 16 FLOPs per negate and per add, F(i) = 2·F(i − 1) + 16."""
    depth = 40
    text = shared_bodies(depth, opcode)
    assert check(text) == "analyzed"
    report = analyze_hlo(text)
    assert report.summary["flops"] == 16 * (2**depth - 1)
    assert len(report.ops) <= 5 * depth  # not one row per path


ADD = """%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

"""


NEGATIVE = [
        ((FIXTURES / "scan10" / "cpu.hlo.txt").read_text().replace('"n":"10"', '"n":"-5"'),
         "unknown trip count"),
]  # fmt: skip
# A reduce whose result is larger than its input: its shapes contradict each other, so the
# parser's shape verifier refuses it (once it was priced, with a negative cost flagged).
REDUCE_TO_MORE = GOOD.replace("ENTRY", ADD + "ENTRY").replace(
    "f32[4]{0} negate(%p)", "f32[4,9]{1,0} reduce(%p, %p), dimensions={0}, to_apply=%add"
)


def test_a_reduce_to_more_elements_is_refused_where_it_is():
    assert check(REDUCE_TO_MORE) == "rejected"
    with pytest.raises(HloParseError, match="%n: ") as caught:
        parse_module(REDUCE_TO_MORE)
    assert "reduce(" in caught.value.text


@pytest.mark.parametrize(("text", "note"), NEGATIVE, ids=["negative-trip-count"])
def test_costs_that_would_come_out_negative_are_flagged(text, note):
    """A loop XLA "proved" runs −5 times."""
    assert check(text) == "analyzed"
    ops = analyze_hlo(text).ops
    assert (ops[["flops", "bytes_accessed", "count"]] >= 0).all().all()
    assert ops["note"].str.contains(note).any()


def many_opaque_calls(n: int, callers: int) -> str:
    """A fused body of ``n`` distinct opaque custom calls (a note each), called ``callers`` times."""
    body = [f'  %c{i} = f32[4]{{0}} custom-call(%q), custom_call_target="k{i}"' for i in range(n)]
    fusions = [f"  %y{j} = f32[4]{{0}} fusion(%p), kind=kLoop, calls=%f" for j in range(callers)]
    return "\n".join([
        "HloModule m", "", "%f (q: f32[4]) -> f32[4] {", "  %q = f32[4]{0} parameter(0)", *body,
        "  ROOT %r = f32[4]{0} negate(%q)", "}", "", "ENTRY %e (p: f32[4]) -> f32[4] {",
        "  %p = f32[4]{0} parameter(0)", *fusions, "  ROOT %z = f32[4]{0} negate(%p)", "}", "",
    ])  # fmt: skip


def test_notes_stay_bounded_however_many_distinct_ones_a_body_has():
    """50k distinct notes in one body, 2000 callers: each row keeps a few and counts the rest
    (merging them one by one into a tuple was quadratic, and every row held all of them)."""
    text = many_opaque_calls(50_000, 2000)
    assert check(text) == "analyzed"
    ops = analyze_hlo(text).ops
    fusion = ops[ops.opcode == "fusion"].iloc[0]
    assert fusion.unknown and fusion.note.endswith(f"… and {50_000 - MAX_NOTES} more notes")
    assert fusion.note.count("opaque custom call") == MAX_NOTES


ALL_REDUCE = """HloModule m, num_partitions=1099511627776

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %e (p: f32[1024]) -> f32[1024] {
  %p = f32[1024]{0} parameter(0)
  ROOT %r = f32[1024]{0} all-reduce(%p), channel_id=1, GROUPS, use_global_device_ids=true, to_apply=%add
}
"""


HUGE_GROUPS = ["replica_groups=[1,1099511627776]<=[1099511627776]", "replica_groups={}",
               "replica_groups=mesh['a'=1048576,'b'=1048576] {'a'}",
               "replica_groups=[65521,2]<=[131042]"]  # fmt: skip
HOSTILE_GROUP_TEXT = ["0-99999999999999 of 99999999999999", "0-3 of 99999999999999999999999",
                      "x of y", "0-70000:1 of 70001", "0>1,1>x of 2"]  # fmt: skip


@pytest.mark.parametrize("groups", HUGE_GROUPS)
def test_programs_of_two_to_the_forty_devices_are_not_listed_device_by_device(groups):
    """The ids of a collective's groups (and a topology's coordinates) are listed only for
    programs of at most attrs.MAX_DEVICES devices; past that the collective is priced as one
    ring, not expanded for minutes (or until memory runs out)."""
    text = ALL_REDUCE.replace("GROUPS", groups)
    assert check(text) == "analyzed"
    for chip in ("v5p", "h100"):
        (row,) = analyze_hlo(text, chip=chip).ops.query("opcode == 'all-reduce'").itertuples()
        assert row.comm_bytes > 0 and row.t_comm_s > 0


@pytest.mark.parametrize("group", HOSTILE_GROUP_TEXT)
def test_a_report_with_hostile_group_text_is_judged_without_listing_it(group):
    """A report is read from a file (the TensorBoard tab re-judges them): its group text is
    not trusted to name few devices, nor to be well formed."""
    report = analyze_hlo(ALL_REDUCE.replace("num_partitions=1099511627776", "num_partitions=4")
                         .replace("GROUPS", "replica_groups={{0,1,2,3}}"))  # fmt: skip
    report.ops.loc[report.ops.opcode == "all-reduce", "replica_group"] = group
    with time_limit(SECONDS_PER_EXAMPLE):
        judged = report.classify("v5p")
    assert (judged.ops.loc[judged.ops.opcode == "all-reduce", "t_comm_s"] > 0).all()


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
            line = hlo_parser.SourceLine(number, raw.rstrip())
            try:
                careful, operands = hlo_parser._parse_instruction(line, head, None)
            except hlo_parser._Unclosed:  # a value printed over several lines: not the fast path's
                assert hlo_parser._fast_instruction(m, number, None) is None, raw[:200]
                continue
            fast = hlo_parser._fast_instruction(m, number, None)
            assert fast is not None, raw[:200]
            instr, names = fast
            assert names == [name for name, _ in operands], raw[:200]
            for field in ("name", "opcode", "shape", "attrs", "is_root", "payload", "line"):
                assert getattr(instr, field) == getattr(careful, field), (field, raw[:200])
            checked += 1
    assert checked > 10_000


# -- the TensorBoard tab serves reports; it never analyzes HLO ---------------------------------


def test_the_plugin_reads_reports_and_never_parses_or_analyzes_hlo(tmp_path, monkeypatch):
    """What a request runs is reading reports, judging their rows and comparing them: with the
    parser and the walk that prices ops made to fail, every route's work still answers."""
    from hlo_roofline.cost import analysis
    from hlo_roofline.hlo import parser as hlo_parser_module
    from hlo_roofline_tensorboard import _data

    fixture = (FIXTURES / "attention" / "tpu_v5e.hlo.txt").read_text()
    runs = [analyze_hlo(fixture, chip=chip).write_tensorboard(tmp_path, chip) for chip in
            ("v5e", "h100")]  # fmt: skip

    def analyzed(*args, **kwargs):
        raise AssertionError("HLO parsed or analyzed on a request path")

    monkeypatch.setattr(hlo_parser_module, "_parse_module", analyzed)
    monkeypatch.setattr(analysis._Walk, "visit", analyzed)
    for run in runs:
        assert _data.load(str(run), "v6e")[0]["summary"]["chip"] == chips.resolve("v6e")
        assert _data.report_csv(str(run), "v5p")
    assert _data.compare(str(runs[0]), str(runs[1]))
    with pytest.raises(AssertionError, match="request path"):  # the trap is set
        analyze_hlo(fixture)


def test_a_report_of_a_hostile_module_is_served_like_any_other(tmp_path):
    """Analysis happens before serving: the report of 2^40 paths through shared bodies has as
    many rows as the text has instructions, and the tab re-judges it on another chip at once."""
    from tb_helpers import rows_of

    from hlo_roofline_tensorboard import _data

    report = analyze_hlo(shared_bodies(40, "call"), chip="v5e")
    directory = report.write_tensorboard(tmp_path, "hostile")
    payload, text = _data.load(str(directory), "h100")[:2]
    assert len(rows_of(json.loads(text))) == len(report.ops) <= 200
    assert payload["summary"]["chip"] == chips.resolve("h100") and text.startswith("{")


BAD_CALL_IDS = ["chip-int", "chip-object", "chip-unknown", "cost-model", "bytes", "none",
                "missing-file", "empty-dir", "missing-path"]  # fmt: skip


@pytest.mark.parametrize(
    "call",
    [
        lambda tmp: analyze_hlo(GOOD, chip=3),
        lambda tmp: analyze_hlo(GOOD, chip=object()),
        lambda tmp: analyze_hlo(GOOD, chip="no-such-chip"),
        lambda tmp: analyze_hlo(GOOD, cost_model="bogus"),
        lambda tmp: analyze_hlo(GOOD.encode()),
        lambda tmp: analyze_hlo(None),
        lambda tmp: analyze_hlo(str(tmp / "missing.hlo.txt")),
        lambda tmp: analyze_dump(tmp),  # a directory without dumps
        lambda tmp: analyze_hlo(tmp / "missing"),
    ],
    ids=BAD_CALL_IDS,
)
def test_analyze_hlo_raises_only_parse_value_type_and_os_errors(call, tmp_path):
    with pytest.raises((HloParseError, ValueError, OSError, TypeError)) as info:
        call(tmp_path)
    assert str(info.value)


# -- the campaign script (benchmarks/fuzz.py) --------------------------------------------------


def test_the_campaign_script_runs_and_reports_by_kind(tmp_path):
    import subprocess

    command = [sys.executable, str(ROOT / "benchmarks" / "fuzz.py"), "--inputs", "40", "--jobs",
               "2", "--seed", "3", "--quiet", "--save", str(tmp_path)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "semantic fuzz: 40 inputs (seed 3)" in done.stdout
    assert "escapes: 0, hangs: 0" in done.stdout
    rejected = int(re.search(r"HloParseError\): (\d+)", done.stdout).group(1))
    analyzed = int(re.search(r"three chips\): (\d+)", done.stdout).group(1))
    assert rejected + analyzed == 40
    assert list(tmp_path.iterdir()) == []  # nothing failed, nothing saved


def _stuck(text, chips_to_judge=None):
    """A check that ignores its time limit (the alarm is blocked): only a kill stops it."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    time.sleep(60)


def _raises(text, chips_to_judge=None):
    raise KeyError("escaped")


@pytest.mark.parametrize(
    ("check_fn", "kind"),
    [(_stuck, "hang (killed: no answer to its time limit)"), (_raises, "escape: KeyError at")],
)
def test_the_campaign_counts_hangs_and_escapes_and_goes_on(monkeypatch, tmp_path, check_fn, kind):
    monkeypatch.setattr(campaign, "check", check_fn)
    runner = campaign.Campaign(inputs=2, jobs=1, seed=0, seconds=0.5, save=tmp_path)
    runner.run(progress=False)
    failures = {k: n for k, n in runner.counts.items() if k.startswith(kind)}
    assert sum(failures.values()) == 2, runner.counts  # every input, the worker replaced each time
    assert len(list(tmp_path.glob("input-*.hlo.txt"))) == 2
