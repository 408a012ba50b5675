"""Every syntax XLA's printers write for optimized modules, read as XLA's own parser reads it.

The oracles: XLA's C++ parser (``jaxlib._hlo.hlo_module_from_text``) on the same text, real compiler
output (``fixtures/parser_syntax/make.py``: a Pallas splash attention kernel, a sharded train step
compiled once with ``--xla_dump_to``), and the same compile printed by ``as_text()``.
"""

from __future__ import annotations

import json
import re
import shutil
import warnings

import pytest
from conftest import FIXTURES

from hlo_roofline import HloParseError, analyze_dump, analyze_hlo
from hlo_roofline.hlo import Module, attrs, parse, parse_shape
from hlo_roofline.hlo import lexer as hlo_lexer
from hlo_roofline.hlo import parser as hlo_parser

SYNTAX = FIXTURES / "parser_syntax"
SPLASH = SYNTAX / "splash_attention.tpu_v5e.hlo.txt"
DUMPS = ("dump_v5p", "dump_7x", "dump_h100")  # TPU v5p, TPU7x (SparseCore offloads), 8 H100s
DUMPED = sorted((SYNTAX / "dump_v5p").glob("*after_optimizations.txt"))
AS_TEXT = SYNTAX / "train_step.tpu_v5p.hlo.txt"
_COMMENT = re.compile(r"/\*.*?\*/")


def _xla_module(text: str):
    from jaxlib import _hlo

    return _hlo.hlo_module_from_text(text)


def _jaxlib_version() -> tuple[int, ...]:
    import jaxlib

    return tuple(int(p) for p in re.findall(r"\d+", jaxlib.__version__)[:2])


# The fixtures and forms here are jax 0.12's XLA's printing; an older XLA's parser does not know
# all of it (the compact "%x#N", named shardings, origin=...), so there the comparison with XLA's
# parser is left out and only the checks of this parser's own results run.
XLA_READS_ALL = _jaxlib_version() >= (0, 12)


def _shape(text: str) -> tuple:
    """(dtype, dims, tuple elements) of a printed shape: what both parsers must agree on."""
    shape = parse_shape(_COMMENT.sub("", text))
    return shape.dtype, shape.dims, tuple(_shape(str(s)) for s in shape.tuple_shapes)


def _xla_shape(instr) -> tuple:
    """An XLA instruction's shape (older jaxlibs have no ``.shape``: read it from its text)."""
    if hasattr(instr, "shape"):
        return _shape(str(instr.shape))
    line = hlo_parser.SourceLine(1, instr.to_string())
    return _shape(
        str(hlo_parser._parse_shape(line, hlo_parser._INSTRUCTION_HEAD.match(line.text).end())[0])
    )


def _structure_of_xla(text: str, alias) -> dict:
    return {
        c.name: sorted(
            (alias(i.name), [alias(o.name) for o in i.operands()], _xla_shape(i))
            for i in c.instructions()
        )
        for c in _xla_module(text).computations()
    }


def _structure(module: Module, alias) -> dict:
    return {
        c.name: sorted(
            (alias(i.name), [alias(o.name) for o in i.operands], _shape(str(i.shape)))
            for i in c.instructions
        )
        for c in module.computations.values()
    }


_SUFFIX = re.compile(r"\.\d+$")


def _assert_reads_as_xla_does(text: str) -> Module:
    """The same computations, instructions, operands and shapes as XLA's parser reads. XLA also
    renames an instruction whose name another computation uses (``param_0`` → ``param_0.2``, and
    so on down the line): names of that family are compared without their numeric suffix."""
    module = parse(text)
    seen: dict[str, str] = {}
    shared = set()
    for comp in module.computations.values():
        for instr in comp.instructions:
            if seen.setdefault(instr.name, comp.name) != comp.name:
                shared.add(_SUFFIX.sub("", instr.name))

    def alias(name: str) -> str:
        base = _SUFFIX.sub("", name)
        return base + ".*" if base in shared else name

    if XLA_READS_ALL:
        assert _structure(module, alias) == _structure_of_xla(text, alias)
    return module


# -- attribute values with line breaks (a Pallas TPU kernel's metadata) -------------------------


