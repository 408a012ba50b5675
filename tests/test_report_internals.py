"""The report's public columns (``Report.ops``) and its side table of model internals
(``Report.internals``): the schema says which is which, the files carry both under one checksum,
and a saved report judged again on another chip gives the numbers the analysis itself gives."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from conftest import FIXTURES

from hlo_roofline import _frame, analyze_hlo, cost, schema
from hlo_roofline._json import json_safe
from hlo_roofline.hlo import parse_module
from hlo_roofline.report import CSV_MAGIC, FORMAT, VERSION, Report, ReportError

TPU = FIXTURES / "gpt_tiny" / "tpu_v5e.hlo.txt"  # a TPU compile: tiling loops, XLA's estimates


@pytest.fixture(scope="module")
def judged() -> Report:
    return analyze_hlo(TPU, chip="v5e")


def test_the_ops_hold_the_public_columns_and_the_side_table_the_internals(judged, monkeypatch):
    monkeypatch.setattr(_frame, "SPARSE_ROWS", 1)  # stored as a large module's are
    report = analyze_hlo(TPU)
    assert list(report.ops.columns) == list(schema.PUBLIC_COST_COLUMNS)
    assert list(report.internals.columns) == list(schema.INTERNAL_COLUMNS)
    assert report.internals.index.equals(report.ops.index)
    assert not set(schema.INTERNAL_COLUMNS) & set(judged.ops.columns)  # judging adds none back
    # side by side they are the columns the extractors wrote, value for value
    module = parse_module(TPU.read_text())
    columns = cost.rows(module, cost.walk(module, "roofline", True), pad_to_tiles=True)
    frame = report.model_frame()
    assert list(frame.columns) == list(schema.COST_COLUMNS)
    for name in schema.COST_COLUMNS:
        np.testing.assert_array_equal(frame[name].to_numpy(), columns[name], err_msg=name)
    # a column most ops leave at its default keeps only the others' values
    stored = report.internals["tile_steps"].array
    assert isinstance(stored, pd.arrays.SparseArray)
    assert stored.sp_values.size == (columns["tile_steps"] > 0).sum() > 0


def _same(a: Report, b: Report) -> None:
    pd.testing.assert_frame_equal(a.model_frame(), b.model_frame(), check_exact=True)
    assert json.dumps(json_safe(a.summary), sort_keys=True) == json.dumps(
        json_safe(b.summary), sort_keys=True
    )


@pytest.mark.parametrize("kind", ["json", "csv"])
def test_a_saved_report_judged_again_gives_the_analysis_numbers(judged, tmp_path, kind):
    path = tmp_path / f"report.{kind}"
    (judged.to_json if kind == "json" else judged.to_csv)(path)
    read = Report.read(path)
    _same(read, judged)
    for chip in ("v6e", "h100"):  # the tab's chip switch, Report.classify on a file
        _same(read.classify(chip), judged.classify(chip))
    # the internals carry numbers: judged without them, the expectation moves
    bare = Report(read.ops, read.summary, read.module).classify("v5e")
    assert bare.summary["step_expected_s"] != judged.summary["step_expected_s"]


def test_a_report_of_one_table_is_read_with_its_internals_apart(judged):
    """A report written before the side table (every column in one table, the older CSV form)
    reads as the same report: its internal columns go to ``internals``."""
    frame = judged.model_frame()
    meta = {"format": FORMAT, "version": VERSION, "module": judged.module, "rows": len(frame)}
    meta["summary"] = json_safe(judged.summary)
    text = CSV_MAGIC + json.dumps(meta) + "\n" + frame.to_csv(index=False)
    read = Report.from_text(text, trust_unsigned=True)
    assert list(read.ops.columns) == list(judged.ops.columns)
    _same(read, judged)


def _edited(report: Report, edit) -> str:
    payload = report.to_dict()
    edit(payload["internals"])
    return json.dumps(payload)


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (lambda i: i["tile_steps"][0].__setitem__(1, -3.0), "no smaller than 0"),
        (lambda i: i["tile_steps"][0].__setitem__(0, 10**9), "of its rows"),
        (lambda i: i["mm_split_k"].append([0, 2.5]), "whole number"),
        (lambda i: i.__setitem__("flops", []), "no model internal"),
    ],
)
def test_an_edited_internal_is_refused(judged, edit, said):
    payload = json.loads(judged.to_json())  # its checksum first
    payload["internals"]["tile_steps"][0][1] += 1.0
    with pytest.raises(ReportError, match="checksum"):  # any change breaks the checksum
        Report.from_text(json.dumps(payload))
    with pytest.raises(ReportError, match=said):  # and a value out of its type is refused anyway
        Report.from_text(_edited(judged, edit), trust_unsigned=True)


def test_a_csvs_internals_are_under_its_sidecars_checksum(judged, tmp_path):
    path = tmp_path / "report.csv"
    judged.to_csv(path)
    meta = tmp_path / "report.meta.json"
    payload = json.loads(meta.read_text())
    assert payload["internals"] == json.loads(judged.to_json())["internals"]
    payload["internals"]["tile_steps"][0][1] += 1.0
    meta.write_text(json.dumps(payload))
    with pytest.raises(ReportError, match="checksum"):
        Report.read(path)


def test_the_row_table_fills_each_internal_column_with_the_schemas_default():
    """The cost table's fill for an op with no value of its own (``RARE_DEFAULTS``, 0 where it
    names none) is the default ``Report.internals`` leaves out (``schema.internal_default``): were
    they to differ, a stored column would keep every op's fill as a value of its own."""
    import math

    from hlo_roofline.cost.table import RARE_DEFAULTS

    for name in schema.INTERNAL_COLUMNS:
        filled, default = RARE_DEFAULTS.get(name, 0), schema.internal_default(name)
        if isinstance(default, float) and math.isnan(default):
            assert isinstance(filled, float) and math.isnan(filled), name
        else:
            assert filled == default, name
