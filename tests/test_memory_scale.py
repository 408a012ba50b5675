"""Peak memory of a large analysis, as a multiple of its text: held to its committed figure, and
marked short of the project's target while above it.

A 200k-instruction module from ``benchmarks/generate.py`` (41 MB) is parsed and analyzed in a fresh
interpreter; ``getrusage``'s peak after the imports to the end, ÷ the text's size, must stay within
``benchmarks/baseline.json``'s figure (what docs/performance.md reports) + 10 % for the allocator's
moods. The target is 4× (``TARGET``): above it the test is reported as an expected failure, naming
the figure, so that the gap stays in sight; at or below it, it passes.
"""

from __future__ import annotations

import json
import sys

import pytest
from conftest import ROOT, SLOW

sys.path.insert(0, str(ROOT / "benchmarks"))
import run as benchmark
from generate import generate_module

pytestmark = SLOW  # analyzes 200k instructions (tens of seconds on a loaded machine)

TARGET = benchmark.TARGETS["rss"]  # peak RSS ÷ text


def test_peak_rss_of_a_200k_instruction_analysis_stays_within_its_ratio_to_the_text(tmp_path):
    baseline = json.loads((ROOT / "benchmarks" / "baseline.json").read_text())
    path = tmp_path / "generated.hlo.txt"
    path.write_text(generate_module(200_000))
    measured = benchmark.rss_over_text(path)
    assert measured["instructions"] >= 200_000 and measured["rows"] > 100_000
    ratio = measured["ru_over_text"]
    said = (
        f"peak RSS {measured['ru_added'] / 2**20:.0f} MiB for {measured['bytes'] / 2**20:.0f} MiB "
        f"of text: {ratio:.2f}x"
    )
    assert ratio <= baseline["rss_over_text_200k"] * 1.1, (
        f"{said}, committed {baseline['rss_over_text_200k']}x"
    )
    if ratio > TARGET:
        pytest.xfail(f"{said}, above the {TARGET:g}x target")
