"""The price columns' extractors (cost.extractors.EXTRACTORS): every cost column is one
extractor's, each is a small function over an op's IR, and a module without what a TPU-only
extractor reads never calls it, with a report no different for it."""

from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pytest
from conftest import ROOT

from hlo_roofline import cost, schema
from hlo_roofline.cost import extractors, table
from hlo_roofline.hlo import parse_file

CPU_MODULE = ROOT / "fixtures" / "gpt_tiny" / "cpu.hlo.txt"
TPU_MODULE = ROOT / "fixtures" / "gpt_tiny" / "tpu_v5e.hlo.txt"
TPU_ONLY = ("memory placement", "XLA estimates", "tiling")


def test_every_cost_column_is_made_by_exactly_one_extractor():
    made = [name for e in extractors.EXTRACTORS for name in e.columns]
    assert sorted(made) == sorted(schema.COST_COLUMNS)
    assert len(made) == len(set(made))
    for e in extractors.EXTRACTORS:
        assert (e.row is None) != (e.chunk is None), e.concern


def test_each_extractor_and_the_driver_are_small():
    functions = [f for e in extractors.EXTRACTORS for f in (e.row, e.chunk) if f is not None]
    for function in [*functions, table.rows]:
        lines = len(inspect.getsource(function).splitlines())
        assert lines <= 60, f"{function.__qualname__}: {lines} lines"


def _rows(path, monkeypatch, applies_always: bool = False, every_op: bool = False):
    """The module's rows, and how many times each extractor was called; with
    ``applies_always`` every extractor runs whatever its ``applies`` says, with ``every_op`` for
    every op whatever its ``opcodes`` say."""
    calls = dict.fromkeys((e.concern for e in extractors.EXTRACTORS), 0)

    def counting(concern, function):
        def run(*args):
            calls[concern] += 1
            return function(*args)

        return run

    def counted(e):
        if e.row:
            changes = {"row": lambda build, e=e: counting(e.concern, e.row(build))}
        else:
            changes = {"chunk": counting(e.concern, e.chunk)}
        if applies_always:
            changes["applies"] = lambda module: True
        if every_op:
            changes["opcodes"] = None
        return dataclasses.replace(e, **changes)

    monkeypatch.setattr(table, "EXTRACTORS", tuple(map(counted, extractors.EXTRACTORS)))
    module = parse_file(path)
    pad = cost.MODELS["roofline"].pad_to_tiles
    return table.rows(module, cost.walk(module, "roofline", pad), pad), calls


def _rows_of(columns, extractor) -> int:
    """How many of the rows an extractor runs for: those of its opcodes (every row by default)."""
    opcodes = columns["opcode"]
    return (
        len(opcodes)
        if extractor.opcodes is None
        else int(np.isin(opcodes, [*extractor.opcodes]).sum())
    )


def test_a_cpu_module_calls_no_tpu_only_extractor_and_loses_nothing_by_it(monkeypatch):
    skipped, calls = _rows(CPU_MODULE, monkeypatch)
    assert all(calls[concern] == 0 for concern in TPU_ONLY), calls
    assert calls["vector units"] == len(skipped["name"]) > 0  # (information on any module)
    forced, forced_calls = _rows(CPU_MODULE, monkeypatch, applies_always=True)
    by_concern = {e.concern: e for e in extractors.EXTRACTORS}
    assert all(
        forced_calls[concern] == _rows_of(skipped, by_concern[concern]) for concern in TPU_ONLY
    )
    for name, values in forced.items():
        np.testing.assert_array_equal(values, skipped[name], err_msg=name)


def test_a_tpu_module_runs_them_all(monkeypatch):
    columns, calls = _rows(TPU_MODULE, monkeypatch)
    assert all(calls[e.concern] == _rows_of(columns, e) for e in extractors.EXTRACTORS if e.row)
    assert all(calls[e.concern] > 0 for e in extractors.EXTRACTORS), calls
    assert np.isfinite(columns["xla_cycles"]).any()  # XLA:TPU's estimates, read
    assert (columns["tile_steps"] > 0).any()


@pytest.mark.parametrize("path", [CPU_MODULE, TPU_MODULE], ids=["cpu", "tpu"])
def test_an_extractor_of_some_opcodes_gives_no_other_op_a_value(path, monkeypatch):
    """The table calls an extractor for the rows of its ``opcodes`` alone: the rows it makes are
    those of every extractor called for every row."""
    assert any(e.opcodes for e in extractors.EXTRACTORS)
    dispatched, calls = _rows(path, monkeypatch)
    everywhere, every_call = _rows(path, monkeypatch, every_op=True)
    rows = len(dispatched["name"])
    assert all(every_call[e.concern] in (0, rows) for e in extractors.EXTRACTORS if e.row)
    assert sum(calls.values()) < sum(every_call.values())
    for name, values in everywhere.items():
        np.testing.assert_array_equal(
            np.asarray(values), np.asarray(dispatched[name]), err_msg=name
        )


@pytest.mark.parametrize("text", ["", "S(1) estimated_cycles"])
def test_a_module_without_text_or_with_tpu_marks_runs_the_tpu_extractors(text):
    from hlo_roofline.cost.tpu import extractors as tpu
    from hlo_roofline.hlo.ir import Module

    module = Module(name="m", computations={}, entry=None, source_text=text)  # type: ignore[arg-type]
    assert tpu.places_in_vmem(module) and tpu.has_estimates(module)
    assert not tpu.places_in_vmem(parse_file(CPU_MODULE))
