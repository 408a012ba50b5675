"""The HLO text parser: real compiler output from every backend, and hostile input."""

from __future__ import annotations

import contextlib
import random
import re

import pytest
from conftest import ROOT, fixture_files, fixture_id, load_fixture

from hlo_roofline import HloParseError, analyze_hlo
from hlo_roofline.hlo import attrs, parse, parse_shape
from hlo_roofline.hlo import parser as hlo_parser

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
            line = hlo_parser._Line(number, raw)
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


def test_a_long_line_that_is_neither_hlo_nor_a_file_gets_a_short_message():
    with pytest.raises(HloParseError, match=r"\(5000 characters\): File name too long") as info:
        parse("x" * 5000)
    assert len(str(info.value)) < 300
