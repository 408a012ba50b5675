"""The tab against the TPU compute model, in real Chromium: each predicted point on the roof of the
unit that bounds it (the server's roof columns), the details quoting only the server's numbers, the
timeline of the step as scheduled, a first paint that never waits for the other runs' check, and
the constants (bounds, colours, groupings) coming from the server.

Real reports: the committed gpt_tiny fixtures on v5e (47% of its timed ops held at the per-op
floor) and H100, the FSDP step sharded over four v5p chips (exposed collectives).
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest
from tb_helpers import NEEDS_BROWSER, fixture_report, write_corrupt

from hlo_roofline import Report, analyze_hlo
from hlo_roofline_tensorboard import _data

pytestmark = [
    NEEDS_BROWSER,
    pytest.mark.xdist_group("tensorboard_browser_roofs"),
]

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
RUNS = {
    "gpt/v5e": ("gpt_tiny", "tpu_v5e", "v5e"),
    "gpt/h100": ("gpt_tiny", "h100", "h100-sxm"),
    "fsdp/v5p": ("fsdp_train_step", "tpu_v5p", "v5p"),
}


@pytest.fixture(scope="module")
def logdir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tb_roofs")
    for run, (program, target, chip) in RUNS.items():
        fixture_report(program, target, chip).write_tensorboard(root, run)
    analyze_hlo(FIXTURES / "mlp_bf16" / "tpu_v5e.hlo.txt").write_tensorboard(root, "unjudged")
    write_corrupt(root, "0_corrupt")  # sorts first: the tab must pass over it without waiting
    return root


def read(logdir: Path, run: str) -> Report:
    return Report.read(logdir / run / "plugins" / "hlo_roofline" / "report.json")


def open_plugin(page, server: str, run: str, state: str = "ready"):
    page.goto(f"{server}/data/plugin_entry.html?name=hlo_roofline&run={run}")
    page.locator(f'.hr-app[data-state={state}][data-run="{run}"]').wait_for()
    return page


def select(frame, name: str) -> None:
    frame.locator("#hr-timed-only").uncheck()
    frame.locator("#hr-search").fill(name)
    rows = frame.locator('.hr-ops [role=grid][aria-label="Ops"] .hr-body .hr-row')
    rows.filter(has=frame.locator(f'[data-key="name"]:text-is("{name}")')).click()
    frame.locator(f'.hr-details h3:text-is("{name}")').wait_for()


def si(x: float, unit: str) -> str:
    """util.js fmtSI, for the server's number (3 significant digits and a prefix)."""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= scale:
            a = x / scale
            return f"{a:.0f} {prefix}{unit}" if a >= 100 else f"{a:.1f} {prefix}{unit}" if a >= 10 else f"{a:.2f} {prefix}{unit}"
    return f"{x:.2f} {unit}"


@pytest.mark.parametrize("run", list(RUNS))
def test_every_point_lies_on_its_own_roof(page, server, logdir, run):
    """Each predicted point (intensity, FLOP/s as drawn) lies on min(compute roof, intensity ×
    memory roof) of its own row, the roof drawn for it when selected is those numbers, named by
    its unit, and the details quote them."""
    report = read(logdir, run)
    ops = report.ops
    frame = open_plugin(page, server, run)
    canvas = frame.locator("canvas.hr-chart-canvas")
    layout = canvas.evaluate("c => c.hloLayout()")
    assert layout["plot"]["right"] > layout["plot"]["left"]
    points = [p for p in canvas.evaluate("c => c.hloPoints()") if not p["strip"]]
    assert points
    on_roof = 0
    for p in points:
        op = ops.loc[p["row"]]
        if op["roof_unit"] == "link":
            continue
        flops, bw = op["roof_flops_per_s"], op["roof_bytes_per_s"]
        roof = min(v for v in (flops, p["value_x"] * bw) if v == v)
        assert p["value_y"] == pytest.approx(roof, rel=1e-9), op["name"]
        on_roof += 1
    assert on_roof
    # the legend counts the points on each roof (ops with FLOPs: the strip's are counted apart),
    # as the server names the roofs
    units = json.loads(frame.locator(".hr-chart-note").get_attribute("data-units"))
    plotted = ops[(ops["t_bound_s"] > 0) & (ops["flops"] > 0) & (ops["intensity"] > 0)]
    assert len(plotted) == len(points)
    assert units == {k: int(v) for k, v in plotted["roof_unit"].value_counts().items() if k}

    # the op with the most time: its roof is drawn, named and quoted from the server
    op = ops[ops["t_expected_s"] > 0].sort_values("t_expected_s").iloc[-1]
    select(frame, op["name"])
    own = canvas.evaluate("c => c.hloOwnRoof()")
    if op["flops"] > 0 and op["intensity"] > 0:
        assert own["unit"] == op["roof_unit"]
        assert own["label"] == (
            "its time: link (its collective)" if op["roof_unit"] == "link"
            else f"its roof: {op['roof_unit']}"
        )  # fmt: skip
    roof = frame.locator('.hr-details dd[data-field="roof"]').text_content()
    assert roof.startswith(f"{op['roof_unit']}: ")
    if op["roof_bytes_per_s"] > 0:
        assert f"memory roof {si(op['roof_bytes_per_s'], 'B/s')}" in roof
    ridge = frame.locator('.hr-details dd[data-field="ridge"]')
    if ridge.count():
        assert "÷" not in ridge.text_content()  # the server's ridge, no arithmetic beside it
    unit = frame.locator('.hr-details dd[data-field="compute unit"]')
    if op["compute_unit"]:
        assert unit.text_content() == op["compute_unit"]


