"""The "HLO Roofline" tab end to end: a real `tensorboard --logdir` driven by headless Chromium.

Skipped only when /usr/bin/chromium is missing and HLO_ROOFLINE_REQUIRE_BROWSER is unset (CI sets
it, so there a missing browser or playwright is a failure). One TensorBoard serves the module's
logdir and one browser the session (conftest's ``server`` and ``browser``); each test gets a
fresh browser context (``page``).
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path
from urllib.parse import quote

import pytest
from click.testing import CliRunner
from tb_helpers import (
    ARTIFACTS,
    HOSTILE,
    NEEDS_BROWSER,
    big_report,
    first_chip_flip,
    fixture_report,
    hostile_report,
    layout_problems,
    measured_report,
    starved_report,
    timed_rows,
    without_column,
    write_corrupt,
    write_flipping_pair,
)

from hlo_roofline import Report, analyze, cli

pytestmark = [
    NEEDS_BROWSER,
    pytest.mark.xdist_group("tensorboard_browser"),
]

IFRAME = 'iframe[src*="plugin_entry.html?name=hlo_roofline"]'
# Chips tried, in order, for a verdict flip on attention/h100 (judged on H100 SXM when written).
FLIP_CHIPS = ["v5e", "v5p", "a100-80gb", "b200", "mi300x"]


# The demo's model (committed gpt_tiny fixtures) on three chips: (run, program target, chip).
DEMO_RUNS = [("gpt/v5e", "tpu_v5e", "v5e"), ("gpt/h100", "h100", "h100-sxm"),
             ("gpt/v6e", "tpu_v5e", "v6e")]  # fmt: skip
CORRUPT_FIRST = "0_corrupt"  # sorts before every other run


@pytest.fixture(scope="module")
def logdir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tb_logdir")
    fixture_report("mlp_bf16", "tpu_v5e", "v5e").write_tensorboard(root, "mlp_bf16/tpu_v5e")
    fixture_report("attention", "h100", "h100-sxm").write_tensorboard(root, "attention/h100")
    for run, target, chip in DEMO_RUNS:
        fixture_report("gpt_tiny", target, chip).write_tensorboard(root, run)
    starved_report().write_tensorboard(root, "starved")
    root.joinpath("pair.txt").write_text("\n".join(write_flipping_pair(root)))
    hostile_report().write_tensorboard(root, "hostile")
    measured_report(root / "measured").write_tensorboard(root, "measured")
    big_report(20_000).write_tensorboard(root, "big")
    without_column(fixture_report("mlp_bf16", "tpu_v5e", "v5e"), "bound").write_tensorboard(
        root, "no_bound"
    )
    write_corrupt(root, "broken")
    write_corrupt(root, CORRUPT_FIRST)
    too_big_for_v5e().write_tensorboard(root, "too_big")
    fixture_report("fsdp_train_step", "h100", "h100-sxm").write_tensorboard(root, "fsdp/h100")
    return root


def too_big_for_v5e():
    """An Adam step of 22 GiB per device that XLA:TPU refuses for a 16 GiB v5e (compile-only)."""
    from test_memory_fit import adam, state

    return analyze(adam, *state(), target="v5e:2x2")


def read(logdir: Path, run: str) -> Report:
    return Report.read(logdir / run / "plugins" / "hlo_roofline" / "report.json")


def open_tab(page, server: str, run: str | None = None):
    """The tab inside TensorBoard's own page (deep link ``/#hlo_roofline``); returns its iframe."""
    page.goto(f"{server}/#hlo_roofline")
    frame = page.frame_locator(IFRAME)
    frame.locator(".hr-app[data-state=ready], .hr-app[data-state=error]").wait_for()
    if run is not None:
        select_run(frame, run)
    return frame


def open_plugin(page, server: str, run: str, state: str = "ready"):
    """The document TensorBoard puts in the tab's iframe (same URL, same CSP), opened directly.

    Much cheaper than booting TensorBoard's Angular app for every test; the first test checks the
    tab inside the real app.
    """
    page.goto(f"{server}/data/plugin_entry.html?name=hlo_roofline&run={quote(run, safe='')}")
    page.locator(f'.hr-app[data-state={state}][data-run="{run}"]').wait_for()
    return page


def select_run(frame, run: str, state: str = "ready"):
    frame.locator("#hr-run").select_option(run)
    frame.locator(f'.hr-app[data-state={state}][data-run="{run}"]').wait_for()


def wait_shown(frame, n: int):
    frame.locator(f'#hr-count[data-shown="{n}"]').wait_for()


def body_rows(frame):
    return frame.locator('.hr-ops [role=grid][aria-label="Ops"] .hr-body .hr-row')


