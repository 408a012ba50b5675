"""Helpers for the TensorBoard plugin tests: reports from fixtures, a live `tensorboard`, Chromium."""

from __future__ import annotations

import contextlib
import gzip
import itertools
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import warnings
from pathlib import Path

import pandas as pd
import pytest

from hlo_roofline import Report, analyze_hlo, evidence
from hlo_roofline.diff import compare

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
# Flags for Chromium in a container. Playwright itself gives each launch a fresh temporary profile
# (it rejects --user-data-dir in args).
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
HOSTILE = "<img src=x onerror=alert(1)>\"'&<script>alert(2)</script>"
# Tests in a real browser are skipped where Chromium is missing, unless HLO_ROOFLINE_REQUIRE_BROWSER
# is set (CI sets it: there a missing browser or playwright is a failure).
BROWSER_MISSING = not os.path.exists(CHROMIUM) and not os.environ.get(
    "HLO_ROOFLINE_REQUIRE_BROWSER"
)
NEEDS_BROWSER = pytest.mark.skipif(
    BROWSER_MISSING,
    reason=f"{CHROMIUM} not installed (set HLO_ROOFLINE_REQUIRE_BROWSER=1 to fail instead)",
)
_URL_RE = re.compile(r"TensorBoard \S+ at (http://\S+?)/? \(Press CTRL\+C to quit\)")


