"""Peak memory of a large analysis, as a multiple of its text, and the mechanisms that keep it down.

The slow tests: a 200k-instruction module of each kind from ``benchmarks/generate.py`` (the
generated step with metadata, 41 MB; the flat one, 13 MB), and the committed modules of the other
kinds (GPT-2's TPU step, a dump's module), are parsed and analyzed in a fresh interpreter;
``getrusage``'s peak after the imports to the end, ÷ the text's size, must stay within
``benchmarks/baseline.json``'s figure for its kind (what docs/performance.md reports) + 10 % for
the allocator's moods, and, where the kind meets it, within the 4× target (``TARGET``).

The fast tests hold what the memory savings must not change: attributes that went back to their
text read the same, rows that release their priced ops are the rows, the report's table is the
one pandas would make of the columns (same dtypes), without a copy of them; and a module that
made the parser read a line on leaves none of the parser's working state behind.
"""

from __future__ import annotations

import gc
import gzip
import json
import re
import sys
import types

import numpy as np
import pandas as pd
import pytest
from conftest import FIXTURES, ROOT, SLOW

from hlo_roofline import _frame, cost, schema
from hlo_roofline.hlo import ir, parse_module
from hlo_roofline.report import Report

sys.path.insert(0, str(ROOT / "benchmarks"))
import run as benchmark
from generate import generate_flat_module, generate_module

TARGET = benchmark.TARGETS["rss"]  # peak RSS ÷ text
GPT2 = FIXTURES / "gpt2_small" / "tpu_v5e.hlo.txt.gz"  # 18k instructions


# Each kind of module, its generator and its committed figure in benchmarks/baseline.json: the
# generated step (metadata on every line, 41 MB) and the flat one (short lines, no metadata,
# 13 MB: the most instructions, so objects and rows, per byte of text).
KINDS = {
    "metadata": (generate_module, "rss_over_text_200k", True),
    # its parsed module (259 bytes an instruction) and the rows' table (259 a row) are each ~3.9x
    # its 66-byte lines: the 4x target cannot be met there (docs/performance.md, issue 40)
    "flat": (generate_flat_module, "rss_over_text_flat_200k", False),
}
# Committed modules of the other kinds (benchmark.RSS_FIXTURES), with whether they meet the 4x
# target: XLA:TPU's tiled layouts (GPT-2's step, 3.7 MB) do; a dump's module (MaxText's v5p-8
# step, 0.7 MB: 230 bytes a line, its instructions' objects and the first use of the libraries'
# code weigh more against it) does not yet (issue 40).
FIXTURE_KINDS = {
    "tpu_tiled": ("rss_over_text_tpu_gpt2", True),
    "dump": ("rss_over_text_dump_v5p8", False),
}


@SLOW  # analyzes 200k instructions (tens of seconds on a loaded machine)
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_peak_rss_of_a_200k_instruction_analysis_stays_within_its_ratio_to_the_text(tmp_path, kind):
    make, key, meets_target = KINDS[kind]
    baseline = json.loads((ROOT / "benchmarks" / "baseline.json").read_text())
    path = tmp_path / "generated.hlo.txt"
    path.write_text(make(200_000))
    measured = benchmark.rss_over_text(path)
    assert measured["instructions"] >= 200_000 and measured["rows"] > 100_000
    ratio = measured["ru_over_text"]
    said = (
        f"{kind}: peak RSS {measured['ru_added'] / 2**20:.0f} MiB for "
        f"{measured['bytes'] / 2**20:.0f} MiB of text: {ratio:.2f}x"
    )
    assert ratio <= baseline[key] * 1.1, f"{said}, committed {baseline[key]}x"
    if meets_target:
        assert ratio <= TARGET, f"{said}, above the {TARGET:g}x target"


@SLOW
@pytest.mark.parametrize("kind", sorted(FIXTURE_KINDS))
def test_peak_rss_of_a_committed_module_stays_within_its_ratio_to_the_text(tmp_path, kind):
    key, meets_target = FIXTURE_KINDS[kind]
    baseline = json.loads((ROOT / "benchmarks" / "baseline.json").read_text())
    measured = benchmark.rss_over_text(benchmark._written(benchmark.RSS_FIXTURES[key], tmp_path))
    assert measured["instructions"] > 3000
    ratio = measured["ru_over_text"]
    assert ratio <= baseline[key] * 1.1, f"{kind}: {ratio:.2f}x its text, committed {baseline[key]}x"
    if meets_target:
        assert ratio <= TARGET, f"{kind}: {ratio:.2f}x its text, above the {TARGET:g}x target"


