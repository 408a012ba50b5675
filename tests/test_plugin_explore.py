"""The tab's layout exploration view: the route over a committed exploration (the explorer's own
document and candidate reports, fixtures/explore/h100_gate) and the view in headless Chromium."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from tb_helpers import NEEDS_BROWSER
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

from hlo_roofline import Report, explorer
from hlo_roofline.logdir import EXPLORE_JSON
from hlo_roofline_tensorboard import plugin as tb_plugin

SWEEP = Path(__file__).resolve().parent.parent / "fixtures" / "explore" / "h100_gate"
PREFIX = "/data/plugin/hlo_roofline"
IFRAME = 'iframe[src*="plugin_entry.html?name=hlo_roofline"]'
MISSING = 2  # candidates whose reports the logdir lacks: listed, not clickable


def document() -> dict:
    return json.loads((SWEEP / EXPLORE_JSON).read_text())


@pytest.fixture(scope="module")
def logdir(tmp_path_factory) -> Path:
    """The sweep as ``Exploration.write_tensorboard`` lays it out, under ``sweep/``, with two
    candidates' reports left out; a broken exploration under ``broken/``."""
    root = tmp_path_factory.mktemp("explore_logdir")
    rows = document()["rows"]
    for row in rows[MISSING:]:
        with gzip.open(SWEEP / f"{row['run']}.json.gz", "rt") as f:
            Report.from_dict(json.load(f)).write_tensorboard(root / "sweep", row["run"])
    shutil.copy(SWEEP / EXPLORE_JSON, root / "sweep" / EXPLORE_JSON)
    (root / "broken").mkdir()
    (root / "broken" / EXPLORE_JSON).write_text('{"format": "hlo_roofline.exploration", "ver')
    return root


def test_route_serves_the_documents_numbers_and_run_names(logdir):
    plugin = tb_plugin.HloRooflinePlugin(base_plugin.TBContext(logdir=str(logdir)), warm=False)
    response = Client(application.TensorBoardWSGI([plugin])).get(PREFIX + "/explorations")
    assert response.status_code == 200, response.get_data(as_text=True)
    docs = {d["dir"]: d for d in json.loads(response.get_data(as_text=True))}
    assert set(docs) == {"sweep", "broken"}
    assert "not" in docs["broken"]["error"] or "cannot" in docs["broken"]["error"]
    assert str(logdir) not in docs["broken"]["error"]
    doc, written = docs["sweep"], document()
    assert doc["hbm_capacity"] == written["hbm_capacity"] and doc["target"] == written["target"]
    for served, row in zip(doc["rows"], written["rows"], strict=True):
        for key in ("candidate", "step_s", "hbm_per_device", "bound", "rank", "fit"):
            assert served[key] == row[key]
        assert served["sizes"] == {a: row[a] for a in written["axes"]}
    runs = [r["run"] for r in doc["rows"]]
    assert runs[:MISSING] == [None] * MISSING  # no report in the logdir: nothing to open
    assert runs[MISSING:] == [f"sweep/{r['run']}" for r in written["rows"][MISSING:]]


def test_statuses_are_codes_worded_beside_them(tmp_path):
    """A row's status is a code (no spaces: a script compares it), its words beside it for the
    view; a document written before the codes (statuses in words) reads as the same codes."""
    doc = document()
    rows = doc["rows"][:3]
    rows[1] = {**rows[1], "status": explorer.STATUS_NO_FIT}
    rows[2] = {**rows[2], "status": "compile error", "error": "IndivisibleError: 16 by 32"}
    (tmp_path / "now").mkdir()
    (tmp_path / "now" / EXPLORE_JSON).write_text(json.dumps({**doc, "rows": rows}))
    plugin = tb_plugin.HloRooflinePlugin(base_plugin.TBContext(logdir=str(tmp_path)), warm=False)
    response = Client(application.TensorBoardWSGI([plugin])).get(PREFIX + "/explorations")
    served = json.loads(response.get_data(as_text=True))[0]["rows"]
    assert [r["status"] for r in served] == ["ok", "does_not_fit", "error"]
    assert [r["status_text"] for r in served] == ["ok", "does not fit", "error"]
    assert all(" " not in code for code in explorer.STATUS_TEXT)


