"""The HLO text parser: real compiler output from every backend, and hostile input."""

from __future__ import annotations

import contextlib
import random
import re

import pytest
from conftest import HAND_WRITTEN_HLO, ROOT, fixture_files, fixture_id, load_fixture

from hlo_roofline import HloParseError, analyze_hlo
from hlo_roofline.hlo import attrs, parse, parse_shape
from hlo_roofline.hlo import parser as hlo_parser

pytestmark = HAND_WRITTEN_HLO  # hand-written modules: not scheduled, no fusions

FILES = fixture_files()


def _xla_structure(text: str) -> dict[str, list[tuple[str, str, list[str]]]]:
    """Computations → (name, opcode, operand names) as XLA's own parser sees them."""
    from jaxlib import _hlo

    module = _hlo.hlo_module_from_text(text)
    return {
        c.name: [
            (i.name, str(i.opcode).rsplit(".", 1)[-1], [o.name for o in i.operands()])
            for i in c.instructions()
        ]
        for c in module.computations()
    }


@pytest.mark.parametrize("path", FILES, ids=fixture_id)
def test_structure_matches_xla_parser(path):
    text, _ = load_fixture(path)
    module = parse(text)
    xla = _xla_structure(text)
    ours = {
        c.name: sorted((i.name, [o.name for o in i.operands]) for i in c.instructions)
        for c in module.computations.values()
    }
    # XLA's parser adds an "async_wrapped" computation for each sugared async op ("*-start" with
    # no calls=); every other computation must match ours exactly.
    synthesized = {name for name in set(xla) - set(ours) if name.startswith("async_wrapped")}
    assert set(xla) - synthesized == set(ours)
    for name, instructions in xla.items():
        if name in synthesized:
            continue
        assert ours[name] == sorted((n, ops) for n, _, ops in instructions), name
    assert module.entry.is_entry and module.entry.name in xla


def test_fast_and_careful_paths_agree_on_every_fixture_line():
    """The regex fast path must give exactly what the bracket scanner gives."""
    checked = 0
    for path in FILES:
        text, _ = load_fixture(path)
        for number, raw in enumerate(text.split("\n"), 1):
            head = hlo_parser._INSTRUCTION_HEAD.match(raw)
            if head is None or " = " not in raw:
                continue
            line = hlo_parser.SourceLine(number, raw)
            _, pos = hlo_parser._parse_shape(line, head.end())
            m = hlo_parser._OPCODE.match(raw, pos)
            if m is None or m.group(1) in ("parameter", "constant"):
                continue
            fast = hlo_parser._fast_operands_and_attrs(raw, m.end() - 1)
            slow = hlo_parser._slow_operands_and_attrs(line, m.group(1), m.end() - 1)
            assert fast is not None, raw[:200]
            assert [n for n, _ in fast[0]] == [n for n, _ in slow[0]], raw[:200]
            assert fast[1] == slow[1], raw[:200]
            checked += 1
    assert checked > 5000


def test_shapes_layouts_tiles_and_memory_spaces():
    s = parse_shape("bf16[4,512,1024]{2,1,0:T(8,128)(2,1)S(1)}")
    assert (s.dtype, s.dims) == ("bf16", (4, 512, 1024))
    assert s.layout.minor_to_major == (2, 1, 0)
    assert s.layout.tiles == ((8, 128), (2, 1))
    assert s.layout.memory_space == 1
    assert parse_shape("u32[]{:S(2)}").layout.memory_space == 2
    assert parse_shape("f32[]{:T(128)}").layout.tiles == ((128,),)
    t = parse_shape("(s32[], (f32[2]{0}, token[]), /*index=2*/bf16[3,4]{1,0})")
    assert t.is_tuple and [leaf.dims for leaf in t.leaves()] == [(), (2,), (3, 4)]
    d = parse_shape("f32[<=1024,256]{1,0}")
    assert d.dims == (1024, 256) and d.dynamic == (True, False)
    assert str(d) == "f32[<=1024,256]{1,0}"
    assert parse_shape("s4[8]{0:E(4)}").layout.element_size_bits == 4
    assert parse_shape("()").leaves() == []


