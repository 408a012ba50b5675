"""A report's CSV is a plain CSV: ``pandas.read_csv`` with no arguments gives the report's columns
and rows; its module and summary sit beside it in ``x.meta.json``; ``Report.read`` takes the pair,
and the older one-file form (the metadata as a ``#`` first line) still reads.

The oracle is the same report through JSON, which holds everything in one file.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import FIXTURES

import hlo_roofline as hr
from hlo_roofline.report import CSV_MAGIC, Report, ReportError, ReportMissingError, meta_path


@pytest.fixture(scope="module")
def report() -> Report:
    return hr.analyze_hlo(FIXTURES / "gpt_tiny" / "tpu_v5e.hlo.txt", chip="v5e")


def _same(a: Report, b: Report) -> None:
    assert a.module == b.module and a.summary == b.summary
    pd.testing.assert_frame_equal(a.ops, b.ops, check_dtype=False)


def test_pandas_reads_the_csv_as_it_is(report, tmp_path):
    text = report.to_csv(tmp_path / "r.csv")
    plain = pd.read_csv(tmp_path / "r.csv")
    assert list(plain.columns) == list(report.ops.columns) and len(plain) == len(report.ops)
    assert plain["flops"].sum() == pytest.approx(report.ops["flops"].sum())
    assert text == (tmp_path / "r.csv").read_text()
    meta = json.loads((tmp_path / "r.meta.json").read_text())
    assert meta["module"] == report.module and meta["rows"] == len(report.ops)
    assert meta["summary"]["chip"] == "v5e"


def test_the_pair_reads_back_as_the_json_does(report, tmp_path):
    report.to_csv(tmp_path / "r.csv")
    report.to_json(tmp_path / "r.json")
    _same(Report.read(tmp_path / "r.csv"), Report.read(tmp_path / "r.json"))


def test_the_older_one_file_form_still_reads_when_trusted(report, tmp_path):
    """It carries no checksum: read only with trust_unsigned (its rows are checked still)."""
    meta = {
        "module": report.module,
        "rows": len(report.ops),
        "summary": report.to_dict()["summary"],
    }
    old = CSV_MAGIC + json.dumps(meta) + "\n" + report.ops.to_csv(index=False)
    (tmp_path / "old.csv").write_text(old)
    report.to_json(tmp_path / "r.json")
    with pytest.raises(ReportError, match="unsigned"):
        Report.read(tmp_path / "old.csv")
    _same(Report.read(tmp_path / "old.csv", trust_unsigned=True), Report.read(tmp_path / "r.json"))
    (tmp_path / "cut.csv").write_text(old[: len(old) // 2])
    with pytest.raises(ReportError, match="truncated"):
        Report.read(tmp_path / "cut.csv", trust_unsigned=True)


def test_a_csv_without_its_metadata_says_what_is_missing(report, tmp_path):
    (tmp_path / "alone.csv").write_text(report.to_csv())
    with pytest.raises(ReportMissingError, match=r"alone\.meta\.json"):
        Report.read(tmp_path / "alone.csv")


def test_a_csv_changed_after_its_metadata_is_refused(report, tmp_path):
    report.to_csv(tmp_path / "r.csv")
    other = Report(report.ops.iloc[:-1], report.summary, report.module)  # another write's CSV
    (tmp_path / "r.csv").write_text(other.to_csv())
    with pytest.raises(ReportError, match=r"truncated|changed after it was written"):
        Report.read(tmp_path / "r.csv")


@pytest.mark.parametrize(("name", "meta"), [("x.csv", "x.meta.json"), ("x", "x.meta.json"),
                                            ("x.tsv", "x.tsv.meta.json")])  # fmt: skip
def test_the_metadata_sits_beside_the_csv(tmp_path, name, meta):
    assert meta_path(tmp_path / name) == tmp_path / meta