def test_tab_appears_and_chart_has_one_point_per_timed_op(page, server, logdir):
    frame = open_tab(page, server, "mlp_bf16/tpu_v5e")
    assert page.get_by_text(re.compile("^\\s*HLO Roofline\\s*$", re.I)).first.is_visible()
    report = read(logdir, "mlp_bf16/tpu_v5e")
    canvas = frame.locator("canvas.hr-chart-canvas")
    assert int(canvas.get_attribute("data-points")) == timed_rows(report)
    points = canvas.evaluate("c => c.hloPoints()")
    timed = report.ops.index[report.ops["t_expected_s"] > 0]
    assert sorted(p["row"] for p in points) == list(timed)

    # Hover the biggest point: the tooltip names the op; clicking selects its table row.
    top = max(points, key=lambda p: p["r"])
    op = report.ops.loc[top["row"]]
    canvas.hover(position={"x": top["x"], "y": top["y"]})
    tooltip = frame.locator(".hr-tooltip")
    tooltip.wait_for(state="visible")
    text = tooltip.text_content()
    for expected in (op["name"], op["opcode"], op["op_name"], op["source"], op["hint"]):
        assert expected in text
    for label in ("FLOPs", "bytes", "time", "compute", "memory", "share"):
        assert label in text
    canvas.click(position={"x": top["x"], "y": top["y"]})
    selected = frame.locator('.hr-ops .hr-row[aria-selected="true"]')
    assert selected.locator('[data-key="name"]').text_content() == op["name"]
    assert frame.locator(".hr-details h3").text_content() == op["name"]
    if op["fused_ops"]:
        assert frame.locator(".hr-details pre.hr-fused").text_content() == op["fused_ops"]
    precision = frame.locator('.hr-details dd[data-field="precision"]')
    if op["precision"]:  # a matmul: how it computes f32 inputs
        assert precision.text_content() == op["precision"]
    else:
        assert precision.count() == 0

    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "hlo_roofline_tab.png"), full_page=True)
    assert (ARTIFACTS / "hlo_roofline_tab.png").stat().st_size > 10_000


def test_filters_narrow_the_table(page, server, logdir):
    frame = open_plugin(page, server, "mlp_bf16/tpu_v5e")
    ops = read(logdir, "mlp_bf16/tpu_v5e").ops
    timed = ops[ops["t_expected_s"] > 0]
    wait_shown(frame, len(timed))  # default: ops with a predicted time
    opcode = timed["opcode"].value_counts().index[-1]  # the rarest opcode: a real narrowing
    frame.locator("#hr-filter-opcode").select_option(opcode)
    n = int((timed["opcode"] == opcode).sum())
    assert n < len(timed)
    wait_shown(frame, n)
    cells = body_rows(frame).locator('[data-key="opcode"]').all_text_contents()
    assert cells and set(cells) == {opcode}

    frame.locator("#hr-filter-opcode").select_option("")
    wait_shown(frame, len(timed))
    frame.locator('.hr-ops [role=columnheader][data-key="name"]').click()  # sort by name
    shown = body_rows(frame).locator('[data-key="name"]').all_text_contents()
    assert shown == sorted(timed["name"])[: len(shown)]

    name = timed.sort_values("t_expected_s").iloc[-1]["name"]
    frame.locator("#hr-search").fill(name)
    hay = timed[
        ["name", "op_name", "source", "user_source", "opcode", "hint", "fused_ops", "bound"]
    ]
    matches = hay.apply(lambda r: name.lower() in "\n".join(r).lower(), axis=1)
    wait_shown(frame, int(matches.sum()))
    assert name in body_rows(frame).locator('[data-key="name"]').all_text_contents()

    frame.locator("#hr-search").fill("")
    frame.locator("#hr-filter-bound").select_option("compute")
    wait_shown(frame, int((timed["bound"] == "compute").sum()))


def test_chip_switch_changes_verdicts(page, server, logdir):
    report = read(logdir, "attention/h100")
    chip, name, before, after = first_chip_flip(report, FLIP_CHIPS)
    frame = open_plugin(page, server, "attention/h100")
    frame.locator("#hr-search").fill(name)
    row = body_rows(frame).filter(
        has=frame.locator('[data-key="name"]', has_text=re.compile(f"^{re.escape(name)}$"))
    )
    row.click()
    bound = frame.locator('.hr-details dd[data-field="bound"]')
    assert bound.text_content() == before
    frame.locator("#hr-chip").select_option(chip)
    frame.locator(f'.hr-app[data-state=ready][data-chip="{chip}"]').wait_for()
    assert bound.text_content() == after
    assert row.locator('[data-key="bound"]').text_content() == after
    # The summary is the server's re-classification too.
    assert report.classify(chip).summary["chip_name"] in frame.locator(".hr-summary").text_content()


