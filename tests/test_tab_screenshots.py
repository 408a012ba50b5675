"""Screenshots of the tab in real headless Chromium on the runs docs/tensorboard.md shows (v5e, H100,
the FSDP step compiled compile-only sharded over four v5p chips, a measured CPU step, the GPT step
measured on a real H100), each checked
before its PNG is kept: one point per timed op, every point inside its axes and labels on their
roofs, no script error, nothing wider than the page, the selected op in the details, and the
PNG the size of what it shows. The same runs and steps make docs/img (``docs/screenshots.py``).
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from tb_helpers import (
    ARTIFACTS,
    NEEDS_BROWSER,
    SCREENSHOT_RUNS,
    WITH_TIMELINE,
    layout_problems,
    screenshot,
    screenshot_logdir,
    timed_rows,
)

from hlo_roofline import Report

pytestmark = [NEEDS_BROWSER, pytest.mark.xdist_group("tensorboard_browser_shots")]


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """The runs, written once for the module, and the op to select in each."""
    root = tmp_path_factory.mktemp("tab_shots")
    return root, screenshot_logdir(root)


@pytest.fixture(scope="module")
def logdir(shots) -> Path:
    return shots[0]


@pytest.fixture(scope="module")
def chosen(shots) -> dict[str, str]:
    return shots[1]


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's header."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


@pytest.mark.parametrize("run", list(SCREENSHOT_RUNS))
def test_screenshot(page, server, logdir, chosen, run):
    console: list[str] = []  # the browser's own favicon request for the bare document aside
    page.on(
        "console",
        lambda m: m.type == "error" and not m.location["url"].endswith("/favicon.ico")
        and console.append(m.text),
    )  # fmt: skip
    path = ARTIFACTS / "screenshots" / f"{run}.png"
    shot = screenshot(page, server, run, chosen[run], path)
    report = Report.read(logdir / run / "plugins" / "hlo_roofline" / "report.json")
    canvas = page.locator("canvas.hr-chart-canvas")
    assert int(canvas.get_attribute("data-points")) == timed_rows(report) > 0
    assert layout_problems(canvas) == []
    assert page.locator(".hr-details h3").text_content() == chosen[run]
    assert page.locator(".hr-details").is_visible()
    # nothing wider than the page: no horizontal scroll, no box of the tab past its right edge
    overflow = page.evaluate(
        """() => {
          const width = document.documentElement.clientWidth;
          const wide = [...document.querySelectorAll(".hr-app *")].filter((e) => {
            const box = e.getBoundingClientRect();
            return box.width > 0 && box.right > width + 1 && getComputedStyle(e).position !== "fixed";
          });
          return [document.documentElement.scrollWidth - width, wide.map((e) => e.className)];
        }"""
    )
    assert overflow[0] <= 0 and not overflow[1], overflow
    if "measured_s" in report.ops:  # an attained point per measured op with time
        measured = report.ops[(report.ops["measured_s"] > 0) & (report.ops["flops"] > 0)]
        assert len(canvas.evaluate("c => c.hloMeasured()")) == len(measured) > 0
    if run in WITH_TIMELINE:  # the timeline: a bar per timed op, the exposed ones marked
        bars = page.locator("canvas.hr-timeline-canvas").evaluate("c => c.hloBars()")
        assert len(bars) == timed_rows(report)
        exposed = report.ops[report.ops["t_exposed_s"] > 0]
        assert sorted(b["row"] for b in bars if b.get("exposedX")) == sorted(exposed.index)
        assert len(exposed)
    box = shot.bounding_box()  # the PNG is that box (its edges rounded out to whole pixels)
    size = png_size(path)
    assert abs(size[0] - box["width"]) <= 2 and abs(size[1] - box["height"]) <= 2, (size, box)
    assert path.stat().st_size > 20_000  # drawn, not blank
    assert console == []
