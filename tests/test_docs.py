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
# A page whose examples import JAX compiles real programs (minutes on a cold cache): slow.
_COMPILES = re.compile(r"^(?:>>>|\.\.\.) .*\bimport jax\b|^>>> .*\banalyze\(", re.MULTILINE)


def _page(page: Path):
    marks = [pytest.mark.slow] if _COMPILES.search(page.read_text()) else []
    return pytest.param(page, marks=marks, id=page.relative_to(ROOT).as_posix())


@pytest.mark.parametrize("page", [_page(p) for p in PAGES])
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


def _section(page: str, heading: str) -> str:
    text = (ROOT / "docs" / page).read_text()
    return text[text.index(heading) :].split("\n## ")[0]


def _table_names(section: str) -> list[str]:
    """The column names of a markdown table's first cells, in order."""
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    return [name for cell in rows for name in re.findall(r"`([a-z_0-9]+)`", cell)]


def test_the_column_table_is_the_schema_and_a_real_report_has_its_columns():
    """docs/method.md's column table is the schema's (name, unit, meaning), and a real classified
    report has exactly the schema's cost and verdict columns, in its order: a column cannot ship
    without its unit and meaning, and no row documents a column the report does not have."""
    from hlo_roofline import analyze_hlo, schema

    section = _section("method.md", "## The report's columns")
    assert schema.markdown_table() in section, (
        "docs/method.md's column table differs from hlo_roofline.schema: paste "
        "schema.markdown_table() over it"
    )
    report = analyze_hlo(ROOT / "fixtures" / "gpt_tiny" / "tpu_v5e.hlo.txt", chip="v5e")
    assert list(report.ops.columns) == [*schema.PUBLIC_COST_COLUMNS, *schema.VERDICT_COLUMNS]
    public, _, internal = section.partition("### The model's internals")
    documented = _table_names(public)
    assert documented[: len(report.ops.columns)] == list(report.ops.columns)
    assert documented[len(report.ops.columns) :] == ["measured_s"]  # see measure.md
    # the side table: every model internal, documented apart, a TPU module's report has them all
    assert schema.markdown_table(internal=True) in internal
    assert list(report.internals.columns) == _table_names(internal) == list(schema.INTERNAL_COLUMNS)


def test_the_measured_columns_table_is_the_schemas():
    from hlo_roofline import schema

    section = _section("measure.md", "## What is added to the report")
    assert _table_names(section) == list(schema.MEASURED_COLUMNS)


def test_a_real_summary_has_the_schemas_keys():
    """The summary of a classified report: every cost and verdict key of schema.Summary, and no
    key the schema does not name."""
    from hlo_roofline import analyze_hlo, schema

    report = analyze_hlo(ROOT / "fixtures" / "gpt_tiny" / "tpu_v5e.hlo.txt", chip="v5e")
    required = {*schema.CostSummary.__annotations__, *schema.VerdictSummary.__annotations__}
    assert required <= set(report.summary) <= set(schema.SUMMARY_KEYS)