def test_a_chip_switch_shows_what_opening_the_chip_shows(page, server, logdir):
    """A switch from the run as written is sent only what the chip changed (``since``); the tab
    adds the rest from the report it holds, and draws and lists what it draws for the page
    opened on that chip at once (sent whole)."""
    run, chip = "fsdp/h100", "v5p"

    def for_chip(response) -> bool:
        return "/report?" in response.url and f"chip={chip}" in response.url

    frame = open_plugin(page, server, run)
    with page.expect_response(for_chip) as switch:  # waited for: a listener's list may lag
        frame.locator("#hr-chip").select_option(chip)
    frame.locator(f'.hr-app[data-state=ready][data-chip="{chip}"]').wait_for()
    assert "since=" in switch.value.url and switch.value.json()["same"]
    expected = read(logdir, run).classify(chip)
    shown = (chart(frame).evaluate("c => c.hloPoints()"), frame.locator(".hr-summary").text_content(),
             body_rows(frame).all_text_contents())  # fmt: skip
    assert len(shown[0]) == timed_rows(expected)
    with page.expect_response(for_chip) as opened:
        page.goto(f"{server}/data/plugin_entry.html?name=hlo_roofline&run={quote(run)}&chip={chip}")
    page.locator(f'.hr-app[data-state=ready][data-chip="{chip}"]').wait_for()
    assert "same" not in opened.value.json()
    assert shown == (chart(page).evaluate("c => c.hloPoints()"),
                     page.locator(".hr-summary").text_content(),
                     body_rows(page).all_text_contents())  # fmt: skip


def test_floats_sent_as_doubles_read_back_as_the_servers_numbers(page, server, logdir):
    """A re-judged report's float columns travel as base64 doubles: the tab's Model reads back
    the very numbers ``Report.classify`` made, NaN as null (as JSON has it)."""
    run, chip = "fsdp/h100", "v5p"
    expected = read(logdir, run).classify(chip).ops
    columns = ["flops", "bytes_accessed", "t_expected_s", "t_exposed_s", "roof_flops_per_s"]
    want = {c: [v if math.isfinite(v) else None for v in expected[c].astype(float)] for c in columns}
    assert any(v is None for v in want["roof_flops_per_s"])  # ops without FLOPs have no roof
    open_plugin(page, server, run)
    got = page.evaluate(
        """async ([run, chip, columns]) => {
          const { Model } = await import("./state.js");
          const query = new URLSearchParams({ run, chip });
          const body = await (await fetch(`./report?${query}`)).json();
          const read = () => {
            const model = new Model(structuredClone(body));
            return Object.fromEntries(columns.map((c) => [c, model.column(c)]));
          };
          const native = read();
          delete Uint8Array.fromBase64; // a browser without it decodes through atob
          return [body.cols.filter((c) => c && c.f64).length, native, read()];
        }""",
        [run, chip, columns],
    )
    assert got[0] > len(columns) and got[1] == want and got[2] == want


def test_compare_lists_a_flipped_op(page, server, logdir):
    """The same program compiled for two targets; the second re-judged on the first's chip, as
    every comparison (``diff.compare``) does."""
    run_a, run_b = logdir.joinpath("pair.txt").read_text().split("\n")
    first = read(logdir, run_a)
    a, b = first.ops, read(logdir, run_b).classify(first.chip).ops
    frame = open_plugin(page, server, run_a)
    frame.locator("#hr-other").select_option(run_b)
    frame.locator(".hr-compare[data-state=ready]").wait_for()
    # the CLI's lines, word for word (its counts, its rows in its order)
    files = [logdir / run / "plugins/hlo_roofline/report.json" for run in (run_a, run_b)]
    printed = CliRunner().invoke(cli.main, ["diff", *map(str, files), "--top", "0"]).output
    counts_line = frame.locator('[data-testid="compare-counts"]').text_content()
    assert counts_line in printed.splitlines()
    listed = CliRunner().invoke(cli.main, ["diff", *map(str, files), "--format", "json"]).output
    changed = [o for o in json.loads(listed)["ops"] if o["change"] != "same"]
    shown = frame.locator("#hr-compare-count").text_content()
    assert shown.startswith(f"{len(changed)} of ")
    first_row = frame.locator(".hr-compare .hr-body .hr-row").first
    first_row.wait_for()
    assert first_row.locator('[data-key="change"]').text_content() == changed[0]["change"]
    frame.locator("#hr-compare-which").select_option("flipped")
    rows = frame.locator(".hr-compare .hr-body .hr-row")
    rows.first.wait_for()
    assert rows.count() >= 1
    for i in range(rows.count()):
        row = rows.nth(i)
        cell = lambda key, row=row: row.locator(f'[data-key="{key}"]').text_content()  # noqa: E731
        assert cell("change") == "flipped"
        name_a, name_b = cell("name").split(" → ")
        op_a = a[a["name"] == name_a].iloc[0]
        op_b = b[b["name"] == name_b].iloc[0]
        assert (cell("bound"), cell("bound_other")) == (op_a["bound"], op_b["bound"])
        assert op_a["bound"] != op_b["bound"]
        assert cell("op_name") == op_a["op_name"] == op_b["op_name"]
    page.screenshot(path=str(ARTIFACTS / "hlo_roofline_compare.png"), full_page=True)


