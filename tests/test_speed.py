"""Parse + analysis stays within its committed ratio to XLA's C++ parse + cost analysis.

The module is GPT-2 small's training step compiled for TPU v5e (``fixtures/gpt2_small``: 18k
instructions). Ours and XLA's run interleaved in this process, best of several runs each, and the
ratio of their CPU times is held to ``benchmarks/baseline.json``: a change that makes ours more
than 20 % slower relative to XLA fails, whatever the machine's speed or load (an absolute time
would fail on a slow machine and miss a regression on a fast one).

To move the baseline on purpose (a faster parser, or a new column worth its cost), run
``python benchmarks/run.py --baseline`` and commit the file with the change.
"""

from __future__ import annotations

import gzip
import json
import sys

from conftest import FIXTURES, ROOT, SLOW

sys.path.insert(0, str(ROOT / "benchmarks"))
import run as benchmark

pytestmark = SLOW  # a benchmark: a few seconds of timing, run once in CI
TOLERANCE = 1.2


def test_parse_and_analysis_stay_within_their_ratio_to_xla():
    baseline = json.loads((ROOT / "benchmarks" / "baseline.json").read_text())
    with gzip.open(FIXTURES / "gpt2_small" / "tpu_v5e.hlo.txt.gz", "rt") as f:
        text = f.read()
    measured = benchmark.speed_ratio(text)
    limit = baseline["gpt2_v5e_cpu_ratio"] * TOLERANCE
    assert measured["cpu_ratio"] <= limit, (
        f"parse + analysis is {measured['cpu_ratio']:.2f}x XLA's (CPU time: ours "
        f"{measured['ours_cpu'] * 1e3:.0f} ms, XLA {measured['xla_cpu'] * 1e3:.0f} ms); the "
        f"committed baseline is {baseline['gpt2_v5e_cpu_ratio']:.2f}x, the limit {limit:.2f}x"
    )