def test_splash_attention_kernel_metadata_printed_over_several_lines():
    """XLA prints frontend attributes verbatim: the splash attention kernel's ``kernel_metadata``
    holds line breaks and a JSON string with braces and escaped quotes."""
    text = SPLASH.read_text()
    start = text.index("frontend_attributes={kernel_metadata={\n")  # as XLA printed it
    module = _assert_reads_as_xla_does(text)
    kernel = module.entry.root
    assert (
        kernel.opcode == "custom-call" and kernel.attrs["custom_call_target"] == '"tpu_custom_call"'
    )
    assert kernel.line == text.count("\n", 0, start) + 1  # the line the instruction starts on
    value = kernel.attrs["frontend_attributes"]
    assert value.startswith("{kernel_metadata={\n") and value.endswith("\n}}")
    inner = json.loads(value[len("{kernel_metadata=") : -1])  # the kernel's own JSON
    blocks = json.loads(inner["xprof_metadata"])
    assert blocks["block_q"] == blocks["block_kv"] == 512  # the block sizes make.py compiled
    assert attrs.backend_config(kernel)["custom_call_config"]["body"]  # the Mosaic kernel
    assert "pallas_call" in attrs.metadata(kernel).op_name  # attributes after the line breaks
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = analyze_hlo(text)
    assert kernel.name in set(report.ops["name"])


def test_an_error_after_a_line_break_in_a_value_names_its_own_line():
    text = SPLASH.read_text()
    start = text.index('"xprof_metadata"')
    line = text.count("\n", 0, start) + 2  # the line after the JSON: "}}, metadata={..."
    broken = text.replace('"\n}}, metadata=', '"\n}}}, metadata=', 1)
    with pytest.raises(HloParseError, match="unbalanced '}'") as info:
        parse(broken)
    assert (info.value.line, info.value.column) == (line, 3)
    assert info.value.text.startswith("}}}, metadata=")


def test_text_cut_inside_a_value_with_line_breaks_is_refused():
    text = SPLASH.read_text()
    cut = text[: text.index('"xprof_metadata"') + len('"xprof_metadata":"{')]
    with pytest.raises(HloParseError) as info:
        parse(cut)
    assert info.value.line == cut.count("\n")  # the instruction's first line: where it opened
    with pytest.raises(RuntimeError):
        _xla_module(cut)  # XLA refuses it too


@pytest.mark.skipif(not XLA_READS_ALL, reason="an XLA that prints these forms")
def test_a_line_break_inside_a_quoted_value():
    """Older printers wrote a frontend attribute's string verbatim, line breaks and quotes
    inside; this XLA's parser reads that, and its printer escapes the line break."""
    verbatim = """HloModule m, entry_computation_layout={(f32[4]{0})->f32[4]{0}}

ENTRY %e (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %n = f32[4]{0} negate(%p), frontend_attributes={note="two
lines {with} [brackets], \\"quotes\\""}, metadata={op_name="n"}
}
"""
    printed = _xla_module(verbatim).to_string()
    assert 'note="two\\nlines {with}' in printed
    for text in (verbatim, printed):
        root = _assert_reads_as_xla_does(text).entry.root
        assert root.line == 5 and attrs.metadata(root).op_name == "n"
    assert parse(verbatim).entry.root.attrs["frontend_attributes"].startswith('{note="two\nlines')