def test_source_lines_resolve_through_stack_frame_tables():
    """jax 0.10.2 prints stack_frame_id; the resolved file:line must point at the jax call."""
    text, _ = load_fixture(ROOT / "fixtures/mlp_f32/cpu.xla.json")
    assert "StackFrames" in text and "stack_frame_id=" in text
    module = parse(text)
    resolved = 0
    for instr in module.instructions():
        source = attrs.source(instr, module)
        if not source or "dot_general" not in attrs.metadata(instr).op_name:
            continue
        file, line = source.rsplit(":", 1)
        assert file.endswith("generate.py"), source
        code = (ROOT / "fixtures/generate.py").read_text().splitlines()[int(line) - 1]
        assert "@" in code or "dot" in code or "matmul" in code, code
        resolved += 1
    assert resolved >= 3
    stack = attrs.stack(next(i for i in module.instructions() if attrs.source(i, module)), module)
    assert stack and all(re.search(r":\d+ \(", frame) for frame in stack)


def test_metadata_and_hostile_strings():
    text = r"""HloModule m

ENTRY %e (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %n = f32[4]{0} negate(%p), metadata={op_name="a, b=1 {x} \"q\" <script>" source_file="f.py" source_line=7}, frontend_attributes={k="v, w=2"}
}
"""
    module = parse(text)
    meta = attrs.metadata(module.entry.root)
    assert meta.op_name == 'a, b=1 {x} "q" <script>'
    assert attrs.source(module.entry.root, module) == "f.py:7"
    assert module.entry.root.attrs["frontend_attributes"] == '{k="v, w=2"}'
    assert analyze_hlo(text).ops.iloc[-1].op_name == meta.op_name


def test_metadata_strings_are_c_unescaped():
    """XLA prints metadata C-escaped (absl::CEscape): a pytree path reads as JAX wrote it."""
    fixture = (ROOT / "fixtures/gpt_tiny/tpu_v5e.hlo.txt").read_text()
    assert "[\\'params\\']" in fixture  # as XLA printed it
    names = set(analyze_hlo(fixture).ops["op_name"])
    assert any("['params']" in n for n in names)
    assert not any("\\" in n for n in names)
    text = GOOD.replace("negate(%p)", r'negate(%p), metadata={op_name="caf\303\251 \\ \' \t"}')
    assert attrs.metadata(parse(text).entry.root).op_name == "café \\ ' \t"


GOOD = """HloModule m

ENTRY %e (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %n = f32[4]{0} negate(%p)
}
"""


@pytest.mark.parametrize(
    ("text", "line", "needle"),
    [
        ("", 0, "empty input"),
        ("garbage\n", 1, "HloModule"),
        (GOOD.replace("f32[4]{0} negate", "f33[4]{0} negate"), 5, "unknown element type"),
        (GOOD.replace("negate(%p)", "negate(%q)"), 5, "unknown operand"),
        (GOOD.replace("negate(%p)", "negate(%p"), 5, "missing ')'"),
        (GOOD.replace("negate(%p)", 'negate(%p), metadata={op_name="x}'), 5, "unterminated"),
        (GOOD.replace("f32[4]{0} negate", "f32[4,x]{0} negate"), 5, "bad dimension"),
        (GOOD.replace("}\n", ""), 5, "not closed"),
        (
            GOOD.replace("  ROOT %n = f32[4]{0} negate(%p)\n", "  ROOT %n = negate(%p)\n"),
            5,
            "shape",
        ),
        (GOOD.replace("negate(%p)", "negate(%p) extra"), 5, "expected ','"),
        (GOOD.replace("negate(%p)", "negate(%p), calls=%nowhere"), 5, "unknown computation"),
        (GOOD + GOOD.split("\n", 1)[1].replace("%e", "%e2"), 0, "ENTRY"),
    ],
)
def test_malformed_input_raises_parse_error_with_position(text, line, needle):
    with pytest.raises(HloParseError) as info:
        parse(text)
    err = info.value
    assert needle in str(err)
    if line:
        assert err.line == line and err.column >= 1
        assert f"line {line}:" in str(err)


FUSION = """HloModule m

%f (a: f32[4], b: f32[4]) -> f32[4] {
  %a = f32[4]{0} parameter(0)
  %b = f32[4]{0} parameter(1)
  ROOT %s = f32[4]{0} add(%a, %b)
}

ENTRY %e (p: f32[4], q: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  %q = f32[4]{0} parameter(1)
  ROOT %r = f32[4]{0} fusion(%p, %q), kind=kLoop, calls=%f
}
"""
LOOP = """HloModule m

%body (s: (s32[], f32[4])) -> (s32[], f32[4]) {
  ROOT %s = (s32[], f32[4]{0}) parameter(0)
}

%cond (c: (s32[], f32[4])) -> pred[] {
  %c = (s32[], f32[4]{0}) parameter(0)
  ROOT %t = pred[] constant(true)
}

ENTRY %e (p: (s32[], f32[4])) -> (s32[], f32[4]) {
  %p = (s32[], f32[4]{0}) parameter(0)
  ROOT %w = (s32[], f32[4]{0}) while(%p), condition=%cond, body=%body
}
"""