@pytest.fixture(scope="module")
def gpt2_text() -> str:
    with gzip.open(GPT2, "rt") as f:
        return f.read()


def test_split_attributes_go_back_to_their_text_and_read_the_same(gpt2_text):
    """Past the module's most recent splits an instruction's attributes are its text again (a
    fused op's or a row's alike); asked again, they are split again, equal to the first split and
    to the text's own items."""
    module = parse_module(gpt2_text)
    instrs = [i for i in module.instructions() if i.peek_attrs()]
    assert len(instrs) > ir._KEEP_SPLIT + 8000
    first = {id(i): dict(i.attrs) for i in instrs}  # every one split, in the module's order
    queue = module.entry.splits  # the module's splits, oldest first, shared by its computations
    assert all(comp.splits is queue for comp in module.computations.values())
    assert len(queue) == ir._KEEP_SPLIT and all(i._attrs.__class__ is dict for i, _ in queue)
    kept = [i for i in instrs if i._attrs.__class__ is dict]
    assert len(kept) < len(instrs) - 8000  # the others went back to their text
    assert instrs[0]._attrs.__class__ is not dict and instrs[-1]._attrs.__class__ is dict
    went_back = [i for i in instrs if i._attrs.__class__ is not dict]
    assert {i.computation.is_fusion for i in went_back} == {True, False}  # fused ops' and rows'
    for instr in instrs[:: len(instrs) // 500]:
        again = instr.attrs
        assert again == first[id(instr)]
        assert again == dict(split_by_hand(module.source_text, instr))


def split_by_hand(text: str, instr: ir.Instruction) -> list[tuple[str, str]]:
    """The instruction's ``key=value`` items as its line prints them, split where a comma is
    outside every bracket and string (no regular expression of the parser's)."""
    line = text.split("\n")[instr.line - 1]
    opened = re.compile(r"[ )}\]]" + re.escape(instr.opcode) + r"\(").search(line, line.index("="))
    close = _matching(line, opened.end() - 1)
    items, depth, quoted, start = [], 0, False, close + 1
    for k in range(close + 1, len(line) + 1):
        c = line[k] if k < len(line) else ","
        if c == '"' and line[k - 1] != "\\":
            quoted = not quoted
        elif not quoted and c in "{[(":
            depth += 1
        elif not quoted and c in "}])":
            depth -= 1
        elif not quoted and depth == 0 and c == ",":
            item = line[start:k].strip()
            if item:
                key, _, value = item.partition("=")
                items.append((key, value))
            start = k + 1
    return items


def _matching(line: str, open_at: int) -> int:
    depth = 0
    for k in range(open_at, len(line)):
        depth += {"(": 1, ")": -1}.get(line[k], 0)
        if depth == 0:
            return k
    raise AssertionError(line)


def test_rows_that_release_their_priced_ops_are_the_same_rows(gpt2_text):
    module = parse_module(gpt2_text)
    ops = cost.walk(module, "roofline", pad_to_tiles=True)
    kept = cost.rows(module, ops, pad_to_tiles=True)
    released = cost.rows(module, list(ops), pad_to_tiles=True, consume=True)
    assert len(kept["name"]) == len(ops) > 5000
    for name, values in kept.items():
        assert values.dtype == released[name].dtype, name
        np.testing.assert_array_equal(values, released[name], err_msg=name)
    consumed = list(ops)
    cost.rows(module, consumed, pad_to_tiles=True, consume=True)
    assert consumed == [None] * len(ops)  # nothing of the walk outlives its rows


def test_the_table_is_what_pandas_makes_of_the_columns_and_shares_them(gpt2_text):
    module = parse_module(gpt2_text)
    columns = cost.rows(module, cost.walk(module, "roofline", pad_to_tiles=True), pad_to_tiles=True)
    report = Report.from_columns(columns, {}, module.name)
    table = report.ops
    public = {name: list(columns[name]) for name in schema.PUBLIC_COST_COLUMNS}
    pd.testing.assert_frame_equal(table, pd.DataFrame(public))
    for name in ("flops", "name", "mm_m", "unknown"):  # a float, a text, an int, a flag column
        assert np.shares_memory(_values(table[name]), columns[name]), name
    # the model internals beside them, value for value; those most ops leave at their default
    # hold the others' values alone
    assert list(report.internals.columns) == list(schema.INTERNAL_COLUMNS)
    for name in schema.INTERNAL_COLUMNS:
        whole = np.asarray(columns[name])
        np.testing.assert_array_equal(report.internals[name].to_numpy(), whole, err_msg=name)
        if isinstance(report.internals[name].array, pd.arrays.SparseArray):
            assert report.internals[name].array.sp_values.size < len(whole) / 2, name


def test_a_flat_module_keeps_no_internal_column_whole_that_no_op_has():
    """A module of elementwise ops (no TPU matmul, reduce, tiling): its internals are the vector
    unit's elements alone, the rest stored as their default, a few bytes each."""
    report = Report.from_columns(
        *_analyzed(parse_module(generate_flat_module(2 * _frame.SPARSE_ROWS))), "flat"
    )
    internals = report.internals
    whole = [n for n in internals if not isinstance(internals[n].array, pd.arrays.SparseArray)]
    assert whole == ["vector_elements"]
    assert (internals["vector_elements"] > 0).mean() > 0.9
    assert internals.drop(columns=whole).memory_usage(deep=True).sum() < 2000


# An attribute printed over two lines: the scanner raises at the first line's end and the parser,
# catching that, reads on (as a dump's modules make it do on every multi-line value).
READ_ON = """HloModule m, is_scheduled=true

ENTRY %e (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %n = f32[4]{0} negate(%p), frontend_attributes={note={
two lines}}, metadata={op_name="n"}
}
"""


def test_a_line_read_on_leaves_no_frame_of_the_parser_alive():
    """The scanner's error, caught to read on, must not make a cycle with the frames it was
    raised through: with collections paused (as the parser and the analysis run) a cycle kept
    the parser's frames, every attribute text it had checked among their locals, for as long as
    the analysis ran (a dump's module: 0.4x its text)."""
    was_enabled = gc.isenabled()
    gc.collect()  # what earlier tests left (a refusal's traceback holds the parser's frames)
    gc.disable()
    try:
        module = parse_module(READ_ON)
        alive = [
            o
            for o in gc.get_objects()
            if isinstance(o, types.FrameType) and o.f_code.co_filename.endswith("parser.py")
        ]
    finally:
        if was_enabled:
            gc.enable()
    assert module.entry.root.attrs["frontend_attributes"] == "{note={\ntwo lines}}"
    assert alive == []


def _values(column: pd.Series) -> np.ndarray:
    """The array a column holds (a string column's objects, under pandas' string type)."""
    array = column.array
    return array._ndarray if hasattr(array, "_ndarray") else column.to_numpy()


def test_a_streamed_walk_makes_the_same_rows_and_summary_holding_a_chunk_at_most(
    gpt2_text, monkeypatch
):
    """``analyze_hlo``'s stream (the walk priced as its rows are made) gives the rows and totals
    of the walk's list, and no more than a chunk of priced ops is ever waiting for its rows."""
    from hlo_roofline.cost import table

    module = parse_module(gpt2_text)
    ops = cost.walk(module, "roofline", pad_to_tiles=True)
    listed = cost.rows(module, ops, pad_to_tiles=True)
    waiting = []
    take = table._Table.take
    monkeypatch.setattr(
        table._Table,
        "take",
        lambda table, *a: (waiting.append(given[0] - table.done), take(table, *a)),
    )
    given = [0]

    def counted(stream):
        for op in stream:
            given[0] += 1
            yield op

    totals: dict = {}
    priced = cost.tallied(counted(cost.priced(module, "roofline", True)), "roofline", totals)
    streamed = cost.rows(module, priced, pad_to_tiles=True)
    assert given[0] == len(ops) > table._ROWS_PER_CHUNK
    assert 0 < max(waiting) <= table._ROWS_PER_CHUNK
    assert totals == cost.summarize(ops, "roofline")
    for name, values in listed.items():
        assert values.dtype == streamed[name].dtype, name
        np.testing.assert_array_equal(values, streamed[name], err_msg=name)


def test_what_the_analysis_forgets_it_works_out_again_the_same(gpt2_text, monkeypatch):
    """Every bound on what a walk and its rows remember (split attributes, users, computations'
    costs and the rules' memos, the rows' memos), made tiny, changes no value of the report: the
    forgotten is worked out again, the same."""
    from hlo_roofline.cost import analysis, base, table

    def report():
        return Report.from_columns(*_analyzed(parse_module(gpt2_text)), "m").ops

    plain = report()
    monkeypatch.setattr(ir, "_KEEP_SPLIT", 3)
    monkeypatch.setattr(base, "USERS_KEPT", 2)
    monkeypatch.setattr(analysis, "COSTS_KEPT", 2)
    monkeypatch.setattr(base, "COSTS_KEPT", 2)
    monkeypatch.setattr(table, "_MEMO_KEPT", 2)
    monkeypatch.setattr(table, "_ROWS_PER_CHUNK", 64)  # the rows' memos trimmed often
    forgetful = report()
    pd.testing.assert_frame_equal(plain, forgetful, check_exact=True)


def _analyzed(module) -> tuple[dict, dict]:
    totals: dict = {}
    stream = cost.tallied(cost.priced(module, "roofline", True), "roofline", totals)
    return cost.rows(module, stream, pad_to_tiles=True), totals


SHARED_BODY = """HloModule m, is_scheduled=true

%body (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %n = f32[4]{0} negate(%p)
}

%cond (c: f32[4]) -> pred[] {
  %c = f32[4]{0} parameter(0)
  ROOT %t = pred[] constant(false)
}

ENTRY %e (x: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  %f = f32[4]{0} fusion(%x), kind=kLoop, calls=%body
  ROOT %w = f32[4]{0} while(%f), condition=%cond, body=%body
}
"""


def test_a_stream_with_more_rows_than_its_bound_is_made_whole():
    """A body both fused and a loop's is left out of the rows' bound (fused computations make no
    rows) yet walked: the stream's arrays grow, and the rows are the walk list's."""
    from hlo_roofline.cost import table

    module = parse_module(SHARED_BODY)
    streamed = cost.rows(module, cost.priced(module, "roofline", True), pad_to_tiles=True)
    listed = cost.rows(module, cost.walk(module, "roofline", True), pad_to_tiles=True)
    assert len(streamed["name"]) == 6 > table._most_rows(module)
    for name, values in listed.items():
        assert values.dtype == streamed[name].dtype, name
        np.testing.assert_array_equal(values, streamed[name], err_msg=name)


def test_every_instruction_knows_its_line_where_its_computation_keeps_it():
    """Far from its computation's first line an instruction's line is kept by the computation
    (``line_offsets``), not as an int object of its own: asked for, it is still the line its
    name is defined on, the root is still the root, and an op made while pricing one (an async
    start's wrapped op) has that one's line."""
    text = generate_flat_module(600)
    module = parse_module(text)
    defined = {}
    for number, line in enumerate(text.split("\n"), 1):
        head = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = ", line)
        if head:
            defined[head.group(1)] = number
    moved = 0
    for comp in module.computations.values():
        assert len(comp.line_offsets) == len(comp.instructions)
        for instr in comp.instructions:
            moved += instr._place is None
            assert instr.line == defined[instr.name], instr.name
            assert instr.is_root == (instr is comp.root), instr.name
    assert moved > 300
    last = module.entry.instructions[-2]
    stand_in = ir.Instruction.stand_in(last, "negate", last.shape, "")
    assert (stand_in.line, stand_in.is_root, stand_in.name) == (last.line, False, last.name)


def test_a_refused_instruction_far_down_its_computation_is_named_on_its_line():
    from hlo_roofline import HloParseError

    lines = generate_flat_module(600).split("\n")
    number = next(n for n, line in enumerate(lines, 1) if n > 400 and " negate(" in line)
    lines[number - 1] = lines[number - 1].replace("f32[1024]{0}", "f32[512]{0}", 1)
    with pytest.raises(HloParseError) as refused:
        parse_module("\n".join(lines))
    assert refused.value.line == number