def test_hostile_op_name_renders_as_text(page, server, logdir):
    ops = read(logdir, "hostile").ops
    hostile = ops[ops["op_name"].str.contains("onerror", regex=False)].iloc[0]
    frame = open_plugin(page, server, "hostile")
    frame.locator("#hr-search").fill("onerror")
    wait_shown(frame, 1)
    row = body_rows(frame).first
    assert row.locator('[data-key="op_name"]').text_content() == hostile["op_name"]
    row.click()
    assert (
        frame.locator('.hr-details dd[data-field="op_name"]').text_content() == hostile["op_name"]
    )
    assert frame.locator('.hr-details dd[data-field="source"]').text_content() == hostile["source"]
    point = next(
        p
        for p in frame.locator("canvas.hr-chart-canvas").evaluate("c => c.hloPoints()")
        if p["row"] == hostile.name
    )
    frame.locator("canvas.hr-chart-canvas").hover(position={"x": point["x"], "y": point["y"]})
    assert HOSTILE in frame.locator(".hr-tooltip").text_content()
    doc = frame.locator("body")
    assert doc.evaluate("b => b.querySelectorAll('img').length") == 0
    scripts = doc.evaluate("b => [...document.scripts].map(s => s.src + s.text).join()")
    assert "alert" not in scripts  # only TensorBoard's own entry script
    assert "&lt;img src=x onerror" in doc.evaluate("b => b.innerHTML")
    page.wait_for_timeout(200)  # a dialog, if any, would have opened by now


def chart(frame):
    return frame.locator("canvas.hr-chart-canvas")


def test_measured_run_plots_attained_points_and_links_to_xprof(page, server, logdir):
    """Item 10: FLOPs ÷ measured time at the op's intensity, joined to its predicted point."""
    report = read(logdir, "measured")
    ops = report.ops
    frame = open_plugin(page, server, "measured")
    headers = frame.locator(".hr-table [data-key]").evaluate_all(
        "els => els.map(e => e.dataset.key)"
    )
    assert {"measured_s", "efficiency"} <= set(headers)
    assert "measured step" in frame.locator(".hr-summary").text_content()
    attained = ops[(ops["measured_s"] > 0) & (ops["flops"] > 0) & (ops["t_expected_s"] > 0)]
    assert len(attained) >= 1
    canvas = chart(frame)
    assert int(canvas.get_attribute("data-measured")) == len(attained)
    predicted = {p["row"]: p for p in canvas.evaluate("c => c.hloPoints()")}
    measured = {p["row"]: p for p in canvas.evaluate("c => c.hloMeasured()")}
    assert set(measured) == set(attained.index)
    for row, op in attained.iterrows():
        p, q = predicted[row], measured[row]
        assert q["x"] == pytest.approx(p["x"])  # same intensity
        # Below its bound's point exactly when it ran slower than the bound (efficiency < 1).
        assert (q["y"] > p["y"]) == (op["measured_s"] > op["t_bound_s"])
    # The roof judged here is far above a CPU: every attained point is below the roofs.
    assert all(q["y"] > predicted[r]["y"] for r, q in measured.items())

    # Selecting an op shows its measured numbers; hovering its attained point says which it is.
    op = attained.loc[attained["t_expected_s"].idxmax()]
    q = measured[op.name]
    canvas.click(position={"x": q["x"], "y": q["y"]})
    assert frame.locator(".hr-details h3").text_content() == op["name"]
    assert frame.locator('.hr-details dd[data-field="measured"]').count() == 1
    assert "measured point" in frame.locator(".hr-tooltip").text_content()
    frame.locator("#hr-show-measured").uncheck()
    assert canvas.evaluate("c => c.hloLayout().width") > 0

    # The XProf session the trace was captured in, opened by the profile plugin.
    session = Path(report.summary["measured_trace"]).parent.name
    link = frame.locator("#hr-xprof")
    href = link.get_attribute("href")
    assert f"run=measured%2F{session}" in href and "tool=trace_viewer" in href
    assert link.get_attribute("target") == "_blank"
    runs = page.request.get(f"{server}/data/plugin/profile/runs").json()
    assert f"measured/{session}" in runs
    ARTIFACTS.mkdir(exist_ok=True)
    frame.locator("#hr-show-measured").check()
    frame.locator(".hr-main").screenshot(path=str(ARTIFACTS / "tab_measured.png"))


