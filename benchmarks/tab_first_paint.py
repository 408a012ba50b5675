"""Cold first paint, chip switch and search of the HLO Roofline tab on a 20k-op run, for two
plugin checkouts in one run.

    python benchmarks/tab_first_paint.py BEFORE_PYTHONPATH AFTER_PYTHONPATH [--repeat N]

Each PYTHONPATH puts an ``hlo_roofline`` and an ``hlo_roofline_tensorboard`` first. For each, a
fresh ``tensorboard`` (cold server: nothing parsed) serves one logdir holding a 20k-op run and the
demo's runs; Chromium opens TensorBoard's page at the tab and the clock runs from the tab's iframe
being attached (TensorBoard's own shell is up) to the tab saying ``data-state=ready`` for the big
run that does not sort first in the logdir (``z_big``; ``0_big`` sorts first). Then, on the same
page: a chip switch (the chip menu set to v5p until the tab says ready on
v5p; the first switch to it, nothing cached), another timed inside the page (to v6e: from the
menu's change event to the frame drawn once the tab is ready, without Playwright's round trips)
and a search (text typed until the op count
changes, the tab's own wait before filtering included). Prints seconds per try, the tab's own
performance measures where it makes them, and the after/before ratio of the medians. No
assertion on time.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from playwright.sync_api import TimeoutError as PlaywrightTimeout
from tb_helpers import big_report, chromium, fixture_report, tensorboard

IFRAME = 'iframe[src*="plugin_entry.html?name=hlo_roofline"]'


def logdir() -> Path:
    root = Path(tempfile.mkdtemp(prefix="tab_first_paint"))
    big_report(20_000).write_tensorboard(root, "0_big")  # sorts first
    for run, target, chip in [("gpt/v5e", "tpu_v5e", "v5e"), ("gpt/h100", "h100", "h100-sxm"),
                              ("gpt/v6e", "tpu_v5e", "v6e")]:  # fmt: skip
        fixture_report("gpt_tiny", target, chip).write_tensorboard(root, run)
    # the run shown: a big one that does not sort first (the start-up warms runs by size, not name)
    big_report(20_000).write_tensorboard(root, "z_big")
    return root


def first_paint(browser, root: Path, pythonpath: str) -> dict[str, float]:
    os.environ["PYTHONPATH"] = pythonpath
    with tensorboard(root, cwd=root) as url:  # not this checkout's folder: PYTHONPATH decides
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(120_000)
        page.goto(f"{url}/#hlo_roofline&p.hlo_roofline.run=z_big")
        page.locator(IFRAME).wait_for(state="attached")
        start = time.perf_counter()
        frame = page.frame_locator(IFRAME)
        frame.locator('.hr-app[data-state=ready][data-run="z_big"]').wait_for()
        times = {"first paint": time.perf_counter() - start}
        inner = next(f for f in page.frames if "plugin_entry" in f.url)
        times |= {f"  paint {k}": v for k, v in measures(inner).items()}
        # the runs' check (every report read once) is done: the switch is timed on an idle server
        with contextlib.suppress(PlaywrightTimeout):  # a checkout that does not say so: 5 s will do
            frame.locator(".hr-app[data-runs-checked]").wait_for(timeout=5_000)
        start = time.perf_counter()
        frame.locator("#hr-chip").select_option("v5p")
        frame.locator('.hr-app[data-state=ready][data-chip="v5p"]').wait_for()
        times["chip switch"] = time.perf_counter() - start
        times |= {f"  switch {k}": v for k, v in measures(inner).items()}
        times["chip switch in page"] = inner.evaluate(SWITCH_IN_PAGE, "v6e")
        total = frame.locator("#hr-count").get_attribute("data-shown")
        start = time.perf_counter()
        frame.locator("#hr-search").fill("x17.")
        frame.locator(f'#hr-count:not([data-shown="{total}"])').wait_for()
        times["search"] = time.perf_counter() - start
        times |= {f"  search {k}": v for k, v in measures(inner).items() if k == "hr-filter"}
        page.close()
    return times


# A first switch timed inside the page: from the menu's change event to the first frame drawn
# after the tab says ready on the chip (what a user waits for, without Playwright's round trips,
# which on a loaded machine add a tenth of a second or more).
SWITCH_IN_PAGE = """(chip) => new Promise((resolve) => {
  const app = document.querySelector(".hr-app");
  const menu = document.querySelector("#hr-chip");
  const start = performance.now();
  const watch = new MutationObserver(() => {
    if (app.dataset.state !== "ready" || app.dataset.chip !== chip) return;
    watch.disconnect();
    requestAnimationFrame(() => resolve((performance.now() - start) / 1000));
  });
  watch.observe(app, { attributes: true });
  menu.value = chip;
  menu.dispatchEvent(new Event("change"));
})"""


def measures(frame) -> dict[str, float]:
    """The tab's latest performance measures (seconds), then cleared."""
    found = frame.evaluate(
        "() => { const m = {}; for (const e of performance.getEntriesByType('measure'))"
        " m[e.name] = e.duration / 1000; performance.clearMeasures(); return m; }"
    )
    return dict(found)


def main() -> None:
    before, after = sys.argv[1], sys.argv[2]
    repeat = int(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[3] == "--repeat" else 2
    root = logdir()
    times: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    with chromium() as browser:
        for _ in range(repeat):
            for name, path in (("before", before), ("after", after)):
                times[name].append(first_paint(browser, root, path))
                line = ", ".join(f"{k.strip()} {v:.3f}" for k, v in times[name][-1].items())
                print(f"{name}: {line} (s)", flush=True)
    for key in ("first paint", "chip switch", "chip switch in page", "search"):
        b = statistics.median(t[key] for t in times["before"])
        a = statistics.median(t[key] for t in times["after"])
        print(f"{key}: median before {b:.3f} s, after {a:.3f} s, after/before {a / b:.2f}")


if __name__ == "__main__":
    main()
