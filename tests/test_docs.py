"""The docs' examples run: every ``>>>`` line in docs/*.md and README.md is a doctest.

A block is runnable when it is written with ``>>>`` prompts; console transcripts and plain code
blocks (no prompts) are not run. Numbers that depend on the machine are elided with ``...``.
"""

from __future__ import annotations

import doctest
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