def test_a_v5e_op_expected_at_the_floor_is_drawn_at_its_bound(page, server, logdir):
    """On v5e many timed ops are expected at the per-op floor (a calibration): the floor's share
    of the expected time is shown, but the chart plots each op's bound, which lies on the roof its
    row names (its unit or memory: no roof is a floor)."""
    report = read(logdir, "gpt/v5e")
    ops = report.ops
    floored = ops[(ops["expected_by"] == "floor") & (ops["flops"] > 0) & (ops["intensity"] > 0)]
    assert len(floored) and "floor" not in set(ops["roof_unit"])
    frame = open_plugin(page, server, "gpt/v5e")
    card = frame.locator('[data-card="floor"] .hr-card-value').text_content()
    assert card == f"{report.summary['floor_share'] * 100:.1f}%"
    op = floored.sort_values("t_expected_s").iloc[-1]
    select(frame, op["name"])
    own = frame.locator("canvas.hr-chart-canvas").evaluate("c => c.hloOwnRoof()")
    assert own["unit"] == op["roof_unit"]
    assert own["flops"] == pytest.approx(op["roof_flops_per_s"], rel=1e-12)


def test_timeline_marks_exposed_communication_and_selects_ops(page, server, logdir):
    report = read(logdir, "fsdp/v5p")
    ops = report.ops
    timed = ops[ops["t_expected_s"] > 0]
    exposed = ops[ops["t_exposed_s"] > 0]
    assert len(exposed) and report.summary["exposed_comm_s"] > 0
    frame = open_plugin(page, server, "fsdp/v5p")
    frame.locator("#hr-timeline summary").click()
    frame.locator('#hr-timeline[data-state="ready"]').wait_for()
    canvas = frame.locator("canvas.hr-timeline-canvas")
    bars = canvas.evaluate("c => c.hloBars()")
    assert sorted(b["row"] for b in bars) == sorted(timed.index)
    lanes = {b["lane"] for b in bars}
    assert "compute" in lanes and any(lane.startswith("interconnect") for lane in lanes)
    marked = [b for b in bars if b.get("exposedX")]
    assert sorted(b["row"] for b in marked) == sorted(exposed.index)
    # bars sit in schedule order on the stream: none overlaps the next
    stream = sorted((b for b in bars if b["lane"] == "compute"), key=lambda b: b["x0"])
    for a, b in itertools.pairwise(stream):
        assert a["x1"] <= b["x0"] + 1.01
    target = max(marked, key=lambda b: b["x1"] - b["x0"])
    box = canvas.bounding_box()
    canvas.click(position={"x": (target["x0"] + target["x1"]) / 2, "y": target["y"] + target["h"] / 2})
    assert frame.locator(".hr-details h3").text_content() == ops.loc[target["row"], "name"]
    assert box["width"] > 0
    exposed_text = frame.locator('.hr-details dd[data-field="exposed"]').text_content()
    assert "waited" in exposed_text


