"""The docs' examples run: every ``>>>`` line in docs/*.md and README.md is a doctest.

A block is runnable when it is written with ``>>>`` prompts; console transcripts and plain code
blocks (no prompts) are not run. Numbers that depend on the machine are elided with ``...``.
"""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_doctests(page: Path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    result = doctest.testfile(
        str(page), module_relative=False, optionflags=OPTIONS, raise_on_error=False, verbose=False
    )
    assert result.failed == 0, (
        f"{result.failed} of {result.attempted} examples failed in {page.name}"
    )


def test_the_pages_link_each_other():
    """docs/index.md links every page; the README links the docs index."""
    index = (ROOT / "docs" / "index.md").read_text()
    for page in (ROOT / "docs").glob("*.md"):
        if page.name != "index.md":
            assert f"]({page.name})" in index, page.name
    assert "docs/index.md" in (ROOT / "README.md").read_text()


def _documented_columns() -> set[str]:
    """The column names in docs/method.md's table of the report's columns."""
    text = (ROOT / "docs" / "method.md").read_text()
    table = text[text.index("## The report's columns") :].split("\n## ")[0]
    rows = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    return {name for cell in rows for name in re.findall(r"`([a-z_0-9]+)`", cell)}


def test_every_report_column_is_documented():
    """A real classified report's columns, each with a row in docs/method.md (and no row for a
    column the report does not have), so a new column cannot ship without its unit and meaning."""
    from hlo_roofline import analyze_hlo

    report = analyze_hlo(ROOT / "fixtures" / "gpt_tiny" / "tpu_v5e.hlo.txt", chip="v5e")
    documented = _documented_columns()
    assert set(report.ops.columns) - documented == set()
    measured = {"measured_s"}  # the measured columns have their own table in measure.md
    assert documented - set(report.ops.columns) - measured == set()