def test_runs_that_cannot_load_are_errors_not_choices(page, server, logdir):
    """Item 7 and 8: corrupt runs and a report missing a column are listed as errors."""
    frame = open_tab(page, server)
    app = frame.locator(".hr-app")
    first_healthy = "attention/h100"  # CORRUPT_FIRST sorts before it
    assert app.get_attribute("data-run") == first_healthy
    assert app.get_attribute("data-state") == "ready"
    disabled = frame.locator("#hr-run option[disabled]").evaluate_all("os => os.map(o => o.value)")
    assert sorted(disabled) == sorted([CORRUPT_FIRST, "broken", "no_bound"])
    errors = frame.locator("#hr-run-errors")
    errors.locator("summary").click()
    assert "corrupt report" in errors.locator(f'li[data-run="{CORRUPT_FIRST}"]').text_content()
    missing = errors.locator('li[data-run="no_bound"]').text_content()
    assert "bound" in missing and "missing column" in missing

    # Named explicitly (a link), a run that cannot load shows its own error, nothing else.
    frame = open_plugin(page, server, "broken", state="error")
    alert = frame.locator(".hr-error[role=alert]")
    assert "corrupt report" in alert.text_content() and "broken" in alert.text_content()
    select_run(frame, "mlp_bf16/tpu_v5e")
    assert alert.is_hidden()
    assert frame.locator(".hr-summary").is_visible()


def test_state_survives_a_reload(page, server, logdir):
    """Item 7: run, chip, filters and the selected op are in TensorBoard's URL."""
    report = read(logdir, "gpt/h100").classify("v5e")
    timed = report.ops[report.ops["t_expected_s"] > 0]
    opcode = timed["opcode"].value_counts().index[0]
    op = timed[timed["opcode"] == opcode].sort_values("t_expected_s").iloc[-1]
    frame = open_tab(page, server, "gpt/h100")
    frame.locator("#hr-chip").select_option("v5e")
    frame.locator('.hr-app[data-state=ready][data-chip="v5e"]').wait_for()
    frame.locator("#hr-filter-opcode").select_option(opcode)
    wait_shown(frame, int((timed["opcode"] == opcode).sum()))
    body_rows(frame).filter(has=frame.locator(f'[data-key="name"]:text-is("{op["name"]}")')).click()
    assert frame.locator(".hr-details h3").text_content() == op["name"]
    page.wait_for_function(
        "op => location.hash.includes(op)", arg=f"p.hlo_roofline.op={quote(op['name'], safe='')}"
    )
    url = page.url
    for key, value in (
        ("run", "gpt/h100"),
        ("chip", "v5e"),
        ("opcode", opcode),
        ("op", op["name"]),
    ):
        assert f"p.hlo_roofline.{key}={quote(value, safe='')}" in url, (key, url)

    page.reload()
    frame = page.frame_locator(IFRAME)
    frame.locator('.hr-app[data-state=ready][data-run="gpt/h100"][data-chip="v5e"]').wait_for()
    assert frame.locator("#hr-run").input_value() == "gpt/h100"
    assert frame.locator("#hr-chip").input_value() == "v5e"
    assert frame.locator("#hr-filter-opcode").input_value() == opcode
    assert frame.locator(".hr-details h3").text_content() == op["name"]
    selected = frame.locator('.hr-ops .hr-row[aria-selected="true"] [data-key="name"]')
    assert selected.text_content() == op["name"]


def test_reload_button_shows_new_and_rewritten_runs(page, server, logdir):
    """Item 7: TensorBoard's reload reaches the tab: a new run appears, a rewrite is re-read."""
    frame = open_tab(page, server, "mlp_bf16/tpu_v5e")
    assert frame.locator('#hr-run option[value="late/run"]').count() == 0
    fixture_report("reductions", "tpu_v5e", "v5e").write_tensorboard(logdir, "late/run")
    page.locator("button.reload-button").click()
    frame.locator('#hr-run option[value="late/run"]').wait_for(state="attached")
    # The page was not reloaded: the run shown is still the one chosen.
    assert frame.locator(".hr-app").get_attribute("data-run") == "mlp_bf16/tpu_v5e"
    select_run(frame, "late/run")
    fixture_report("reductions", "tpu_v5e", "v5p").write_tensorboard(logdir, "late/run")
    page.locator("button.reload-button").click()
    frame.locator('.hr-app[data-state=ready][data-run="late/run"][data-chip="v5p"]').wait_for()


@pytest.mark.parametrize("run", [run for run, _, _ in DEMO_RUNS] + ["measured", "starved"])
def test_chart_layout(page, server, logdir, run):
    """Items 1-3: labels inside the canvas and on their roofs, every point inside its axes."""
    frame = open_plugin(page, server, run)
    canvas = chart(frame)
    assert layout_problems(canvas) == []
    ARTIFACTS.mkdir(exist_ok=True)
    frame.locator(".hr-main").screenshot(path=str(ARTIFACTS / f"tab_{run.replace('/', '_')}.png"))


