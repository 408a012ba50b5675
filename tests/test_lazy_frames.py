"""A report's frames built when first read (``Report.from_columns``), and the judged frame's
columns read once each (``_frame.ColumnsReadOnce``): the same frames and verdicts as built at once.

Oracles: pandas' own constructor (a report of a ``pd.DataFrame`` of every column, its internals
moved aside by ``Report.__post_init__``) and pandas' own column reads.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from conftest import FIXTURES

import hlo_roofline as hr
from hlo_roofline import _frame, cost
from hlo_roofline.hlo import parse_file

MODULES = [
    FIXTURES / "gpt_tiny" / "tpu_v5e.hlo.txt",
    FIXTURES / "scan10" / "cpu.hlo.txt",
    FIXTURES / "moe_tiny" / "h100.hlo.txt",
]


def _columns(path):
    module = parse_file(path)
    ops = cost.walk(module, pad_to_tiles=True)
    return module, cost.rows(module, ops, pad_to_tiles=True), cost.summarize(ops, "roofline")


@pytest.mark.parametrize("path", MODULES, ids=lambda p: f"{p.parent.name}/{p.name}")
@pytest.mark.parametrize("first", ["ops", "internals"])
def test_frames_built_when_read_are_those_built_at_once(path, first):
    module, columns, summary = _columns(path)
    eager = hr.Report(pd.DataFrame(dict(columns)), dict(summary), module.name)
    lazy = hr.Report.from_columns(dict(columns), dict(summary), module.name)
    getattr(lazy, first)  # either frame may be read first
    pd.testing.assert_frame_equal(lazy.ops, eager.ops, check_exact=True)
    pd.testing.assert_frame_equal(lazy.internals, eager.internals, check_exact=True)
    assert "_columns" not in vars(lazy)  # both built: the columns are the frames' alone


@pytest.mark.parametrize("path", MODULES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_report_judged_before_its_frames_are_built_is_the_one_judged_after(path):
    module, columns, summary = _columns(path)
    unread = hr.Report.from_columns(dict(columns), dict(summary), module.name)
    read = hr.Report.from_columns(dict(columns), dict(summary), module.name)
    read.ops, read.internals  # noqa: B018  (built before the judging)
    pd.testing.assert_frame_equal(unread.model_frame(), read.model_frame(), check_exact=True)
    judged, expected = unread.classify("v5e"), read.classify("v5e")
    pd.testing.assert_frame_equal(judged.ops, expected.ops, check_exact=True)
    pd.testing.assert_frame_equal(judged.internals, expected.internals, check_exact=True)
    assert json.dumps(judged.summary, default=str) == json.dumps(expected.summary, default=str)


def test_an_assigned_frame_is_kept_and_the_other_built():
    module, columns, summary = _columns(MODULES[0])
    report = hr.Report.from_columns(dict(columns), dict(summary), module.name)
    mine = pd.DataFrame({"name": ["x"]})
    report.ops = mine
    assert report.internals is not None and len(report.internals) == len(columns["name"])
    assert report.ops is mine


def test_columns_read_once_are_pandas_own_reads_and_derived_frames_plain():
    frame = hr.analyze_file(MODULES[0]).model_frame()
    once = _frame.columns_read_once(frame)
    for name in ("flops", "opcode", "mm_k", "vector_elements"):
        assert once[name] is once[name]  # made once, kept
        pd.testing.assert_series_equal(once[name], frame[name], check_exact=True)
    assert type(once[["flops", "opcode"]]) is pd.DataFrame
    assert type(once.assign(extra=np.zeros(len(once)))) is pd.DataFrame
    assert type(once.drop(columns=["flops"])) is pd.DataFrame
    repeated = pd.DataFrame([[1, 2]], columns=["a", "a"])
    assert _frame.columns_read_once(repeated) is repeated  # a name reads a frame there