LIES = [
        (GOOD.replace("{0} negate", "{1099511627776} negate"), 5, "1099511627776", "permutation"),
        (GOOD.replace("f32[4]{0} negate", "f32[8,32]{0,0} negate"), 5, "0,0}", "permutation"),
        (GOOD.replace("f32[4]{0} negate", "f32[8,32]{0} negate"), 5, "0}", "rank 2"),
        (GOOD.replace("{0} negate", "{1,0} negate"), 5, "1,0}", "rank 1"),
        (GOOD.replace("{0} negate", "{0:T(8,0)} negate"), 5, "0:T(8,0)", "positive"),
        (GOOD.replace("{0} negate", "{0:T(128)(0)} negate"), 5, "0:T(128)(0)", "positive"),
        (GOOD.replace("f32[4]{0} negate", "f32[3,3]{1,0:T(4294967296,4294967296)} negate"), 5,
         "1,0:T", "past 2^63"),
        (GOOD.replace("f32[4]{0} negate", "f32[4,-3]{1,0} negate"), 5, "4,-3]", "negative"),
        (GOOD.replace("[4]{0} negate", "[0,9223372036854775808]{1,0} negate"), 5, "0,9", "2^63"),
        (GOOD.replace("[4]{0} negate", "[4294967296,4294967296]{1,0} negate"), 5, "f32[", "2^63"),
        (GOOD.replace("negate(%p)", "add(%p)"), 5, "(%p)", "add takes 2 operands, not 1"),
        (GOOD.replace("negate(%p)", "select(%p, %p)"), 5, "(%p, %p)", "takes 3 operands"),
        (GOOD.replace("negate(%p)", "reduce(%p, %p, %p)"), 5, "(%p", "even number"),
        (GOOD.replace("negate(%p)", "copy()"), 5, "()", "copy takes 1 operand, not 0"),
        (GOOD.replace("parameter(0)", "parameter(3)"), 4, "3)", "parameter number 3"),
        (FUSION.replace("b = f32[4]{0} parameter(1)", "b = f32[4]{0} parameter(0)"), 5, "0)",
         "parameter number 0 used twice"),
        (FUSION.replace("%b = f32[4]{0}", "%b = f32[8]{0}").replace("%a, %b)", "%a, %a)"), 12,
         "%q", "parameter 1 of %f is f32[8]{0}, but %q passed to it is f32[4]{0}"),
        (FUSION.replace("%b = f32[4]{0}", "%b = s32[4]{0}").replace("%a, %b)", "%a, %a)"), 12,
         "%q", "parameter 1 of %f is s32[4]"),
        (FUSION.replace("fusion(%p, %q)", "fusion(%p)"), 12, "fusion(", "takes 2 parameters"),
        (FUSION.replace("%r = f32[4]{0} fusion", "%r = f32[5]{0} fusion"), 12, "fusion(",
         "%f returns f32[4]{0}, not the fusion's f32[5]{0}"),
        (LOOP.replace("%s = (s32[], f32[4]{0})", "%s = (s32[], f32[8]{0})"), 14, "%p)",
         "parameter 0 of %body"),
        (LOOP.replace("%c = (s32[], f32[4]{0})", "%c = (s32[], f32[4]{0}, s32[])"), 14, "%p)",
         "parameter 0 of %cond"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "line", "at", "needle"), LIES)
def test_text_that_parses_but_lies_is_an_error_where_it_lies(text, line, at, needle):
    """Layouts that are not permutations of their dimensions or whose tiles do not fit, sizes
    past int64, operand counts an opcode does not take, parameters numbered twice, and callees
    whose parameters or results disagree with their callers: HloParseError at that text."""
    with pytest.raises(HloParseError) as info:
        parse(text)
    err = info.value
    assert needle in err.message
    assert (err.line, err.text[err.column - 1 :].startswith(at)) == (line, True), str(err)