def test_points_beyond_the_range_are_marked_and_counted(page, server, logdir):
    """Item 1: a point the axes cannot reach is drawn on the edge it crosses, and counted."""
    ops = read(logdir, "starved").ops
    frame = open_plugin(page, server, "starved")
    canvas = chart(frame)
    lo, hi = canvas.evaluate("c => c.hloLayout().decades.y")
    on_axes = ops[(ops["t_bound_s"] > 0) & (ops["flops"] > 0) & (ops["intensity"] > 0)]
    attained = on_axes["flops"] / on_axes["t_bound_s"]  # each point is its bound
    below = set(on_axes.index[attained < 10.0**lo])
    assert below  # the starved op
    points = {p["row"]: p for p in canvas.evaluate("c => c.hloPoints()")}
    assert {r for r, p in points.items() if p["out"] == "bottom"} == below
    assert all(p["out"] == "" for r, p in points.items() if r not in below and not p["strip"])
    assert int(canvas.get_attribute("data-outside")) == len(below)
    note = frame.locator(".hr-clipped")
    assert f"▼ {len(below)} below" in note.text_content()
    assert (attained <= 10.0**hi).all()


def test_op_names_read_as_written_in_python(page, server, logdir):
    """Item 6: HLO's escapes (state[\\'params\\']) are decoded."""
    ops = read(logdir, "gpt/v5e").ops
    quoted = ops[ops["op_name"].str.contains("['", regex=False)]
    assert len(quoted) and not ops["op_name"].str.contains("\\", regex=False).any()
    op = quoted.iloc[0]
    frame = open_plugin(page, server, "gpt/v5e")
    frame.locator("#hr-timed-only").uncheck()
    frame.locator("#hr-search").fill(op["name"])
    row = body_rows(frame).filter(has=frame.locator(f'[data-key="name"]:text-is("{op["name"]}")'))
    assert row.locator('[data-key="op_name"]').text_content() == op["op_name"]
    assert "\\" not in op["op_name"]


def test_no_truncated_headers_or_cells(page, server, logdir):
    """Item 4: fixed columns are as wide as their longest text and their header."""
    script = """root => [...root.querySelectorAll('.hr-head .hr-cell, .hr-body .hr-cell')]
        .filter(c => c.closest('.hr-head') || !['name', 'op_name', 'user_source', 'hint'].includes(c.dataset.key))
        .filter(c => c.scrollWidth > c.clientWidth + 1)
        .map(c => c.dataset.key + ': ' + c.textContent)"""
    for run in ("measured", "gpt/h100", "big"):
        frame = open_plugin(page, server, run)
        assert frame.locator(".hr-ops").evaluate(script) == [], run
    run_a, run_b = logdir.joinpath("pair.txt").read_text().split("\n")
    frame = open_plugin(page, server, run_a)
    frame.locator("#hr-other").select_option(run_b)
    frame.locator(".hr-compare[data-state=ready]").wait_for()
    assert frame.locator(".hr-compare").evaluate(script) == []


def test_ridge_of_an_op_is_the_servers(page, server, logdir):
    """Item 5: an op whose bytes sit partly in VMEM has its own ridge and memory roof, quoted as
    the server computed them (no peak or bandwidth re-derived in the page)."""
    ops = read(logdir, "gpt/v5e").ops
    vmem = ops[(ops["vmem_bytes"] > 0) & (ops["t_compute_s"] > 0) & (ops["t_memory_s"] > 0)]
    assert len(vmem)
    op = vmem.iloc[0]
    frame = open_plugin(page, server, "gpt/v5e")
    frame.locator("#hr-filter-bound").select_option("")
    frame.locator("#hr-timed-only").uncheck()
    frame.locator("#hr-search").fill(op["name"])
    body_rows(frame).filter(has=frame.locator(f'[data-key="name"]:text-is("{op["name"]}")')).click()
    ridge = frame.locator('.hr-details dd[data-field="ridge"]').text_content()
    assert ridge.endswith(" FLOP/B") and "÷" not in ridge
    roof = frame.locator('.hr-details dd[data-field="roof"]').text_content()
    assert roof.startswith(f"{op['roof_unit']}: ") and "memory roof" in roof
    note = frame.locator(".hr-chart-note").text_content()
    assert "HBM" in note and "VMEM" in note and "its own roof" in note


