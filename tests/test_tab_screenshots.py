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


def _timeline_status(page) -> str:
    return page.locator("#hr-timeline summary .hr-muted").text_content()


def test_timeline_header_is_the_selected_runs(page, server, logdir):
    """Opened on one run, the timeline's header never stays on another: after each switch it says
    the selected run's scheduled step and lanes (the server's /timeline answer), or nothing while
    that run's timeline loads. Then the view zooms and pans on the keyboard and the wheel."""
    import json
    import urllib.request

    def served(run: str) -> dict:
        with urllib.request.urlopen(f"{server}/data/plugin/hlo_roofline/timeline?run={run}") as r:
            return json.load(r)

    page.goto(f"{server}/data/plugin_entry.html?name=hlo_roofline&run=tab_v5p_sharded")
    page.locator('.hr-app[data-state=ready][data-run="tab_v5p_sharded"]').wait_for()
    page.locator("#hr-timeline summary").click()
    page.locator('#hr-timeline[data-state="ready"]').wait_for()
    for run in ("tab_v5p_sharded", "tab_v5e", "tab_h100", "tab_v5p_sharded"):
        if page.locator(".hr-app").get_attribute("data-run") != run:
            page.locator("#hr-run").select_option(run)
            page.locator(f'.hr-app[data-state=ready][data-run="{run}"]').wait_for()
            page.locator('#hr-timeline[data-state="ready"]').wait_for()
        body = served(run)
        lanes = len(body["lanes"])
        want = page.evaluate(
            "async (s) => (await import('./util.js')).fmtTime(s)", body["step_s"]
        )
        assert _timeline_status(page) == f"{want}, {lanes} lane{'' if lanes == 1 else 's'}", run
        summary = Report.read(logdir / run / "plugins/hlo_roofline/report.json").summary
        assert body["step_s"] == summary["step_expected_s"]
    canvas = page.locator("canvas.hr-timeline-canvas")
    step = served("tab_v5p_sharded")["step_s"]
    whole = [float(t) for t in canvas.get_attribute("data-view").split()]
    assert whole == [0.0, step]
    bars = int(canvas.get_attribute("data-bars"))
    canvas.focus()
    for _ in range(8):
        page.keyboard.press("+")
    t0, t1 = (float(t) for t in canvas.get_attribute("data-view").split())
    assert t1 - t0 == pytest.approx(step / 1.25**8, rel=1e-6)
    assert int(canvas.get_attribute("data-bars")) < bars  # only the bars in view are drawn
    page.keyboard.press("ArrowRight")
    u0, u1 = (float(t) for t in canvas.get_attribute("data-view").split())
    assert u0 == pytest.approx(t0 + 0.1 * (t1 - t0)) and u1 - u0 == pytest.approx(t1 - t0)
    box = canvas.bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + 10)
    page.mouse.wheel(0, 200)  # out, about the pointer
    w0, w1 = (float(t) for t in canvas.get_attribute("data-view").split())
    assert w1 - w0 == pytest.approx((u1 - u0) * 1.25, rel=1e-6)
    page.keyboard.press("0")
    assert [float(t) for t in canvas.get_attribute("data-view").split()] == [0.0, step]
    assert int(canvas.get_attribute("data-bars")) == bars
    link = page.locator('[data-testid="timeline-download"]')
    assert link.get_attribute("href").startswith("./trace_events?run=tab_v5p_sharded")


@pytest.mark.parametrize("width", [1280, 1920])
@pytest.mark.parametrize("run", ["tab_v5e", "tab_h100_measured"])
def test_first_columns_are_whole(page, server, logdir, width, run):
    """At 1280 and 1920 px the table's first three columns (name, opcode, bound) show every
    visible cell whole, none cut or ending in an ellipsis, and the table stays inside the page
    (a column it has no room for leaves it, and says so in data-hidden-columns)."""
    page.set_viewport_size({"width": width, "height": 1000})
    page.goto(f"{server}/data/plugin_entry.html?name=hlo_roofline&run={run}")
    page.locator(f'.hr-app[data-state=ready][data-run="{run}"]').wait_for()
    cut = page.evaluate(
        """() => {
          const keys = ["name", "opcode", "bound"];
          const cells = [...document.querySelectorAll('.hr-ops .hr-body .hr-row')].flatMap((row) =>
            keys.map((k) => row.querySelector(`[data-key="${k}"]`)).filter(Boolean));
          const page = document.documentElement.clientWidth;
          const table = document.querySelector('.hr-ops .hr-table');
          const spill = [...table.querySelectorAll('.hr-cell')].filter(
            (c) => c.getBoundingClientRect().right > page + 1).length;
          return [cells.length, cells.filter((c) => c.scrollWidth > c.clientWidth || c.dataset.tail)
            .map((c) => c.textContent), spill, table.dataset.hiddenColumns];
        }"""
    )
    assert cut[0] > 30 and cut[1] == [] and cut[2] == 0, cut
    if width == 1920:
        assert cut[3] == ""  # room for every column


@pytest.mark.parametrize("run", ["tab_v5e", "tab_h100"])
def test_legend_counts_the_points_on_the_roofs_and_the_strip_apart(page, server, logdir, run):
    """The legend's per-bound counts are the ops plotted on the roofs (FLOPs and an intensity);
    the ops without FLOPs, in the strip, are counted apart, from the report's own rows."""
    import re

    report = Report.read(logdir / run / "plugins" / "hlo_roofline" / "report.json")
    ops = report.ops[report.ops["t_bound_s"] > 0]
    on_roofs = ops[(ops["flops"] > 0) & (ops["intensity"] > 0)]
    page.goto(f"{server}/data/plugin_entry.html?name=hlo_roofline&run={run}")
    page.locator(f'.hr-app[data-state=ready][data-run="{run}"]').wait_for()
    items = page.locator(".hr-legend-item").all_text_contents()
    counts = {m[1]: int(m[2]) for m in (re.match(r"(\w+) \((\d+)\)", t) for t in items) if m}
    assert counts == on_roofs["bound"].value_counts().to_dict()
    note = page.locator(".hr-legend .hr-muted").first.text_content()
    assert note.startswith(f"{len(on_roofs)} ops on the roofs")
    strip = len(ops) - len(on_roofs)
    assert (f"{strip} without FLOPs in the strip" in note) == (strip > 0)