# A module with every attribute form XLA's printer writes (checked: XLA's parser reads it, and its
# printer writes these forms back). Values hold brackets, commas and quotes inside strings.
FORMS = r"""HloModule forms, is_scheduled=true, entry_computation_layout={(f32[8,128]{1,0:T(8,128)}, (f32[8]{0}, s32[]))->f32[8,128]{1,0:T(8,128)S(1)}}, allow_spmd_sharding_propagation_to_output={true}, num_partitions=2, replica_count=1, frontend_attributes={job="a,b{c}",xla.sdy.meshes={mesh = #sdy.mesh<["x"=2]>}}

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %sum = f32[] add(%x, %y)
}

ENTRY %main (a: f32[8,128], t: (f32[8], s32[])) -> f32[8,128] {
  %a = f32[8,128]{1,0:T(8,128)} parameter(0), sharding={devices=[2,1]<=[2]}, metadata={op_name="a{b}\"c[" source_file="/x.py" source_line=3}
  %t = (f32[8]{0}, s32[]) parameter(1), sharding={{maximal device=0}, {replicated}}
  %e = f32[8,128]{1,0:T(8,128)} exponential(%a), result_accuracy={tolerance={atol=0,rtol=0,ulps=1}}, frontend_attributes={_scheduling_group_id="0",_xla_stream_annotation="1"}
  %cc = f32[8,128]{1,0} custom-call(f32[8,128]{1,0:T(8,128)} %e, %t#0, /*index=2*/%t#1), custom_call_target="foo", custom_call_has_side_effect=true, schedule=SCHEDULE_LATEST, api_version=API_VERSION_STATUS_RETURNING, frontend_attributes={kernel_metadata={
"xprof_metadata":"{\"block_q\": 512}"
}}, backend_config={"a":{"b":[1,2]},"s":"}{]["}
  %cc2 = f32[8,128]{1,0} custom-call(cc), custom_call_target="bar", output_to_operand_aliasing={{}: (0, {})}, control-predecessors={%cc}, statistics={visualizing_index=1,stat-1=33,stat-2=44}, backend_config="{\"x\": \"y}\"}"
  %cc3 = f32[8,128]{1,0} custom-call(%cc2), custom_call_target="baz", sharding={mesh['a'=2,'b c'=1], [{'a'}, {}]}, backend_config={
  "pretty": [1,
    2],
  "s": "]"
}
  %ar = f32[8,128]{1,0} all-reduce(%cc3), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=%add, metadata={op_name="ar" scheduling_name="ar.sched" stack_frame_id=0}
  %sorted = f32[8,128]{1,0} custom-call(%ar), custom_call_target="sort", backend_config="{descending = true, batch_size = 8 : i64}"
  ROOT %r = f32[8,128]{1,0:T(8,128)S(1)} copy(sorted), sharding={maximal device=0}, origin={{"r"}}
} // main
"""


def test_every_attribute_form_xla_prints():
    module = _assert_reads_as_xla_does(FORMS)
    assert module.num_partitions == 2 and module.attrs["is_scheduled"] == "true"
    assert module.attrs["frontend_attributes"].startswith('{job="a,b{c}",')
    ops = {i.name: i for i in module.entry.instructions}
    expected = {
        ("a", "sharding"): "{devices=[2,1]<=[2]}",
        ("t", "sharding"): "{{maximal device=0}, {replicated}}",
        ("e", "result_accuracy"): "{tolerance={atol=0,rtol=0,ulps=1}}",
        ("e", "frontend_attributes"): '{_scheduling_group_id="0",_xla_stream_annotation="1"}',
        ("cc", "schedule"): "SCHEDULE_LATEST",
        ("cc", "backend_config"): '{"a":{"b":[1,2]},"s":"}{]["}',
        ("cc2", "output_to_operand_aliasing"): "{{}: (0, {})}",
        ("cc2", "control-predecessors"): "{%cc}",
        ("cc2", "statistics"): "{visualizing_index=1,stat-1=33,stat-2=44}",
        ("cc3", "sharding"): "{mesh['a'=2,'b c'=1], [{'a'}, {}]}",
        ("ar", "channel_id"): "1",
        ("ar", "replica_groups"): "{{0,1}}",
        ("r", "sharding"): "{maximal device=0}",
        ("r", "origin"): '{{"r"}}',
    }
    for (name, key), value in expected.items():
        assert ops[name].attrs[key] == value, (name, key)
    assert attrs.metadata(ops["a"]).op_name == 'a{b}"c['
    assert attrs.backend_config(ops["cc"]) == {"a": {"b": [1, 2]}, "s": "}{]["}
    assert attrs.backend_config(ops["cc2"]) == {"x": "y}"}
    assert attrs.backend_config(ops["cc3"]) == {"pretty": [1, 2], "s": "]"}  # over 5 lines
    assert [o.name for o in ops["cc"].operands] == ["e", "t_0", "t_1"]
    assert [o.line for o in module.entry.instructions if o.name in ("cc3", "ar")] == [17, 22]


COLLECTIVES = """HloModule m, input_output_alias={ {}: (0, {}, may-alias) }, buffer_donor={ (1, {}) }, entry_computation_layout={(f32[8]{0}, f32[8]{0})->f32[8]{0}}, num_partitions=4

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %sum = f32[] add(%x, %y)
}

ENTRY %e (p: f32[8], q: f32[8]) -> f32[8] {
  %p = f32[8]{0} parameter(0), parameter_replication={false}
  %q = f32[8]{0} parameter(1)
  %d = f32[8]{0} domain(%p), domain={kind="sharding", entry={maximal device=0}, exit={replicated}}
  %ar = f32[8]{0} all-reduce(%d), channel_id=2, replica_groups=[2,2]<=[2,2]T(1,0), use_global_device_ids=true, to_apply=%add
  %ar2 = f32[8]{0} all-reduce(%ar), channel_id=3, replica_groups=[1,4]<=[4], use_global_device_ids=true, to_apply=%add
  ROOT %s = f32[8]{0} add(%ar2, %q)
}
"""