def test_filtered_out_point_keeps_the_filters(page, server, logdir):
    """Item 9: a click on a point the filters hide selects it and says so; filters stay."""
    ops = read(logdir, "gpt/h100").ops
    timed = ops[ops["t_expected_s"] > 0]
    opcode = timed["opcode"].value_counts().index[-1]
    frame = open_plugin(page, server, "gpt/h100")
    frame.locator("#hr-filter-opcode").select_option(opcode)
    n = int((timed["opcode"] == opcode).sum())
    wait_shown(frame, n)
    canvas = chart(frame)
    hidden = [p for p in canvas.evaluate("c => c.hloPoints()")
              if ops.loc[p["row"], "opcode"] != opcode and not p["out"]]  # fmt: skip
    p = min(hidden, key=lambda q: -q["r"])
    canvas.click(position={"x": p["x"], "y": p["y"]})
    assert frame.locator(".hr-details h3").text_content() == ops.loc[p["row"], "name"]
    assert frame.locator("#hr-filter-opcode").input_value() == opcode
    assert frame.locator("#hr-count").get_attribute("data-shown") == str(n)
    note = frame.locator("#hr-hidden-note")
    assert ops.loc[p["row"], "name"] in note.text_content()
    frame.locator("#hr-clear-filters").click()
    assert frame.locator("#hr-filter-opcode").input_value() == ""
    selected = frame.locator('.hr-ops .hr-row[aria-selected="true"] [data-key="name"]')
    assert selected.text_content() == ops.loc[p["row"], "name"]
    assert note.is_hidden()


def test_keyboard_moves_through_rows_and_points(page, server, logdir):
    """Item 9: ↑/↓ in the table follow its order; ←/→ on the chart follow intensity."""
    ops = read(logdir, "gpt/h100").ops
    frame = open_plugin(page, server, "gpt/h100")
    order = body_rows(frame).locator('[data-key="name"]').all_text_contents()
    body = frame.locator(".hr-ops .hr-body")
    body.focus()
    page.keyboard.press("ArrowDown")
    details = frame.locator(".hr-details h3")
    assert details.text_content() == order[0]
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    assert details.text_content() == order[2]
    page.keyboard.press("ArrowUp")
    assert details.text_content() == order[1]

    canvas = chart(frame)
    start = min(
        (p for p in canvas.evaluate("c => c.hloPoints()") if not p["strip"] and not p["out"]),
        key=lambda p: (ops.loc[p["row"], "intensity"], p["row"]),
    )
    canvas.click(position={"x": start["x"], "y": start["y"]})
    canvas.focus()
    seen = [details.text_content()]
    for _ in range(3):
        page.keyboard.press("ArrowRight")
        seen.append(details.text_content())
    assert len(set(seen)) == 4
    intensities = [ops.loc[ops["name"] == name, "intensity"].iloc[0] for name in seen]
    assert intensities == sorted(intensities)  # rightwards: never a lower intensity
    assert frame.locator(".hr-tooltip").is_visible()
    page.keyboard.press("ArrowLeft")
    assert details.text_content() == seen[2]


def test_20k_ops_stay_responsive(page, server, logdir):
    """Item 9: hover and selection cost measured in the browser (figures, not asserts)."""
    report = read(logdir, "big")
    assert len(report.ops) == 20_000
    frame = open_plugin(page, server, "mlp_bf16/tpu_v5e")
    start = time.monotonic()
    select_run(frame, "big")
    loaded = time.monotonic() - start
    canvas = chart(frame)
    assert int(canvas.get_attribute("data-points")) == timed_rows(report)
    assert body_rows(frame).count() < 100  # virtualized: only the rows in view exist
    start = time.monotonic()
    frame.locator("#hr-search").fill("fusion.1.x7")
    frame.locator(f'#hr-count:not([data-shown="{timed_rows(report)}"])').wait_for()
    filtered = time.monotonic() - start
    frame.locator("#hr-search").fill("")
    wait_shown(frame, timed_rows(report))
    timings = canvas.evaluate(
        """c => {
          const pts = c.hloPoints().filter(p => !p.strip).slice(0, 400);
          const pick = Array.from({length: 40}, (_, i) => pts[(i * 37) % pts.length]);
          const rect = c.getBoundingClientRect();
          const hover = [], select = [];
          for (const p of pick) {
            let t = performance.now();
            c.hloHover(p.x, p.y);
            document.body.getBoundingClientRect();  // the layout the tooltip causes
            hover.push(performance.now() - t);
            t = performance.now();
            c.dispatchEvent(new MouseEvent('click', {clientX: rect.left + p.x,
                                                    clientY: rect.top + p.y, bubbles: true}));
            document.body.getBoundingClientRect();
            select.push(performance.now() - t);
          }
          const stat = a => { a.sort((x, y) => x - y);
            return {median: a[a.length >> 1], p90: a[Math.floor(a.length * 0.9)], max: a[a.length - 1]}; };
          return {hover_ms: stat(hover), select_ms: stat(select)};
        }"""
    )
    body = frame.locator(".hr-ops .hr-body")
    body.evaluate("b => { b.scrollTop = b.scrollHeight; }")
    last_pos = timed_rows(report) - 1
    frame.locator(f'.hr-ops .hr-row[style*="translateY({last_pos * 26}px)"]').wait_for()
    figures = {"load_s": round(loaded, 2), "filter_s": round(filtered, 2), **timings}
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "tab_20k_timings.json").write_text(json.dumps(figures, indent=1))
    print("20k-op tab:", figures)
    assert loaded < 15, f"20k-op report took {loaded:.1f}s to show"
    assert filtered < 3, f"filtering 20k ops took {filtered:.1f}s"