def test_every_element_type_xla_knows_parses():
    """jaxlib's own PrimitiveType enum is the oracle (plus the sub-byte and 6-bit types newer
    XLA versions print)."""
    from jax._src.lib import xla_client

    names = {n.lower() for n in xla_client.PrimitiveType.__members__}
    names -= {"primitive_type_invalid", "tuple", "opaque_type"}
    names |= {"opaque", "s1", "s2", "u1", "u2", "f6e2m3fn", "f6e3m2fn"}
    for name in sorted(names):
        shape = parse_shape(f"{name}[]" if name in ("token", "opaque") else f"{name}[2,3]{{1,0}}")
        assert shape.dtype == name
        text = GOOD.replace("f32", name) if name not in ("token", "opaque") else GOOD
        assert analyze_hlo(text, chip="v5e").ops["bound"].notna().all()


def test_truncated_and_mutated_fixtures_only_raise_parse_errors():
    """Cheap in-suite fuzzing: cut and corrupt real modules; nothing but HloParseError escapes."""
    rng = random.Random(1234)
    texts = [load_fixture(p)[0] for p in FILES[:: max(1, len(FILES) // 12)]]
    for text in texts:
        for _ in range(25):
            cut = text[: rng.randrange(len(text))]
            pos = rng.randrange(len(text))
            junk = rng.choice(["(", ")", "{", "}", '"', ",", "=", "%", "\n", "[", "]", "\x00", "é"])
            for mutated in (cut, text[:pos] + junk + text[pos + 1 :]):
                with contextlib.suppress(HloParseError):
                    analyze_hlo(mutated)


def test_deep_nesting_is_an_error_not_a_crash():
    shape = "(" * 5000 + "f32[]" + ")" * 5000
    with pytest.raises(HloParseError):
        parse(GOOD.replace("ROOT %n = f32[4]{0}", f"ROOT %n = {shape}"))


def test_parse_file_names_the_file(tmp_path):
    bad = tmp_path / "bad.hlo"
    bad.write_text(GOOD.replace("negate(%p)", "negate(%q)"))
    with pytest.raises(HloParseError, match=r"bad\.hlo"):
        parse(bad)
    with pytest.raises(HloParseError, match="cannot read"):
        parse(tmp_path / "missing.hlo")


def test_sparsecore_computations_keep_their_execution_thread():
    """TPU v5p offloads a scatter to SparseCore: its computations close with
    '}, execution_thread="sparsecore"', and the async call that runs them is priced."""
    text = (ROOT / "fixtures/moe_tiny/tpu_v5p.hlo.txt").read_text()
    module = parse(text)
    threads = {c.name: c.execution_thread for c in module.computations.values()}
    closed_on_sparsecore = text.count('}, execution_thread="sparsecore"')
    assert closed_on_sparsecore > 0
    assert sum(t == "sparsecore" for t in threads.values()) == closed_on_sparsecore
    assert threads[module.entry.name] == "main"
    ops = analyze_hlo(module).ops
    offload = ops[ops.opcode == "call-start"]
    assert len(offload) == 1 and offload.bytes_accessed.iloc[0] > 0
    with pytest.raises(HloParseError, match="3:1"):  # anything else after '}' is still an error
        parse('HloModule m\nENTRY %e () -> f32[] {\n}, bogus="x"\n')


def test_a_long_line_that_is_not_hlo_gets_a_short_message():
    """A string is text: a 5000-character line is a parse error at 1:1, quoted in short."""
    with pytest.raises(HloParseError, match=r"line 1:1: expected 'HloModule <name>'") as info:
        parse("x" * 5000)
    assert len(str(info.value)) < 300


def test_a_sparsecore_offload_started_without_operands_parses():
    """XLA:TPU starts a SparseCore gather with ``call-start()``: no operands, although the
    computation it names takes two parameters (seen in a compiled GPT step; the caller-callee
    check applies to fusions, calls, loops and branches, not to async starts)."""
    text = """HloModule m

%called_computation (p0: bf16[64,16], p1: s32[8]) -> bf16[8,16] {
  %p0 = bf16[64,16]{1,0} parameter(0)
  %p1 = s32[8]{0} parameter(1)
  ROOT %g = bf16[8,16]{1,0} broadcast(%p1), dimensions={0}
}

ENTRY %e (x: bf16[8,16]) -> bf16[8,16] {
  %x = bf16[8,16]{1,0} parameter(0)
  %start = ((), (), (s32[1]{0})) call-start(), async_execution_thread="sparsecore", to_apply=%called_computation
  ROOT %n = bf16[8,16]{1,0} negate(%x)
}
"""
    module = parse(text)
    assert [c.name for c in module.entry.instructions[1].called] == ["called_computation"]
    assert analyze_hlo(text).summary["coverage"] > 0