def fixture_report(program: str, target: str, chip: str) -> Report:
    """A real report: the committed fixture ``fixtures/<program>/<target>.hlo.txt`` on ``chip``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return analyze_hlo(FIXTURES / program / f"{target}.hlo.txt").classify(chip)


def agreeing(ops: pd.DataFrame, base: Report, module: str | None = None) -> Report:
    """A report of ``ops`` (rows of ``base``, changed) whose summary agrees with them: the cost
    totals found again from the rows, judged again on ``base``'s chip (the reader refuses a
    summary its rows contradict)."""
    summary = {**base.summary, **evidence.cost_totals(ops)}
    report = Report(ops.reset_index(drop=True), summary, base.module if module is None else module)
    return report.classify(base.chip) if base.chip else report


def hostile_report() -> Report:
    """A real report whose longest op carries HTML/script in its op_name and source."""
    report = fixture_report("mlp_bf16", "tpu_v5e", "v5e")
    ops = report.ops.copy()
    row = ops["t_expected_s"].idxmax()
    ops.loc[row, "op_name"] = f"jit(step)/{HOSTILE}"
    ops.loc[row, "source"] = f"{HOSTILE}.py:1"
    return agreeing(ops, report)


def measured_report(trace_dir: Path | None = None) -> Report:
    """A report joined with a real profile of a small step run here (judged on a made-up chip).

    With ``trace_dir`` the trace stays there (``trace_dir/plugins/profile/<session>/``) and the
    report records it; without, it is removed.
    """
    import jax.numpy as jnp

    from hlo_roofline import chips, measure

    # Roofs well above what a CPU attains on this step, so attained points sit below them.
    chip = chips.Chip.custom("tab-test-cpu", peak_flops={"f32": 4e12}, hbm_bandwidth=4e11)
    x = jnp.ones((256, 256), jnp.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # two cores: ops may overlap in the trace
        return measure(
            lambda a: jnp.tanh(a @ a) + 1, x, steps=3, warmup=1, chip=chip, logdir=trace_dir
        )


def measured_gpu_report(root: Path, card: str = "h100", case: str = "gpt_step") -> Report:
    """A report joined with a real trace from a GPU (fixtures/measured_gpu: the GPT example step
    profiled on an H100), judged on the chip the trace names."""
    from hlo_roofline import read_trace

    trace = root / f"{card}_{case}" / f"{case}.xplane.pb"
    trace.parent.mkdir(parents=True, exist_ok=True)
    source = Path(__file__).resolve().parent.parent / "fixtures" / "measured_gpu" / card
    trace.write_bytes(gzip.decompress((source / f"{case}.xplane.pb.gz").read_bytes()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # async copies on their own stream overlap compute
        return read_trace(trace)


def big_report(n: int = 20_000) -> Report:
    """``n`` ops: a real report's rows repeated (renamed), re-classified so shares add up."""
    base = fixture_report("fsdp_train_step", "tpu_v5e", "v5e")
    copies = -(-n // len(base.ops))
    ops = pd.concat(
        [base.ops.assign(name=base.ops["name"] + f".x{i}") for i in range(copies)],
        ignore_index=True,
    ).iloc[:n]
    return agreeing(ops, base, "big")


def without_column(report: Report, column: str) -> Report:
    """The report with one column dropped (what an old or hand-edited file may look like)."""
    return Report(report.ops.drop(columns=[column]), dict(report.summary), report.module)


def starved_report() -> Report:
    """A real H100 report where one memory-bound op is given a single FLOP: it attains a few
    hundred kFLOP/s, decades below every other op (a point beyond the chart's range)."""
    report = fixture_report("gpt_tiny", "h100", "h100-sxm")
    ops = report.ops.copy()
    memory = ops[(ops["bound"] == "memory") & (ops["flops"] > 0)]
    row = memory["bytes_accessed"].idxmax()
    ops.loc[row, "flops"] = 1.0
    return agreeing(ops, report)


def write_corrupt(logdir: Path, run: str) -> Path:
    """A truncated report.json (what a crash mid-write without os.replace would leave)."""
    directory = logdir / run / "plugins" / "hlo_roofline"
    directory.mkdir(parents=True, exist_ok=True)
    good = fixture_report("mlp_bf16", "tpu_v5e", "v5e").to_json()
    (directory / "report.json").write_text(good[: len(good) // 2])
    return directory


def timed_rows(report: Report) -> int:
    """Ops the chart draws: one point per op with a nonzero predicted time."""
    return int((report.ops["t_expected_s"] > 0).sum())


def first_chip_flip(report: Report, chips: list[str]) -> tuple[str, str, str, str]:
    """(chip, op name, bound before, bound after) for the first chip that flips a timed op."""
    before = report.ops
    for chip in chips:
        after = report.classify(chip).ops
        flipped = (
            (before["bound"] != after["bound"])
            & (before["t_expected_s"] > 0)
            & (after["t_expected_s"] > 0)
        )
        if flipped.any():
            i = flipped.idxmax()
            return chip, before.loc[i, "name"], before.loc[i, "bound"], after.loc[i, "bound"]
    raise AssertionError(f"no chip of {chips} changes a verdict of {report.module}")


# The same program compiled for two targets, each judged on its own chip: candidates for a compare
# that flips a verdict (the first that does is used; chip data and fixtures evolve).
COMPARE_CANDIDATES = [
    ("gpt_tiny", ("tpu_v5e", "v5e"), ("h100", "h100-sxm")),  # fusion differs: up/down flip on v5e
    ("random", ("tpu_v5e", "v5e"), ("tpu_v5p", "v5p")),
    ("reductions", ("tpu_v5e", "v5e"), ("tpu_v5p", "v5p")),
    ("fsdp_train_step", ("tpu_v5e", "v5e"), ("tpu_v5p", "v5p")),
    ("attention", ("h100", "h100-sxm"), ("tpu_v5e", "v5e")),
    ("convnet", ("tpu_v5e", "v5e"), ("tpu_v5p", "v5p")),  # v5p fuses the convolutions differently
]


def write_flipping_pair(logdir: Path) -> tuple[str, str]:
    """Write the first candidate pair where an op changes its verdict, as every comparison
    (``hlo_roofline.diff.compare``) judges it; return the two run names."""
    for program, (target_a, chip_a), (target_b, chip_b) in COMPARE_CANDIDATES:
        a = fixture_report(program, target_a, chip_a)
        b = fixture_report(program, target_b, chip_b)
        if not compare(a, b).flipped.empty:
            runs = f"{program}/{target_a}", f"{program}/{target_b}"
            a.write_tensorboard(logdir, runs[0])
            b.write_tensorboard(logdir, runs[1])
            return runs
    raise AssertionError(f"no candidate pair flips a verdict: {COMPARE_CANDIDATES}")


@contextlib.contextmanager
def tensorboard(logdir: Path, timeout: float = 60.0, cwd: Path | None = None):
    """A real ``tensorboard --logdir`` on a free loopback port; yields its base URL (no slash).

    ``cwd``: where it runs (``python -m`` puts that folder first on its path: a checkout's
    ``hlo_roofline`` there comes before the one PYTHONPATH names)."""
    # Not the `tensorboard` script beside sys.executable: a copied venv's script may run another
    # interpreter (its shebang), and so another checkout's plugin.
    cmd = [
        sys.executable,
        "-m",
        "tensorboard.main",
        "--logdir",
        str(logdir),
        "--host",
        "127.0.0.1",
        "--port",
        "0",
    ]
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        cwd=cwd,
    )
    lines: list[str] = []
    found = threading.Event()
    url: list[str] = []

    def pump() -> None:  # keep draining stderr so the server never blocks on a full pipe
        for line in proc.stderr:
            lines.append(line)
            if not url and (m := _URL_RE.search(line)):
                url.append(m.group(1))
                found.set()
        found.set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        found.wait(timeout)
        if not url:
            raise RuntimeError("tensorboard did not start:\n" + "".join(lines[-40:]))
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(url[0] + "/data/plugins_listing", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("tensorboard not ready:\n" + "".join(lines[-40:])) from None
                time.sleep(0.1)
        yield url[0]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


@contextlib.contextmanager
def chromium():
    """Playwright's Chromium API driving Debian's /usr/bin/chromium (no browser download)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
        try:
            yield browser
        finally:
            browser.close()


# The tab's screenshots, in docs/tensorboard.md and tests/test_tab_screenshots.py: the demo's model
# on v5e and H100, the FSDP step compiled compile-only sharded over four v5p chips (its timeline
# open), and a step measured here (a report with measured times).
SCREENSHOT_RUNS = {
    "tab_v5e": lambda root: fixture_report("gpt_tiny", "tpu_v5e", "v5e"),
    "tab_h100": lambda root: fixture_report("gpt_tiny", "h100", "h100-sxm"),
    "tab_v5p_sharded": lambda root: fixture_report("fsdp_train_step", "tpu_v5p", "v5p"),
    "tab_measured": lambda root: measured_report(root / "tab_measured"),
    "tab_h100_measured": lambda root: measured_gpu_report(root / "traces"),
}
WITH_TIMELINE = {"tab_v5p_sharded"}  # shown with the timeline of the step as scheduled


def screenshot_logdir(root: Path) -> dict[str, str]:
    """Write the screenshots' runs under ``root``; each run's op to select: its most FLOPs (so
    its own roof is drawn), or on a run with a timeline its longest op (a collective)."""
    chosen = {}
    for run, make in SCREENSHOT_RUNS.items():
        report = make(root)
        report.write_tensorboard(root, run)
        ops = report.ops[report.ops["t_expected_s"] > 0]
        key = "t_expected_s" if run in WITH_TIMELINE else "flops"
        chosen[run] = ops.sort_values(key).iloc[-1]["name"]
    return chosen


def screenshot(page, url: str, run: str, op: str, path: Path):
    """Open ``run`` in the tab's document (``url``: TensorBoard's), select ``op``, open the
    timeline where the run has one, and save a PNG of the tab at ``path``; returns the element
    shot."""
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.goto(f"{url}/data/plugin_entry.html?name=hlo_roofline&run={run}")
    page.locator(f'.hr-app[data-state=ready][data-run="{run}"]').wait_for(timeout=60_000)
    shown = page.locator("#hr-count").get_attribute("data-shown")
    page.locator("#hr-search").fill(op)
    page.locator(f'#hr-count:not([data-shown="{shown}"])').wait_for()  # the search applied
    page.locator(f'.hr-body .hr-row:has([data-key="name"]:text-is("{op}"))').click()
    page.locator("#hr-search").fill("")
    page.locator(f'#hr-count[data-shown="{shown}"]').wait_for()  # no point drawn faint
    target = page.locator(".hr-main")
    if run in WITH_TIMELINE:
        page.locator("#hr-timeline summary").click()
        page.locator('#hr-timeline[data-state="ready"]').wait_for()
        page.locator(".hr-ops").evaluate("e => e.hidden = true")
        target = page.locator(".hr-content")
    path.parent.mkdir(parents=True, exist_ok=True)
    target.screenshot(path=str(path))
    return target


def screenshot_docs(out_dir: Path = ROOT / "docs" / "img") -> list[Path]:
    """docs/tensorboard.md's screenshots, from the runs the screenshot tests check
    (``python docs/screenshots.py``)."""
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="tab_docs"))
    chosen = screenshot_logdir(root)
    written = []
    with tensorboard(root) as url, chromium() as browser:
        page = browser.new_page()
        for run, op in chosen.items():
            screenshot(page, url, run, op, out_dir / f"{run}.png")
            written.append(out_dir / f"{run}.png")
    return written


def layout_problems(canvas) -> list[str]:
    """Where the chart draws outside its canvas, a point outside its axes, or labels collide."""
    layout = canvas.evaluate("c => c.hloLayout()")
    width, height, plot, strip = (layout[k] for k in ("width", "height", "plot", "strip"))
    problems = []
    boxes = layout["labels"]
    for b in boxes:
        if b["x"] < 0 or b["y"] < 0 or b["x"] + b["w"] > width or b["y"] + b["h"] > height:
            problems.append(f"label {b['text']!r} leaves the canvas: {b}")
        if abs(b["y"] + b["h"] / 2 - b["line"]) > 3 * b["h"]:
            problems.append(f"label {b['text']!r} is far from its roof: {b}")
    for a, b in itertools.pairwise(boxes):
        if a["y"] + a["h"] > b["y"] + 0.5:
            problems.append(f"labels {a['text']!r} and {b['text']!r} overlap")
    for p in canvas.evaluate("c => [...c.hloPoints(), ...c.hloMeasured()]"):
        area = strip if p["strip"] else plot
        if not (
            area["left"] <= p["x"] <= area["right"] and area["top"] <= p["y"] <= area["bottom"]
        ):
            problems.append(f"point of row {p['row']} outside its axes: {p}")
    for label in layout["tickLabels"]["x"] + layout["tickLabels"]["y"]:
        if len(label) > 5:
            problems.append(f"tick label {label!r}")
    return problems


def rows_of(body: dict) -> list[list]:
    """A served report's rows: as written (``data``), or made from a re-judged one's columns
    (``cols``), as the tab's Model makes them."""
    if "data" in body:
        return body["data"]
    cols = [decoded(c) for c in body["cols"]]
    return [list(row) for row in zip(*cols, strict=True)] if cols else []


def decoded(column) -> list:
    """A column as the tab reads it: a float column sent as base64 doubles (``{"f64": ...}``)
    back to numbers, NaN and ±inf as None."""
    if not isinstance(column, dict):
        return column
    import base64
    import math

    import numpy as np

    values = np.frombuffer(base64.b64decode(column["f64"]), dtype="<f8").tolist()
    return [v if math.isfinite(v) else None for v in values]
