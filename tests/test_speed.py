"""Parse + analysis stays within its committed ratio to XLA's C++ parse + cost analysis.

Three figures, each held to ``benchmarks/baseline.json``: GPT-2's ratio, the median ratio over a
representative set of committed modules (``run.REPRESENTATIVE``: every kind, small ones most, as
the corpus is), and the fixed cost of an analysis as a share of XLA's time on GPT-2.

The first module is GPT-2 small's training step compiled for TPU v5e (``fixtures/gpt2_small``: 18k
instructions). Ours and XLA's run interleaved in this process, nine runs, and the median of the
runs' ratios of their CPU times (each pair measured moments apart) is held to
``benchmarks/baseline.json``: a change that makes ours more than 20 % slower relative to XLA
fails, whatever the machine's speed or load (an absolute time would fail on a slow machine and
miss a regression on a fast one; a median of paired ratios moves little with a load that comes
and goes).

To move the baseline on purpose (a faster parser, or a new column worth its cost), run
``python benchmarks/run.py --baseline`` and commit the file with the change.
"""

from __future__ import annotations

import gzip
import json
import sys

import pytest
from conftest import FIXTURES, ROOT, SLOW

sys.path.insert(0, str(ROOT / "benchmarks"))
import run as benchmark

# A benchmark: a few seconds of timing, run once in CI, with the machine to itself (`make test`
# runs the `alone` tests after the others, in one process).
pytestmark = [SLOW, pytest.mark.alone]
TOLERANCE = 1.2
# The fixed cost's share moves more from one machine to another than a ratio of two analyses of
# one module does: a 0.2-ms analysis of two instructions is the interpreter's overhead, XLA's
# 120-ms parse of GPT-2 is C++ over megabytes. Measured 2026-12-07: 0.139 % on the machine of the
# baseline, 0.166-0.179 % on another (load 0.5; the baseline's commit read the same there), 1.29x
# apart with nothing changed. Its guard is held to that spread and a margin; the 2 ms target
# stays whole.
FIXED_COST_TOLERANCE = 1.5


def test_parse_and_analysis_stay_within_their_ratio_to_xla():
    baseline = json.loads((ROOT / "benchmarks" / "baseline.json").read_text())
    with gzip.open(FIXTURES / "gpt2_small" / "tpu_v5e.hlo.txt.gz", "rt") as f:
        text = f.read()
    measured = benchmark.speed_ratio(text)
    limit = baseline["gpt2_v5e_cpu_ratio"] * TOLERANCE
    assert measured["cpu_ratio"] <= limit, (
        f"parse + analysis is {measured['cpu_ratio']:.2f}x XLA's (CPU time, medians: ours "
        f"{measured['ours_cpu'] * 1e3:.0f} ms = parse {measured['parse_cpu'] * 1e3:.0f} + "
        f"analysis {measured['analysis_cpu'] * 1e3:.0f}, XLA {measured['xla_cpu'] * 1e3:.0f} ms);"
        f" the committed baseline is {baseline['gpt2_v5e_cpu_ratio']:.2f}x, the limit {limit:.2f}x"
    )


def test_the_ratio_moves_with_our_time(monkeypatch):
    """The held ratio is not noise: the analysis run twice over (about 45 % more of our time)
    reads as a ratio more than 20 % higher, the regression the test above exists to catch."""
    import hlo_roofline

    with gzip.open(FIXTURES / "gpt2_small" / "tpu_v5e.hlo.txt.gz", "rt") as f:
        text = f.read()
    plain = benchmark.speed_ratio(text, repeat=5)
    analyze = hlo_roofline.analyze_hlo

    def twice(module, *args, **kwargs):
        analyze(module, *args, **kwargs)
        return analyze(module, *args, **kwargs)

    monkeypatch.setattr(hlo_roofline, "analyze_hlo", twice)
    slower = benchmark.speed_ratio(text, repeat=5)
    assert slower["analysis_cpu"] > 1.5 * plain["analysis_cpu"]
    assert slower["cpu_ratio"] > TOLERANCE * plain["cpu_ratio"], (plain, slower)


def test_the_median_over_modules_of_every_kind_stays_within_its_ratio_to_xla():
    """The median over :data:`run.REPRESENTATIVE` (13 modules, 1 to 415 KB, CPU, GPU, TPU and
    dumps) of each module's median paired ratio: where small modules' fixed costs show."""
    baseline = json.loads((ROOT / "benchmarks" / "baseline.json").read_text())
    measured = benchmark.representative_ratio()
    limit = baseline["representative_median_cpu_ratio"] * TOLERANCE
    worst = sorted(measured["files"].items(), key=lambda kv: -kv[1])[:3]
    assert measured["median"] <= limit, (
        f"the median ratio over {len(measured['files'])} modules is {measured['median']:.2f}x "
        f"XLA's (worst: {', '.join(f'{name} {ratio:.2f}x' for name, ratio in worst)}); the "
        f"committed baseline is {baseline['representative_median_cpu_ratio']:.2f}x, the limit "
        f"{limit:.2f}x"
    )


def test_the_fixed_cost_of_an_analysis_stays_within_its_share_of_xlas_time():
    """Parse + ``analyze_hlo`` of a two-instruction module ÷ XLA's parse + cost analysis of the
    GPT-2 module (a share, so a faster or slower machine moves it less): within the committed
    share + 50 % (:data:`FIXED_COST_TOLERANCE`), and within the 2 ms target as the baseline's
    machine reads it."""
    baseline = json.loads((ROOT / "benchmarks" / "baseline.json").read_text())
    measured = benchmark.fixed_cost_share()
    limit = baseline["fixed_cost_share_of_xla_gpt2"] * FIXED_COST_TOLERANCE
    target = 2.0 / baseline["xla_cpu_ms"]  # 2 ms of the baseline's XLA time on GPT-2
    said = (
        f"the fixed cost is {measured['fixed'] * 1e3:.2f} ms, {measured['share']:.2%} of XLA's "
        f"{measured['xla_gpt2'] * 1e3:.0f} ms on GPT-2"
    )
    assert measured["share"] <= limit, f"{said}; committed {baseline['fixed_cost_share_of_xla_gpt2']:.2%}"
    assert measured["share"] <= target, f"{said}: past the 2 ms target ({target:.2%})"


def test_the_fixed_cost_is_what_an_analysis_costs_whatever_the_module(monkeypatch):
    """The measured fixed cost moves with what every analysis does: a millisecond added to each
    analysis (a sleep would not count: CPU time) reads as that much more."""
    import time

    import hlo_roofline

    plain = benchmark.fixed_cost(40)["ours"]
    analyze = hlo_roofline.analyze_hlo

    def slower(*args, **kwargs):
        end = time.process_time() + 1e-3
        while time.process_time() < end:
            pass
        return analyze(*args, **kwargs)

    monkeypatch.setattr(hlo_roofline, "analyze_hlo", slower)
    assert benchmark.fixed_cost(40)["ours"] > plain + 0.8e-3