def test_header_aliasing_domains_and_iota_replica_groups():
    module = _assert_reads_as_xla_does(COLLECTIVES)
    assert module.attrs["input_output_alias"] == "{ {}: (0, {}, may-alias) }"
    assert module.attrs["buffer_donor"] == "{ (1, {}) }"
    ops = {i.name: i for i in module.entry.instructions}
    assert ops["d"].attrs["domain"] == (
        '{kind="sharding", entry={maximal device=0}, exit={replicated}}'
    )
    assert ops["ar"].attrs["replica_groups"] == "[2,2]<=[2,2]T(1,0)"
    assert attrs.replica_groups(ops["ar"], module) == [[0, 2], [1, 3]]
    assert attrs.replica_groups(ops["ar2"], module) == [[0, 1, 2, 3]]


@pytest.mark.skipif(not XLA_READS_ALL, reason="an XLA that prints these forms")
def test_xla_prints_these_forms_back_as_it_read_them():
    """The forms above are XLA's printer's, not only its parser's: its own round trip writes the
    line breaks of a value verbatim and the attributes as given."""
    printed = _xla_module(FORMS).to_string()
    assert 'frontend_attributes={kernel_metadata={\n"xprof_metadata"' in printed
    assert 'backend_config={\n  "pretty": [1,\n    2],' in printed
    _assert_reads_as_xla_does(printed)


@pytest.mark.skipif(not XLA_READS_ALL, reason="an XLA that prints these forms")
def test_a_module_header_over_several_lines():
    """``origin_recovery_table={...}`` is printed over several lines, a whole module (braces, ENTRY
    and all) in a string inside it; XLA's printer writes it so."""
    source = """HloModule m, entry_computation_layout={(f32[4]{0})->f32[4]{0}}, origin_recovery_table={
  {"a"} : {"b"},"
    ENTRY %r (p: f32[4]) -> f32[4] {
      ROOT %p = f32[4]{0} parameter(0)
    }
  "
}


ENTRY %e (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %n = f32[4]{0} negate(%p), origin={{"a"}}
}
"""
    printed = _xla_module(source).to_string()
    assert printed.startswith("HloModule m, entry_computation_layout={(f32[4]{0})->f32[4]{0}}, ")
    module = _assert_reads_as_xla_does(printed)
    assert module.entry.name == "e" and list(module.computations) == ["e"]
    assert "HloModule module_r" in module.attrs["origin_recovery_table"]
    assert (
        module.entry.root.line
        == printed.split("\n").index('  ROOT %n = f32[4]{0} negate(%p), origin={{"a"}}') + 1
    )


# -- the dump printer: "%x#N" for element N of tuple %x --------------------------------------