def test_first_paint_never_waits_for_the_run_check(page, server, logdir):
    """The shown run is drawn before the tab asks which runs cannot load (a request that reads
    every report in the logdir); a corrupt run that sorts first is passed over at once."""
    order: list[str] = []
    page.on("request", lambda r: order.append(r.url.split("/hlo_roofline/")[-1].split("?")[0]))
    page.goto(f"{server}/data/plugin_entry.html?name=hlo_roofline")
    page.locator('.hr-app[data-state=ready][data-run="fsdp/v5p"]').wait_for()
    page.wait_for_function("() => !document.querySelector('#hr-run-errors').hidden")
    assert "run_errors" in order
    reports = [i for i, u in enumerate(order) if u == "report"]
    assert reports and reports[0] < order.index("run_errors")
    assert "0_corrupt" in page.locator("#hr-run-errors").text_content()


def test_unjudged_run_says_so(page, server, logdir):
    open_plugin(page, server, "unjudged")
    note = page.locator(".hr-chart-note")
    assert note.get_attribute("data-unjudged") == "1" and "not judged" in note.text_content()


def test_constants_and_colours_come_from_the_server(page, server, logdir):
    constants = _data.constants()
    open_plugin(page, server, "gpt/v5e")
    colours = page.evaluate(
        """() => {
        const bar = document.createElement("div");
        bar.className = "hr-sharebar hr-membar";
        const out = {};
        for (const fit of ["fits", "tight", "does-not-fit"]) {
          const seg = document.createElement("span");
          seg.className = `hr-fit-${fit}`;
          bar.append(seg);
        }
        document.querySelector(".hr-app").append(bar);
        for (const seg of bar.children) out[seg.className] = getComputedStyle(seg).backgroundColor;
        bar.remove();
        return out;
      }"""
    )

    def rgb(hex_colour: str) -> str:
        r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
        return f"rgb({r}, {g}, {b})"

    fits = constants["fit_colors"]
    assert colours["hr-fit-fits"] == rgb(fits["fits"])
    assert colours["hr-fit-does-not-fit"] == rgb(fits["does_not_fit"])
    options = page.locator("#hr-group-by option").all_text_contents()
    assert options[1:] == list(constants["groupings"].values())
    bounds = page.locator("#hr-filter-bound option").all_text_contents()
    assert [b for b in constants["bounds"] if b in " ".join(bounds)]
    # small intensities keep their digits (was "0.00")
    shown = page.evaluate("async () => (await import('./util.js')).fmtSI(0.00432)")
    assert shown == "0.00432"


def test_long_names_are_cut_in_the_middle(browser, server, logdir):
    """A long op_name keeps its end (what tells rows apart) and the cell holds the whole text."""
    context = browser.new_context(viewport={"width": 1000, "height": 1000})
    page = context.new_page()
    try:
        open_plugin(page, server, "gpt/h100")
        cells = page.locator('.hr-ops .hr-body .hr-cell.hr-mid[data-tail][data-key="op_name"]')
        cells.first.wait_for()
        report = read(logdir, "gpt/h100")
        names = set(report.ops["op_name"])
        checked = 0
        for i in range(min(cells.count(), 10)):
            cell = cells.nth(i)
            text = cell.text_content()  # the whole name, as written
            assert text in names and cell.get_attribute("title") == text
            assert text.endswith(cell.get_attribute("data-tail"))
            # the tail is drawn: the cell reserves its room and the text itself is cut before it
            assert cell.evaluate(
                "c => c.scrollWidth > c.clientWidth - parseFloat(getComputedStyle(c).paddingRight)"
                " && getComputedStyle(c, '::after').content.includes(c.dataset.tail)"
            )
            checked += 1
        assert checked
        assert re.search(r"\S", page.locator("#hr-count").text_content())
    finally:
        context.close()


