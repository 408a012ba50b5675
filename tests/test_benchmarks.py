"""The benchmark script runs end to end (a small run): its figures are not asserted, only measured."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT


def test_benchmark_prints_the_three_figures(tmp_path):
    out = tmp_path / "bench.json"
    command = [
        sys.executable, str(ROOT / "benchmarks" / "run.py"), "--repeat", "1",
        "--targets", "cpu", "--instructions", "3000", "--json", str(out),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    for figure in ("(a) parse + analysis", "(b) our analysis", "(c) generated module", "(d) the same step"):
        assert figure in done.stdout
    results = json.loads(out.read_text())
    fixtures = results["fixtures"]
    assert len(fixtures["files"]) == len(list(ROOT.glob("fixtures/*/*.hlo.txt")))
    assert 0 < fixtures["total_table"] < fixtures["total_ours"]
    assert 0 < results["examples"]["gpt cpu"]["analysis_over_compile"] < 1
    cached = results["cache"]["gpt cpu"]
    assert cached["cold"]["ops"] == cached["cached"]["ops"] > 0
    assert cached["analyze_ratio"] > 0  # measured, not asserted: timings are noisy
    generated = results["generated"]
    assert generated["instructions"] >= 3000 and generated["peak_rss"] > generated["baseline_rss"]


def test_scaling_script_measures_time_and_memory_per_instruction(tmp_path):
    out = tmp_path / "scaling.json"
    command = [sys.executable, str(ROOT / "benchmarks" / "scaling.py"), "--sizes", "1000,3000",
               "--repeat", "1", "--json", str(out)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "time per instruction, largest ÷ smallest" in done.stdout
    small, large = json.loads(out.read_text())
    assert 1000 <= small["instructions"] < large["instructions"]
    assert small["us_per_instruction"] > 0 and large["rss_bytes_per_instruction"] > 0