@pytest.mark.parametrize("dump", DUMPS)
def test_a_real_dump_directory_names_tuple_elements_compactly(dump):
    (path,) = (SYNTAX / dump).glob("*after_optimizations.txt")
    text = path.read_text()
    assert re.search(r"%[\w.\-]*param[\w.\-]*#0\b", text)  # as the dump printer writes it
    assert "get-tuple-element(" not in text
    module = _assert_reads_as_xla_does(text)  # the same instructions and names as XLA's parser
    made = [i for i in module.instructions() if i.opcode == "get-tuple-element"]
    assert made and all(
        i.shape is i.operands[0].shape.tuple_shapes[int(i.attrs["index"])] for i in made
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (report,) = analyze_dump(path.parent).values()
    assert report.summary["flops"] > 0 and report.summary["coverage"] == 1.0


def test_an_async_update_may_take_operands_of_its_own():
    """TPU7x offloads all-gathers to SparseCore: ``async-update(%start, %data)``; XLA reads it."""
    (path,) = (SYNTAX / "dump_7x").glob("*after_optimizations.txt")
    module = parse(path.read_text())
    updates = [i for i in module.instructions() if i.opcode == "async-update"]
    assert updates and all(u.operands[0].opcode == "async-start" for u in updates)
    assert any(len(u.operands) == 2 for u in updates)
    threads = {c.execution_thread for c in module.computations.values()}
    assert threads == {"main", "sparsecore"}  # '}, execution_thread="sparsecore"' read


def test_the_dump_and_as_text_of_one_compile_price_the_same():
    """The dump and ``as_text()`` print one compiled module, with and without get-tuple-element
    instructions: every priced op and every total agrees."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dumped = analyze_dump(DUMPED[0].parent)
        plain = analyze_hlo(AS_TEXT)
    assert list(dumped) == [DUMPED[0].name.removesuffix(".after_optimizations.txt")]
    report = dumped[next(iter(dumped))]
    columns = ["opcode", "computation", "count", "flops", "transcendentals", "bytes_accessed",
               "comm_bytes", "shape"]  # fmt: skip

    def priced(r):
        ops = r.ops[r.ops["opcode"] != "get-tuple-element"]
        return sorted(map(tuple, ops[columns].astype(str).values.tolist()))

    assert priced(report) == priced(plain)
    for key in ("flops", "bytes_accessed", "transcendentals", "comm_bytes"):
        assert report.summary[key] == plain.summary[key] > 0, key


def test_a_dump_directory_is_read_whole(tmp_path):
    """``analyze_dump`` finds the module under a dump directory and nothing else."""
    shutil.copytree(DUMPED[0].parent, tmp_path / "dump")
    (tmp_path / "dump" / "module_0000.x.after_optimizations-buffer-assignment.txt").write_text("x")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert len(analyze_dump(tmp_path / "dump")) == 1


COMPACT = """HloModule test

ENTRY test {
  p0 = (f32[10], (f32[20], f32[30])) parameter(0)
  a = f32[20] add(p0#1#0, p0#1#0)
  ROOT t = ((f32[20], f32[30]), f32[20], f32[10]) tuple(%p0#1, a, p0#0)
}
"""


@pytest.mark.parametrize(
    "text",
    [
        COMPACT,  # nested, used twice, a whole inner tuple
        COMPACT.replace("  a = ", "  p0_1 = f32[5] parameter(1)\n  a = "),
        # a later instruction has the name made for %p0#1#0: it is renamed, and its users follow
        COMPACT.replace(
            "  ROOT t", "  p0_1_0 = f32[20] negate(a)\n  b = f32[20] add(p0_1_0, a)\n  ROOT t"
        ).replace("tuple(%p0#1, a, p0#0)", "tuple(%p0#1, b, p0#0)"),
    ],
    ids=["nested", "name-taken-before", "name-taken-after"],
)
def test_compact_tuple_elements_are_made_as_xla_makes_them(text):
    module = _assert_reads_as_xla_does(text)
    made = [i for i in module.entry.instructions if i.opcode == "get-tuple-element"]
    assert len(made) == 3  # one per element named, however often
    for gte in made:
        assert gte.shape is gte.operands[0].shape.tuple_shapes[int(gte.attrs["index"])]
    add = next(i for i in module.entry.instructions if i.name == "a")
    assert add.operands[0] is add.operands[1] and str(add.operands[0].shape) == "f32[20]"


@pytest.mark.parametrize(
    ("operand", "needle"),
    [("p0#2", "no element 2"), ("p0#0#0", "%p0_0 is f32[10], it has no element 0"),
     ("p0#-1", "bad tuple index '#-1'"), ("p0#x", "bad tuple index"), ("q#0", "unknown operand")],
)  # fmt: skip
def test_bad_compact_tuple_elements_are_refused_where_they_are(operand, needle):
    text = COMPACT.replace("tuple(%p0#1, a, p0#0)", f"tuple(%p0#1, a, {operand})")
    if operand == "p0#2":
        text = text.replace("a, p0#2)", "a, %p0#2)")  # written with '%' too
    with pytest.raises(RuntimeError):
        _xla_module(text)  # XLA refuses it too
    with pytest.raises(HloParseError) as info:
        parse(text)
    assert needle in info.value.message
    line = text.split("\n")[5]
    assert info.value.line == 6 and line[info.value.column - 1 :].lstrip("%").startswith(operand)


# -- truncated text is refused, never read as a shorter program ----------------------------------


@pytest.mark.parametrize(
    "name", ["scan10/tpu_v5e", "cond_switch/cpu", "parser_syntax/splash_attention.tpu_v5e"]
)
def test_every_prefix_of_a_real_module_is_refused(name):
    """Cut after any line, a module XLA printed is an error, never a smaller module; only the
    whole text (with or without its last line break) parses."""
    text = (FIXTURES / f"{name}.hlo.txt").read_text()
    lines = text.rstrip("\n").split("\n")
    for k in range(1, len(lines)):
        cut = "\n".join(lines[:k]) + "\n"
        with pytest.raises(HloParseError) as info:
            parse(cut)
        assert 1 <= info.value.line <= k and info.value.column >= 1, k
    assert parse("\n".join(lines)).entry.is_entry


def test_text_cut_before_its_entry_names_what_is_missing():
    text = (FIXTURES / "scan10" / "tpu_v5e.hlo.txt").read_text()
    cut = text[: text.index("\nENTRY ")] + "\n"
    with pytest.raises(HloParseError, match=r"no ENTRY computation.*truncated") as info:
        parse(cut)
    last = cut.rstrip("\n").split("\n")
    assert (info.value.line, info.value.column) == (len(last), len(last[-1]) + 1)
    cut = text[: text.rindex("\n  ROOT")] + "\n"
    with pytest.raises(HloParseError, match=r"ENTRY computation .* not closed") as info:
        parse(cut)


HAND_WRITTEN = """HloModule m

%neg (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %n = f32[4]{0} negate(%p)
}

%main (x: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  ROOT %c = f32[4]{0} call(%x), to_apply=%neg
}
"""


def test_a_hand_written_module_without_entry_keeps_xla_rule():
    """XLA's parser takes the last computation for the entry when none is marked (its printer
    always marks it); text without the printer's header keeps that rule."""
    module = _assert_reads_as_xla_does(HAND_WRITTEN)
    assert module.entry.name == _xla_module(HAND_WRITTEN).computations()[-1].name == "main"
    assert module.entry.is_entry


def test_a_last_computation_that_another_calls_is_not_an_entry():
    """Without an ENTRY marker, a last computation that another one calls cannot be the entry:
    the text was cut (XLA prints callees first, its entry last)."""
    neg, main = HAND_WRITTEN.split("\n\n", 1)[1].split("\n\n")
    with pytest.raises(HloParseError, match="'neg' is called by another"):
        parse(f"HloModule m\n\n{main}\n\n{neg}\n")


# -- Python 3.11.0 to 3.11.2 match possessive repeats of groups wrongly ---------------------------


def test_the_fast_paths_atomic_form_reads_every_line_as_the_possessive_one():
    """Where Python matches ``(...)*+`` wrongly the fast paths use ``(?>(...)*)``; on this Python
    both forms must read every line of real modules alike (and the atomic one refuses an
    unbalanced value, which 3.11.2's possessive one took)."""
    names = ("_FAST_LINE", "_FAST_ATTRS", "_FAST_OPERANDS", "_FAST_ATTR", "_ALL_OPERANDS_NAMED")
    atomic = {n: re.compile(hlo_lexer._atomic(getattr(hlo_lexer, n).pattern)) for n in names}
    group_possessive = re.compile(r"(?<!\\)\)(?:[*+?]|\{\d*,?\d*\})\+")
    assert not any(group_possessive.search(p.pattern) for p in atomic.values())
    assert atomic["_FAST_ATTRS"].fullmatch(", f={k={") is None
    assert re.match(hlo_lexer._atomic(r"(?:ab*+c)*+"), "ab").end() == 0
    if hlo_lexer._compile is not re.compile:
        return  # this Python's possessive form is the wrong one: nothing to compare with
    assert all(group_possessive.search(getattr(hlo_lexer, n).pattern) for n in names)
    texts = [SPLASH, *DUMPED, FIXTURES / "gpt_tiny" / "tpu_v5e.hlo.txt"]
    checked = 0
    for path in texts:
        for raw in path.read_text().split("\n"):
            m, a = hlo_lexer._FAST_LINE.match(raw), atomic["_FAST_LINE"].match(raw)
            assert (m and m.groups()) == (a and a.groups()), raw[:200]
            if m is None:
                continue
            attr_text = m.group(7).rstrip()
            expected = hlo_lexer._FAST_ATTRS.fullmatch(attr_text) is not None
            assert (atomic["_FAST_ATTRS"].fullmatch(attr_text) is not None) == expected
            checked += 1
    assert checked > 2000


# -- the fast path in two steps: a line's head, then its attributes (each distinct text once) -----


def test_a_lines_head_and_attributes_read_apart_are_the_line_read_at_once():
    """The parser reads a line's head (``_FAST_HEAD``) and its attributes (``_FAST_TAIL``) apart,
    checking each distinct attribute text once; where both read, they read what ``_FAST_LINE``
    reads of the whole line, and where the head reads but the attributes do not, ``_FAST_LINE``
    (which the parser then asks) reads nothing either."""
    texts = [SPLASH, *DUMPED, *sorted(FIXTURES.glob("*/*.hlo.txt"))]
    both = head_only = 0
    for path in texts:
        for raw in path.read_text().split("\n"):
            whole, head = hlo_lexer._FAST_LINE.match(raw), hlo_lexer._FAST_HEAD.match(raw)
            if head is None:
                assert whole is None, raw[:200]
                continue
            tail = hlo_lexer._FAST_TAIL.match(raw, head.end())
            if tail is None:
                head_only += 1
                assert whole is None, raw[:200]
                continue
            both += 1
            assert whole is not None, raw[:200]
            assert whole.groups()[:6] == head.groups(), raw[:200]
            assert whole.span(7) == (head.end(), tail.end(1)), raw[:200]
    assert both > 10_000
    line = '  %a = f32[] add(%p, %p), metadata={op_name="x"}, this is not an attribute'
    assert hlo_lexer._FAST_HEAD.match(line) and not hlo_lexer._FAST_LINE.match(line)


def test_the_short_head_reads_what_the_fast_head_reads():
    """The parser reads most heads with ``_SHORT_HEAD`` (nothing in parentheses between the
    operands' ones) and takes its operands only where they are exactly ``%a, %b``: there, and for
    every payload, it reads what ``_FAST_HEAD`` reads (which then reads the line's other forms)."""
    texts = [SPLASH, *DUMPED, *sorted(FIXTURES.glob("*/*.hlo.txt"))]
    taken = 0
    for path in texts:
        for raw in path.read_text().split("\n"):
            short = hlo_lexer._SHORT_HEAD.match(raw)
            if short is None:
                continue
            try:  # the parser takes the shape only where it read it before: a whole shape
                hlo_parser.parse_shape(short.group(3))
            except HloParseError:
                continue
            head = hlo_lexer._FAST_HEAD.match(raw)
            assert head is not None and head.end() == short.end(), raw[:200]
            assert head.groups()[:4] == short.groups()[:4], raw[:200]
            inside, operands, payload = short.group(5), head.group(5), head.group(6)
            if short.group(4) in ("parameter", "constant"):
                assert inside == (payload if operands is None else operands), raw[:200]
                continue
            names = hlo_lexer._OPERAND_NAME.findall(inside)
            printed = ("%" + ", %".join(names) if names else "", hlo_parser._with_index_comments(names))
            if inside in printed:
                taken += 1
                assert operands == inside, raw[:200]
                assert names == hlo_lexer._OPERAND_NAME.findall(operands), raw[:200]
    assert taken > 10_000


@pytest.mark.parametrize(
    "line",
    [
        "ROOT %a = f32[2]{0} add(%p, %q)",
        "ROOT %a=f32[2]{0} add(%p, %q)",
        "ROOT %a = f32[2]{0}add(%p, %q)",
        "ROOT   %a  =  f32[2]{0}   add(%p, %q)",
        "ROOT a = f32[2]{0} add(%p, %q)",
        "ROOT %a = f32[2]{0}x add(%p, %q)",
        "ROOT %a = f32[2] {0} add(%p, %q)",
    ],
)
def test_a_head_spaced_otherwise_reads_the_same_or_is_refused_the_same(line):
    """The short head reads XLA's spacing only; other spacings (and shapes that are not whole
    shapes) read as ``_FAST_HEAD`` and the careful path read them: the same instruction, or the
    same error."""
    text = (
        "HloModule m\n\nENTRY %e (p: f32[2], q: f32[2]) -> f32[2] {\n"
        "  %p = f32[2]{0} parameter(0)\n  %q = f32[2]{0} parameter(1)\n  " + line + "\n}\n"
    )
    if "0}x" in line or "] {" in line:
        with pytest.raises(HloParseError, match="line 6"):
            parse(text)
        return
    root = parse(text).entry.root
    assert (root.name, root.opcode, str(root.shape)) == ("a", "add", "f32[2]{0}")
    assert [op.name for op in root.operands] == ["p", "q"]


def test_a_long_operand_list_with_index_comments_reads_every_operand():
    """XLA prints ``/*index=5*/`` before every fifth operand of a long list: the operands are
    the names, in order, wherever the comments are (or are not)."""
    names = [f"p{i}" for i in range(12)]
    params = "".join(f"  %p{i} = f32[] parameter({i})\n" for i in range(12))
    for operands in (
        ", ".join(f"/*index={i}*/%{n}" if i and i % 5 == 0 else f"%{n}" for i, n in enumerate(names)),
        ", ".join(f"/*index={i}*/%{n}" if i % 4 == 1 else f"%{n}" for i, n in enumerate(names)),
    ):
        text = (
            f"HloModule m\n\nENTRY %e () -> (f32[]) {{\n{params}"
            f"  ROOT %t = ({', '.join(['f32[]'] * 12)}) tuple({operands})\n}}\n"
        )
        assert [op.name for op in parse(text).entry.root.operands] == names


@pytest.mark.parametrize(
    "operands",
    ["%p,%q", " %p, %q ", "f32[] %p, f32[] %q", "/*index=0*/ %p, %q", "%p,  %q", "%p, %q"],
)
def test_operands_in_any_printed_form_read_the_same(operands):
    """Operands written other than ``%a, %b`` (no space, spaces around, shapes, comments) are the
    same operands: the lines go from the short head to the forms ``_FAST_HEAD`` reads."""
    text = (
        "HloModule m\n\nENTRY %e (p: f32[], q: f32[]) -> f32[] {\n  %p = f32[] parameter(0)\n"
        f'  %q = f32[] parameter(1)\n  ROOT %a = f32[] add({operands}), metadata={{op_name="x"}}\n}}\n'
    )
    root = parse(text).entry.root
    assert [op.name for op in root.operands] == ["p", "q"]
    assert root.attrs == {"metadata": '{op_name="x"}'}


def test_lines_sharing_attribute_text_each_keep_their_own():
    """Attribute texts checked once per parse: lines that share one (and lines whose text was
    refused) still read as their own (the careful path finds the error in a refused one)."""
    body = ", metadata={op_name=\"same\"}"
    text = (
        "HloModule m\n\nENTRY %e (p: f32[]) -> f32[] {\n  %p = f32[] parameter(0)\n"
        f"  %a = f32[] negate(%p){body}\n  %b = f32[] negate(%a){body}\n"
        f"  ROOT %c = f32[] add(%a, %b){body}\n}}\n"
    )
    module = parse(text)
    assert [i.attrs for i in module.entry.instructions[1:]] == [{"metadata": '{op_name="same"}'}] * 3
    bad = text.replace("  ROOT %c = f32[] add(%a, %b)" + body, "  ROOT %c = f32[] add(%a, %b), x")
    with pytest.raises(HloParseError, match=r"line 7:.*name=value"):
        parse(bad)


def _two_calls(first_calls: str, second_calls: str) -> str:
    return (
        "HloModule m\n\n"
        "%a (p: f32[]) -> f32[] {\n  %p = f32[] parameter(0)\n"
        f"  ROOT %x = f32[] call(%p), to_apply=%{first_calls}\n}}\n\n"
        "%b (q: f32[]) -> f32[] {\n  %q = f32[] parameter(0)\n"
        f"  ROOT %y = f32[] {second_calls}\n}}\n\n"
        "ENTRY %e (r: f32[]) -> f32[] {\n  %r = f32[] parameter(0)\n"
        "  ROOT %z = f32[] call(%r), to_apply=%a\n}\n"
    )


def test_a_callee_written_below_its_caller_is_followed_for_cycles():
    """XLA writes callees above their callers, where no cycle can be; text that calls a
    computation written below still has its call graph walked: a cycle through it is refused, a
    call without one read."""
    with pytest.raises(HloParseError, match=r"line 10:.*'%a' calls itself \(through %y\)"):
        parse(_two_calls("b", "call(%q), to_apply=%a"))
    module = parse(_two_calls("b", "negate(%q)"))
    assert module.computations["a"].root.called == (module.computations["b"],)


def test_a_module_keeps_the_name_its_header_gives():
    """The module's name is its header's, whatever its instructions are named."""
    for path in sorted(FIXTURES.glob("*/*.hlo.txt"))[:40]:
        text = path.read_text()
        header = text[: text.index("\n")]
        expected = header.removeprefix("HloModule ").split(",")[0].strip()
        assert parse(text).name == expected, path