def test_rows_come_a_page_at_a_time(tmp_path):
    """Before: every row of every exploration in one response (74 MB for 100k rows). Now a page
    (``offset``, ``limit``; 500 rows by default) with ``rows_total``; ``dir`` names one
    exploration; a bad count is a 400."""
    doc = document()
    many = [{**doc["rows"][i % len(doc["rows"])], "candidate": f"c{i}"} for i in range(1234)]
    (tmp_path / "big").mkdir()
    (tmp_path / "big" / EXPLORE_JSON).write_text(json.dumps({**doc, "rows": many}))
    (tmp_path / "small").mkdir()
    (tmp_path / "small" / EXPLORE_JSON).write_text(json.dumps(doc))
    plugin = tb_plugin.HloRooflinePlugin(base_plugin.TBContext(logdir=str(tmp_path)), warm=False)
    client = Client(application.TensorBoardWSGI([plugin]))

    def get(query: str):
        response = client.get(PREFIX + "/explorations" + query)
        return response.status_code, json.loads(response.get_data(as_text=True))

    status, first = get("")
    assert status == 200
    big = next(d for d in first if d["dir"] == "big")
    assert big["rows_total"] == 1234 and len(big["rows"]) == tb_plugin.EXPLORE_PAGE == 500
    assert big["offset"] == 0 and big["rows"][0]["candidate"] == "c0"
    status, page = get("?dir=big&offset=1200&limit=100")
    assert status == 200 and [d["dir"] for d in page] == ["big"]
    assert [r["candidate"] for r in page[0]["rows"]] == [f"c{i}" for i in range(1200, 1234)]
    assert len(get("?dir=big&limit=999999")[1][0]["rows"]) == min(1234, tb_plugin.EXPLORE_PAGE_MAX)
    monkeypatched = tb_plugin.EXPLORE_PAGE_MAX
    try:  # the cap holds whatever limit is asked for
        tb_plugin.EXPLORE_PAGE_MAX = 1000
        assert len(get("?dir=big&limit=999999")[1][0]["rows"]) == 1000
    finally:
        tb_plugin.EXPLORE_PAGE_MAX = monkeypatched
    assert get("?offset=-1")[0] == 400 and get("?limit=x")[0] == 400
    assert get("?dir=nowhere")[0] == 404
    assert next(d for d in first if d["dir"] == "small")["rows_total"] == len(doc["rows"])


def test_no_exploration_is_an_empty_list(tmp_path):
    plugin = tb_plugin.HloRooflinePlugin(base_plugin.TBContext(logdir=str(tmp_path)), warm=False)
    response = Client(application.TensorBoardWSGI([plugin])).get(PREFIX + "/explorations")
    assert response.status_code == 200 and json.loads(response.get_data(as_text=True)) == []


@NEEDS_BROWSER
@pytest.mark.xdist_group("tensorboard_browser")
def test_view_draws_every_candidate_and_opens_its_run(page, server):
    written = document()
    rows = written["rows"]
    page.goto(f"{server}/#hlo_roofline")
    frame = page.frame_locator(IFRAME)
    frame.locator(".hr-app[data-state=ready]").wait_for()
    frame.locator("#hr-explore[data-state=ready]").wait_for()
    sweep = frame.locator('.hr-explore-doc[data-dir="sweep"]')
    # below the run's own view, closed until asked for: the run is what the tab opens on
    assert sweep.get_attribute("open") is None
    run_bottom = frame.locator(".hr-content").bounding_box()
    assert frame.locator("#hr-explore").bounding_box()["y"] >= run_bottom["y"] + run_bottom["height"]
    sweep.locator("summary").click()
    points = sweep.locator("circle.hr-explore-point")
    plotted = [r for r in rows if r["step_s"] is not None and r["hbm_per_device"] is not None]
    assert points.count() == len(plotted) == 10
    drawn = {
        points.nth(i).get_attribute("data-candidate"): points.nth(i) for i in range(points.count())
    }
    for r in plotted:  # each point carries the document's numbers and bound colour
        p = drawn[r["candidate"]]
        assert float(p.get_attribute("data-step")) == r["step_s"]
        assert float(p.get_attribute("data-hbm")) == r["hbm_per_device"]
        assert p.get_attribute("data-bound") == r["bound"]
    colours = {r["bound"]: drawn[r["candidate"]].get_attribute("fill") for r in plotted}
    assert len(set(colours.values())) == len(colours) >= 2  # bounds drawn apart
    # Placement: a longer step is higher (smaller y), more HBM further right.
    by_step = sorted(plotted, key=lambda r: r["step_s"])
    ys = [float(drawn[r["candidate"]].get_attribute("cy")) for r in by_step]
    assert ys == sorted(ys, reverse=True)
    by_hbm = sorted(plotted, key=lambda r: r["hbm_per_device"])
    xs = [float(drawn[r["candidate"]].get_attribute("cx")) for r in by_hbm]
    assert xs == sorted(xs)
    # The capacity line lies right of every candidate here (all fit in 80 GB).
    line = sweep.locator('[data-testid="hbm-capacity"]')
    assert float(line.get_attribute("data-bytes")) == written["hbm_capacity"]
    assert float(line.get_attribute("x1")) > max(xs)
    best = [r for r in rows if r["rank"] == 1]
    ring = sweep.locator('[data-testid="explore-best"]')
    assert ring.count() == 1 and ring.get_attribute("data-candidate") == best[0]["candidate"]
    # The broken exploration says so; the others still draw.
    broken = frame.locator('.hr-explore-doc[data-dir="broken"]')
    assert "cannot be read" in broken.locator("summary").inner_text()
    # Candidates without a report in the logdir are not links.
    for r in rows[:MISSING]:
        assert drawn[r["candidate"]].get_attribute("data-run") is None
    # Click-through opens the candidate's run.
    target = next(r for r in rows[MISSING:] if r["rank"] != 1)
    run = f"sweep/{target['run']}"
    # Each row's status in words (the document holds codes), the code beside it
    statuses = sweep.locator("td[data-status]")
    assert statuses.count() == len(rows)
    for i, r in enumerate(rows):
        assert statuses.nth(i).get_attribute("data-status") == r["status"] == "ok"
        assert statuses.nth(i).inner_text() == explorer.status_text(r["status"])
    drawn[target["candidate"]].click()
    frame.locator(f'.hr-app[data-state=ready][data-run="{run}"]').wait_for()
    assert frame.locator("#hr-run").input_value() == run