def test_memory_fit_bar_shows_the_need_against_the_chip(page, server, logdir):
    report = read(logdir, "too_big")
    fit = report.summary["memory_fit"]
    open_plugin(page, server, "too_big")
    box = page.locator("[data-card=memory]")
    text = box.text_content()
    assert "does not fit" in text and "the compiler refused the program" in text
    assert "largest: m['w']" in text and "try: donate" in text
    meter = box.locator("[role=meter]")
    assert float(meter.get_attribute("aria-valuenow")) == pytest.approx(fit["used_fraction"])
    segment = meter.locator("span")
    assert segment.evaluate("s => s.style.width") == "100%"  # over capacity: the bar is full
    assert "hr-fit-does-not-fit" in segment.get_attribute("class")
    # Re-judged against a chip with room for it, the same run fits.
    page.locator("#hr-chip").select_option("v5p")
    page.locator('.hr-app[data-state=ready][data-chip="v5p"]').wait_for()
    assert page.locator("[data-card=memory] .hr-card-value").text_content().endswith(": fits")


def test_ops_group_by_user_line_and_scope_and_show_their_stack(page, server, logdir):
    """Grouped by user line, the table has one row per line of the model (Report.rollup on the
    server); a click on one lists its ops; an op's panel shows its call stack, the user's line
    marked. Grouped by scope, the GPT example's named scopes are the rows."""
    report = read(logdir, "gpt/v5e")
    rolled = report.rollup("user_source")
    frame = open_plugin(page, server, "gpt/v5e")
    frame.locator("#hr-group-by").select_option("user_source")
    groups = frame.locator("#hr-groups[data-state=ready][data-by=user_source]")
    groups.wait_for()
    count = frame.locator("#hr-count").text_content()
    assert count == f"{len(rolled)} groups of {len(report.ops)} ops"
    first = groups.locator(".hr-body .hr-row").first
    top = rolled.index[0]
    cell = first.locator('[data-key="user_source"]')
    assert cell.get_attribute("title") == top
    assert cell.text_content() == (top.rsplit("/", 1)[-1] if "/" in top else top)
    assert first.locator('[data-key="bound"]').text_content() == rolled.iloc[0]["bound"]

    # the busiest line of the model itself: its ops, one row each
    line = next(u for u in rolled.index if "/" in u)
    ops = report.ops[(report.ops["user_source"] == line) & (report.ops["t_expected_s"] > 0)]
    groups.locator(".hr-body .hr-row").filter(
        has=frame.locator(f'[data-key="user_source"][title="{line}"]')
    ).click()
    wait_shown(frame, len(ops))
    page.wait_for_function("() => new URLSearchParams(location.search).has('in')")
    page.reload()  # the group shown is in the URL
    wait_shown(frame, len(ops))
    assert frame.locator("#hr-groups").is_hidden()
    assert frame.locator("#hr-group-filter strong").get_attribute("title") == line
    shown = body_rows(frame).locator('[data-key="user_source"]').all_text_contents()
    assert set(shown) == {line.rsplit("/", 1)[-1]}
    # the op the table lists first (many of this line's ops tie at the per-op floor)
    name_cell = body_rows(frame).first.locator('[data-key="name"]')
    op = ops.set_index("name").loc[name_cell.get_attribute("title") or name_cell.text_content()]
    op["name"] = op.name
    body_rows(frame).first.click()
    frames = frame.locator("#hr-stack li")
    assert frames.all_text_contents() == report.stack(op["name"])
    current = frame.locator('#hr-stack li[aria-current="true"]').all_text_contents()
    assert current and set(current) == {line}  # the user's frame (a recursive call: each time)
    assert frame.locator('.hr-details dd[data-field="user line"]').text_content() == line

    frame.locator("#hr-clear-group").click()
    wait_shown(frame, int((report.ops["t_expected_s"] > 0).sum()))
    frame.locator("#hr-group-by").select_option("scope")
    scopes = frame.locator("#hr-groups[data-state=ready][data-by=scope]")
    scopes.wait_for()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "hlo_roofline_grouped.png"), full_page=True)
    names = scopes.locator('.hr-body [data-key="scope"]').all_text_contents()
    assert {"attention/qkv", "mlp/up", "logits"} <= set(names)
    assert len(names) == min(len(report.rollup("scope")), len(names))


def test_exposed_communication_is_in_the_summary(page, server, logdir):
    summary = read(logdir, "fsdp/h100").summary
    assert summary["exposed_comm_s"] > 0  # XLA put the weight all-gathers where nothing hides them
    open_plugin(page, server, "fsdp/h100")
    text = page.locator("[data-card=scheduled]").text_content()
    assert "step expected, as scheduled" in text and "exposed" in text
    assert f"({summary['exposed_comm_share'] * 100:.1f}% of the step)" in text