def test_groups_by_keyboard_and_filters_stay_with_their_run(page, server, logdir):
    """↓ in the grouped table moves between groups without opening one; Enter opens the one
    chosen. Clear keeps "only ops with time". A search made in one run is not carried to the next
    (it would show "0 of N ops" there)."""
    report = read(logdir, "fsdp/v5p")
    table = report.rollup("user_function")
    assert len(table) >= 2
    frame = open_plugin(page, server, "fsdp/v5p")
    frame.locator("#hr-group-by").select_option("user_function")
    groups = frame.locator("#hr-groups")
    frame.locator('#hr-groups[data-state="ready"]').wait_for()
    body = groups.locator(".hr-body")
    body.focus()
    body.press("ArrowDown")
    body.press("ArrowDown")
    assert groups.is_visible()  # no group opened by the arrows
    selected = groups.locator('.hr-row[aria-selected="true"] [data-key="user_function"]')
    second = str(table.index[1])
    assert selected.get_attribute("title") == second
    body.press("Enter")
    frame.locator("#hr-group-filter").wait_for(state="visible")
    assert frame.locator("#hr-group-by").input_value() == ""
    # the count names the group's ops as its row counted them
    count = frame.locator("#hr-count")
    assert count.get_attribute("data-group") == str(int(table.loc[second, "ops"]))
    assert f"of the group's {int(table.loc[second, 'ops'])} ops" in count.text_content()
    function = second[second.rindex("(") :]  # the second group's function, not the first's
    assert function in frame.locator("#hr-group-filter").text_content()
    assert str(table.index[0])[str(table.index[0]).rindex("(") :] != function
    # the comm-bound share and exposed time are columns of a sharded run's groups
    frame.locator("#hr-group-by").select_option("user_function")
    frame.locator('#hr-groups[data-state="ready"]').wait_for()
    keys = groups.locator("[role=columnheader]").evaluate_all("cs => cs.map(c => c.dataset.key)")
    assert "mix_communication" in keys and "t_exposed_s" in keys
    frame.locator("#hr-group-by").select_option("")

    frame.locator("#hr-search").fill("all-gather")
    frame.locator("#hr-count").filter(has_text=re.compile("of")).wait_for()
    clear = frame.locator("#hr-timed-only")
    assert clear.is_checked()
    frame.locator("#hr-run").select_option("gpt/h100")
    frame.locator('.hr-app[data-state=ready][data-run="gpt/h100"]').wait_for()
    assert frame.locator("#hr-search").input_value() == ""
    ops = read(logdir, "gpt/h100").ops
    shown = frame.locator("#hr-count").get_attribute("data-shown")
    assert int(shown) == int((ops["t_expected_s"] > 0).sum())


IFRAME = 'iframe[src*="plugin_entry.html?name=hlo_roofline"]'


def test_the_host_url_and_theme_drive_the_tab(page, server, logdir):
    """Inside TensorBoard: a link opened in a window already on the tab (only the hash changes)
    shows its view; coming back from another tab puts the tab's state back in the URL; the tab
    follows TensorBoard's dark theme."""
    page.goto(f"{server}/#hlo_roofline&p.hlo_roofline.run=gpt%2Fv5e")
    frame = page.frame_locator(IFRAME)
    frame.locator('.hr-app[data-state=ready][data-run="gpt/v5e"]').wait_for()
    page.evaluate("() => { location.hash = '#hlo_roofline&p.hlo_roofline.run=gpt%2Fh100'; }")
    frame.locator('.hr-app[data-state=ready][data-run="gpt/h100"]').wait_for()
    assert frame.locator("#hr-run").input_value() == "gpt/h100"

    page.evaluate("() => { location.hash = '#hlo_roofline'; }")  # the tab's keys dropped
    page.wait_for_function("() => location.hash.includes('p.hlo_roofline.run=gpt%2Fh100')")

    # A link opened just as the tab is about to write its own state (a keystroke's write is
    # pending): the link's view is not overwritten, and is shown when its hashchange arrives.
    frame.locator("#hr-search").evaluate(
        """(box, hash) => {
            box.value = 'fusion';
            box.dispatchEvent(new Event('input'));
            window.parent.history.replaceState(null, '', hash);
        }""",
        "#hlo_roofline&p.hlo_roofline.run=gpt%2Fv5e",
    )
    page.wait_for_timeout(400)  # the pending write (100 ms) has run
    assert "p.hlo_roofline.run=gpt%2Fv5e" in page.evaluate("() => location.hash")
    page.evaluate("() => window.dispatchEvent(new HashChangeEvent('hashchange'))")
    frame.locator('.hr-app[data-state=ready][data-run="gpt/v5e"]').wait_for()

    root = frame.locator("html")
    page.evaluate("() => document.body.classList.add('dark-mode')")
    page.wait_for_function(
        """sel => document.querySelector(sel).contentDocument.documentElement
                 .classList.contains('hr-dark')""",
        arg=IFRAME,
    )
    background = frame.locator("body").evaluate("e => getComputedStyle(e).backgroundColor")
    assert background == "rgb(30, 31, 34)"  # the dark theme's --hr-bg
    page.evaluate("() => document.body.classList.remove('dark-mode')")
    page.wait_for_function(
        """sel => document.querySelector(sel).contentDocument.documentElement
                 .classList.contains('hr-light')""",
        arg=IFRAME,
    )
    assert root.count() == 1
