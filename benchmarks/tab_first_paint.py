"""Cold first paint of the HLO Roofline tab on a 20k-op run, for two plugin checkouts in one run.

    python benchmarks/tab_first_paint.py BEFORE_PYTHONPATH AFTER_PYTHONPATH [--repeat N]

Each PYTHONPATH puts an ``hlo_roofline`` and an ``hlo_roofline_tensorboard`` first. For each, a
fresh ``tensorboard`` (cold server: nothing parsed) serves one logdir holding a 20k-op run and the
demo's runs; Chromium opens TensorBoard's page at the tab and the clock runs from the tab's iframe
being attached (TensorBoard's own shell is up) to the tab saying ``data-state=ready`` for the big
run. Prints seconds per try and the after/before ratio of the medians. No assertion on time.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from tb_helpers import big_report, chromium, fixture_report, tensorboard

IFRAME = 'iframe[src*="plugin_entry.html?name=hlo_roofline"]'


def logdir() -> Path:
    root = Path(tempfile.mkdtemp(prefix="tab_first_paint"))
    big_report(20_000).write_tensorboard(root, "0_big")  # sorts first: the run shown
    for run, target, chip in [("gpt/v5e", "tpu_v5e", "v5e"), ("gpt/h100", "h100", "h100-sxm"),
                              ("gpt/v6e", "tpu_v5e", "v6e")]:  # fmt: skip
        fixture_report("gpt_tiny", target, chip).write_tensorboard(root, run)
    big_report(20_000).write_tensorboard(root, "1_big_too")  # another big one to check
    return root


def first_paint(browser, root: Path, pythonpath: str) -> float:
    os.environ["PYTHONPATH"] = pythonpath
    with tensorboard(root) as url:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(120_000)
        page.goto(f"{url}/#hlo_roofline&p.hlo_roofline.run=0_big")
        page.locator(IFRAME).wait_for(state="attached")
        start = time.perf_counter()
        page.frame_locator(IFRAME).locator('.hr-app[data-state=ready][data-run="0_big"]').wait_for()
        seconds = time.perf_counter() - start
        page.close()
    return seconds


def main() -> None:
    before, after = sys.argv[1], sys.argv[2]
    repeat = int(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[3] == "--repeat" else 2
    root = logdir()
    times: dict[str, list[float]] = {"before": [], "after": []}
    with chromium() as browser:
        for _ in range(repeat):
            for name, path in (("before", before), ("after", after)):
                times[name].append(first_paint(browser, root, path))
                print(f"{name}: {times[name][-1]:.2f} s", flush=True)
    b, a = statistics.median(times["before"]), statistics.median(times["after"])
    print(f"median before {b:.2f} s, after {a:.2f} s, after/before {a / b:.2f}")


if __name__ == "__main__":
    main()
