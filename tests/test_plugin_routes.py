"""Backend of the "HLO Roofline" TensorBoard tab: its routes through werkzeug's test client."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from importlib.metadata import entry_points
from urllib.parse import quote

import pandas as pd
import pytest
from tb_helpers import (
    HOSTILE,
    decoded,
    fixture_report,
    hostile_report,
    rows_of,
    without_column,
    write_corrupt,
    write_flipping_pair,
)
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

from hlo_roofline import Report
from hlo_roofline.hlo.attribution import function_of, scope_of
from hlo_roofline_tensorboard import plugin as tb_plugin

PREFIX = "/data/plugin/hlo_roofline"
PAIR: list[str] = []  # the two runs (under pair/) of write_flipping_pair


def _strict_json(text: str):
    """JSON as a browser parses it: NaN/Infinity tokens are errors."""

    def reject(token):
        raise ValueError(f"non-JSON token {token}")

    return json.loads(text, parse_constant=reject)


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("logdir")
    fixture_report("mlp_bf16", "tpu_v5e", "v5e").write_tensorboard(root, "mlp/v5e")
    fixture_report("random", "tpu_v5e", "v5e").write_tensorboard(root, "random/tpu_v5e")
    fixture_report("random", "tpu_v5p", "v5p").write_tensorboard(root, "random/tpu_v5p")
    PAIR.extend(write_flipping_pair(root / "pair"))
    hostile_report().write_tensorboard(root, "hostile")
    write_corrupt(root, "broken")
    without_column(fixture_report("mlp_bf16", "tpu_v5e", "v5e"), "t_expected_s").write_tensorboard(
        root, "no_time"
    )
    (root / "events_only").mkdir()  # not a run: no plugins/hlo_roofline/report.json
    (root / "events_only" / "plugins" / "hlo_roofline").mkdir(parents=True)
    return root


def make_plugin(logdir, warm: bool = False) -> tb_plugin.HloRooflinePlugin:
    """The plugin as TensorBoard loads it; without the start-up read of the first run unless
    ``warm`` (tests that count or race reads see only their own)."""
    return tb_plugin.HloRooflinePlugin(base_plugin.TBContext(logdir=str(logdir)), warm=warm)


def test_the_biggest_runs_are_read_as_the_plugin_starts(tmp_path, monkeypatch):
    """TensorBoard's loader starts the plugin warm: the biggest runs' reports are in the cache
    before any request asks for them, wherever their names sort (a cold first paint of a big run
    does not wait for its parse), within the warm budget's count of runs."""
    from hlo_roofline_tensorboard import _data

    monkeypatch.setattr(_data, "WARM_RUNS", 2)
    small = fixture_report("mlp_bf16", "tpu_v5e", "v5e")
    big = fixture_report("gpt_tiny", "tpu_v5e", "v5e")
    for run, report in (("a_small", small), ("b_small", small), ("y_big", big), ("z_big", big)):
        report.write_tensorboard(tmp_path, run)
    plugin = tb_plugin.HloRooflineLoader().load(base_plugin.TBContext(logdir=str(tmp_path)))
    plugin.warmed.join(60)
    cached = {os.path.realpath(key[0]) for key in _data._cache}

    def path(run: str) -> str:
        return os.path.realpath(tmp_path / run / "plugins" / "hlo_roofline" / "report.json")

    assert {path("y_big"), path("z_big")} <= cached
    assert not {path("a_small"), path("b_small")} & cached


@pytest.fixture(scope="module")
def client(logdir):
    return Client(application.TensorBoardWSGI([make_plugin(logdir)]))


def get_json(client, path, code=200):
    response = client.get(PREFIX + path)
    assert response.status_code == code, response.get_data(as_text=True)
    assert response.headers["Content-Type"].startswith("application/json")
    return _strict_json(response.get_data(as_text=True))


# -- registration --------------------------------------------------------------------------------


def test_entry_point_resolves_to_the_loader():
    found = [e for e in entry_points(group="tensorboard_plugins") if e.name == "hlo_roofline"]
    assert found, "pip install -e . (the tensorboard_plugins entry point is not installed)"
    assert all(e.load() is tb_plugin.HloRooflineLoader for e in found)


def test_plugin_module_imports_light():
    """TensorBoard imports the plugin at start-up: no pandas, numpy or JAX; of hlo_roofline only
    the logdir layout, the JSON writer and the writer's rule for what a URL is, all standard
    library only (its package loads names lazily)."""
    code = (
        "import sys, hlo_roofline_tensorboard.plugin as p; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('pandas', 'numpy', 'jax', 'hlo_roofline')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(
        ["hlo_roofline", "hlo_roofline._atomic", "hlo_roofline._jax_env", "hlo_roofline._json",
         "hlo_roofline.logdir"]
    )


def test_listing_shows_an_iframe_tab(client):
    listing = _strict_json(client.get("/data/plugins_listing").get_data(as_text=True))
    entry = listing["hlo_roofline"]
    assert entry["enabled"] is True
    assert entry["tab_name"] == "HLO Roofline"
    assert entry["loading_mechanism"] == {
        "type": "IFRAME",
        "module_path": f"{PREFIX}/index.js",
    }


def test_is_active_follows_the_logdir(tmp_path, monkeypatch):
    monkeypatch.setattr(tb_plugin, "_INACTIVE_RECHECK_S", 0.0)
    plugin = make_plugin(tmp_path)
    assert plugin.is_active() is False
    fixture_report("mlp_bf16", "tpu_v5e", "v5e").write_tensorboard(tmp_path / "a" / "b", ".")
    assert plugin.is_active() is True
    assert make_plugin(tmp_path / "missing").is_active() is False


def test_static_assets(client):
    for name, kind in (("index.js", "text/javascript"), ("chart.js", "text/javascript"),
                       ("table.js", "text/javascript"), ("util.js", "text/javascript"),
                       ("style.css", "text/css")):  # fmt: skip
        response = client.get(f"{PREFIX}/{name}")
        assert response.status_code == 200
        assert response.headers["Content-Type"].startswith(kind)
        assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert "export function render()" in client.get(f"{PREFIX}/index.js").get_data(as_text=True)
    # every module a served script imports is served too (a missing one is a blank tab)
    static = tb_plugin.STATIC_DIR
    imported = {
        m for f in static.glob("*.js") for m in re.findall(r'from "\./([\w.-]+)"', f.read_text())
    }
    assert imported <= set(tb_plugin.STATIC_FILES), imported - set(tb_plugin.STATIC_FILES)
    for name in imported:
        assert client.get(f"{PREFIX}/{name}").status_code == 200
    assert client.get(f"{PREFIX}/plugin.py").status_code == 404
    assert client.get(f"{PREFIX}/static/../plugin.py").status_code == 404


def test_static_code_never_injects_html():
    """Report text reaches the DOM through textContent only (see util.el)."""
    for path in tb_plugin.STATIC_DIR.glob("*.js"):
        text = path.read_text()
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
            assert sink not in text, f"{path.name} uses {sink}"


# -- runs ----------------------------------------------------------------------------------------


def test_runs_lists_every_report_directory(client):
    runs = get_json(client, "/runs")
    pair = [f"pair/{run}" for run in PAIR]
    assert runs == sorted(
        ["broken", "hostile", "mlp/v5e", "no_time", *pair, "random/tpu_v5e", "random/tpu_v5p"]
    )


def test_top_level_run_is_dot(tmp_path):
    fixture_report("mlp_bf16", "tpu_v5e", "v5e").write_tensorboard(tmp_path, ".")
    c = Client(application.TensorBoardWSGI([make_plugin(tmp_path)]))
    assert get_json(c, "/runs") == ["."]
    assert len(get_json(c, "/report?run=.")["data"]) > 0


@pytest.mark.parametrize(
    "run",
    ["", "..", "../x", "mlp/../../etc", "/etc/passwd", "mlp//v5e", "./mlp/v5e", "mlp/./v5e",
     "mlp\\v5e", "mlp/v5e\x00", "C:/x", "x" * 2000],
)  # fmt: skip
def test_bad_run_names_are_400(client, run):
    for route in ("/report", "/csv"):
        response = client.get(PREFIX + route, query_string={"run": run})
        assert response.status_code == 400, (route, run)
        assert "error" in _strict_json(response.get_data(as_text=True))
    response = client.get(PREFIX + "/compare", query_string={"run": "mlp/v5e", "other": run})
    assert response.status_code == 400


def test_missing_run_param_is_400_and_unknown_run_404(client):
    assert client.get(PREFIX + "/report").status_code == 400
    assert client.get(PREFIX + "/report?run=nope").status_code == 404
    assert client.get(PREFIX + "/report?run=events_only").status_code == 404


def test_symlink_out_of_the_logdir_is_refused(tmp_path):
    outside = tmp_path / "outside"
    fixture_report("mlp_bf16", "tpu_v5e", "v5e").write_tensorboard(outside, "secret")
    logdir = tmp_path / "logdir"
    logdir.mkdir()
    os.symlink(outside / "secret", logdir / "link")
    c = Client(application.TensorBoardWSGI([make_plugin(logdir)]))
    assert get_json(c, "/runs") == []  # the walk does not follow links out
    assert c.get(PREFIX + "/report?run=link").status_code == 400


# -- report --------------------------------------------------------------------------------------


def test_report_is_the_written_report(client, logdir):
    body = get_json(client, "/report?run=mlp/v5e")
    expected = Report.read(logdir / "mlp/v5e/plugins/hlo_roofline/report.json").to_dict()
    # plus each op's scope and user function (what the tab groups by), from hlo_roofline.report,
    # beside the report's own columns
    assert body["columns"] == expected["columns"]
    assert body["data"] == _strict_json(json.dumps(expected["data"]))
    ops = Report.read(logdir / "mlp/v5e/plugins/hlo_roofline/report.json").ops
    assert body["derived"]["scope"] == [scope_of(x) for x in ops["op_name"]]
    assert body["derived"]["user_function"] == [function_of(x) for x in ops["user_source"]]
    assert body["summary"]["chip"] == "v5e"
    assert {"step_time_serial_s", "step_time_upper_s", "mfu_upper_bound", "roofs"} <= set(
        body["summary"]
    )


def test_chip_param_reclassifies_through_report_classify(client, logdir):
    written = Report.read(logdir / "random/tpu_v5e/plugins/hlo_roofline/report.json")
    for chip in ("v5p", "h100-sxm"):
        body = get_json(client, f"/report?run=random/tpu_v5e&chip={chip}")
        expected = written.classify(chip)
        assert body["summary"]["chip"] == chip
        bound = body["columns"].index("bound")
        assert [row[bound] for row in rows_of(body)] == list(expected.ops["bound"])
        # every column, the ones re-used from the run as written too, is the re-judged report's
        whole = expected.to_dict()
        assert body["columns"] == whole["columns"]
        assert rows_of(body) == _strict_json(json.dumps(whole["data"]))
        assert body["call_stacks"] == whole["call_stacks"]
        assert body["summary"]["step_time_serial_s"] == pytest.approx(
            expected.summary["step_time_serial_s"]
        )
    alias = get_json(client, "/report?run=random/tpu_v5e&chip=TPU v5p")
    assert alias["summary"]["chip"] == "v5p"


def test_a_chip_answer_to_the_report_held_is_what_the_chip_changed(client, logdir):
    """With the stamp of the report as written (``since``), a chip's answer holds only the
    columns that chip changed; with the report held, they make the re-judged report whole.
    Another stamp (a stale or made-up one, or the file rewritten since) gets it whole."""
    written = get_json(client, "/report?run=random/tpu_v5e")
    stamp = written["stamp"]
    held = {c: [row[i] for row in written["data"]] for i, c in enumerate(written["columns"])}
    report = Report.read(logdir / "random/tpu_v5e/plugins/hlo_roofline/report.json")
    for chip in ("v5p", "h100-sxm"):
        whole = report.classify(chip).to_dict()
        part = get_json(client, f"/report?run=random/tpu_v5e&chip={chip}&since={stamp}")
        assert part["columns"] == whole["columns"] and "derived" not in part
        changed = [c for c in part["columns"] if c not in part["same"]]
        # the verdict's times at least differ between a v5e and this chip
        assert {"t_expected_s", "bound"} & set(changed), changed
        assert len(part["cols"]) == len(changed) < len(part["columns"]) / 2
        sent = dict(zip(changed, (decoded(c) for c in part["cols"]), strict=True))
        columns = [sent[c] if c in sent else held[c] for c in part["columns"]]
        assert [list(r) for r in zip(*columns, strict=True)] == _strict_json(
            json.dumps(whole["data"])
        )
        assert part["summary"]["chip"] == chip and part["since"] == stamp
        for other in ("0123456789abcdef", "<x>"):
            full = get_json(client, f"/report?run=random/tpu_v5e&chip={chip}&since={quote(other)}")
            assert "same" not in full and rows_of(full) == rows_of(get_json(
                client, f"/report?run=random/tpu_v5e&chip={chip}"))  # fmt: skip


def test_a_rewritten_report_is_answered_whole_to_the_old_stamp(client, tmp_path):
    from hlo_roofline_tensorboard import _data

    run_dir = fixture_report("mlp_bf16", "tpu_v5e", "v5e").write_tensorboard(tmp_path, "r")
    old = json.loads(_data.report_json(str(run_dir)))["stamp"]
    fixture_report("reductions", "tpu_v5e", "v5e").write_tensorboard(tmp_path, "r")
    answer = json.loads(_data.report_json(str(run_dir), "v5p", old))
    assert "same" not in answer and answer["module"] != "mlp_bf16"
    assert len(rows_of(answer)) == len(Report.read(run_dir / "report.json").ops)
    new = json.loads(_data.report_json(str(run_dir)))["stamp"]
    assert new != old and "same" in json.loads(_data.report_json(str(run_dir), "v5p", new))


def test_a_chip_answered_by_its_changes_writes_the_whole_only_when_asked(tmp_path):
    """The whole re-judged report (what a page opened on the chip asks for) is written when first
    asked for, not for every switch; then it is the report ``classify`` makes."""
    from hlo_roofline_tensorboard import _data

    run_dir = str(fixture_report("mlp_bf16", "tpu_v5e", "v5e").write_tensorboard(tmp_path, "r"))
    stamp = json.loads(_data.report_json(run_dir))["stamp"]
    assert "same" in json.loads(_data.report_json(run_dir, "v6e", stamp))
    entry = _data.load(run_dir, "v6e")
    assert entry.chars() < len(_data.report_json(run_dir)) / 2  # the changes alone so far
    whole = json.loads(_data.report_json(run_dir, "v6e"))
    expected = Report.read(tmp_path / "r/plugins/hlo_roofline/report.json").classify("v6e")
    assert rows_of(whole) == _strict_json(json.dumps(expected.to_dict()["data"]))
    assert entry.chars() > len(_data.report_json(run_dir)) / 2


def test_unknown_chip_is_400_with_close_matches(client):
    body = get_json(client, "/report?run=mlp/v5e&chip=v5ee", code=400)
    assert "v5e" in body["error"]
    get_json(client, "/report?run=mlp/v5e&chip=<script>", code=400)


def test_chips_lists_the_database(client):
    from hlo_roofline import chips

    listed = get_json(client, "/chips")
    assert [c["key"] for c in listed] == chips.names()
    assert all(c["name"] for c in listed)


def test_corrupt_report_fails_alone(client, logdir):
    body = get_json(client, "/report?run=broken", code=422)
    assert "corrupt" in body["error"]
    assert str(logdir) not in body["error"]  # no server paths in messages
    assert client.get(PREFIX + "/csv?run=broken").status_code == 422
    assert client.get(PREFIX + "/compare?run=broken&other=mlp/v5e").status_code == 422
    get_json(client, "/report?run=mlp/v5e")  # the others still serve


def test_report_is_reread_after_a_rewrite(tmp_path):
    c = Client(application.TensorBoardWSGI([make_plugin(tmp_path)]))
    fixture_report("mlp_bf16", "tpu_v5e", "v5e").write_tensorboard(tmp_path, "r")
    assert get_json(c, "/report?run=r")["summary"]["chip"] == "v5e"
    fixture_report("mlp_bf16", "tpu_v5e", "h100-sxm").write_tensorboard(tmp_path, "r")
    assert get_json(c, "/report?run=r")["summary"]["chip"] == "h100-sxm"


def test_hostile_text_is_data(client):
    """The JSON carries the op_name verbatim; escaping is the page's job (tested in the browser)."""
    body = get_json(client, "/report?run=hostile")
    op_name = body["columns"].index("op_name")
    assert any(HOSTILE in row[op_name] for row in body["data"])


# -- csv -----------------------------------------------------------------------------------------


def test_csv_download(client, logdir):
    response = client.get(PREFIX + "/csv?run=mlp/v5e")
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/csv")
    assert response.headers["Content-Disposition"] == (
        'attachment; filename="mlp_v5e.hlo_roofline.csv"'
    )
    written = (logdir / "mlp/v5e/plugins/hlo_roofline/report.csv").read_bytes()
    assert response.get_data() == written


def test_csv_for_another_chip(client, logdir, tmp_path):
    response = client.get(PREFIX + "/csv?run=random/tpu_v5e&chip=v5p")
    assert response.status_code == 200
    assert "random_tpu_v5e.v5p.hlo_roofline.csv" in response.headers["Content-Disposition"]
    downloaded = tmp_path / "v5p.csv"
    downloaded.write_bytes(response.get_data())
    frame = pd.read_csv(downloaded, keep_default_na=False)  # a plain CSV: the ops, judged on v5p
    expected = Report.read(logdir / "random/tpu_v5e/plugins/hlo_roofline/report.json")
    v5p = expected.classify("v5p").ops
    assert list(frame["bound"]) == list(v5p["bound"])
    assert frame["t_expected_s"].to_numpy() == pytest.approx(v5p["t_expected_s"].to_numpy())
    assert frame["t_expected_s"].sum() != pytest.approx(expected.ops["t_expected_s"].sum())


def test_csv_comes_from_the_report_the_tab_shows(client, logdir):
    """A kill between the two renames can leave a report.csv from another write beside the
    JSON: the download is made from the JSON, so it never disagrees with the page."""
    run = logdir / "mlp/v5e/plugins/hlo_roofline"
    written = (run / "report.csv").read_bytes()
    try:
        (run / "report.csv").write_text("stale")
        served = client.get(PREFIX + "/csv?run=mlp/v5e").get_data()
        assert served == written
    finally:
        (run / "report.csv").write_bytes(written)


def test_trace_events_download_is_the_reports_trace(client, logdir):
    """The timeline's "Download trace" / "Open in Perfetto": the report's Chrome trace
    (``Report.to_trace``, what ``--trace-out`` writes) for the run and the chip asked for."""
    response = client.get(PREFIX + "/trace_events?run=random/tpu_v5e&chip=v5p")
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.headers["Content-Type"].startswith("application/json")
    assert response.headers["Content-Disposition"] == (
        'attachment; filename="random_tpu_v5e.v5p.trace.json"'
    )
    report = Report.read(logdir / "random/tpu_v5e/plugins/hlo_roofline/report.json")
    assert json.loads(response.get_data(as_text=True)) == json.loads(
        report.classify("v5p").to_trace()
    )
    missing = client.get(PREFIX + "/trace_events?run=nope")
    assert missing.status_code == 404 and "Traceback" not in missing.get_data(as_text=True)


# -- compare -------------------------------------------------------------------------------------


def _compare_rows(body):
    return [dict(zip(body["columns"], row, strict=True)) for row in body["data"]]


def test_compare_with_itself_is_all_matched(client, logdir):
    body = get_json(client, "/compare?run=mlp/v5e&other=mlp/v5e")
    report = Report.read(logdir / "mlp/v5e/plugins/hlo_roofline/report.json")
    timed = int((report.ops["t_expected_s"] > 0).sum())  # ops that take no time are not compared
    assert body["counts"] == {"matched": timed, "flipped": 0, "added": 0, "removed": 0, "changed": 0}
    rows = _compare_rows(body)
    assert len(rows) == timed
    assert all(r["delta_s"] == 0 and r["name"] == r["name_other"] for r in rows)


def test_compare_two_targets_lists_flipped_ops(client, logdir):
    """One program compiled for two targets: the second is judged on the first's chip, as the
    CLI's diff does, and some verdicts flip."""
    run_a, run_b = (f"pair/{run}" for run in PAIR)
    report_a = Report.read(logdir / run_a / "plugins/hlo_roofline/report.json")
    report_b = Report.read(logdir / run_b / "plugins/hlo_roofline/report.json")
    judged_b = report_b.classify(report_a.chip)
    a, b = report_a.ops, judged_b.ops
    body = get_json(client, f"/compare?run={run_a}&other={run_b}")
    rows = _compare_rows(body)
    flipped = [r for r in rows if r["flipped"]]
    assert flipped and body["counts"]["flipped"] == len(flipped)
    assert rows[: len(flipped)] == flipped  # listed first
    for r in flipped:  # each claim checked against the two reports themselves
        op_a = a[a["name"] == r["name"]].iloc[0]
        op_b = b[b["name"] == r["name_other"]].iloc[0]
        assert (op_a["bound"], op_b["bound"]) == (r["bound"], r["bound_other"])
        assert op_a["bound"] != op_b["bound"]
        assert op_a["op_name"] == op_b["op_name"] == r["op_name"]
        assert op_a["opcode"] == op_b["opcode"] == r["opcode"]
        assert r["delta_s"] == pytest.approx(op_b["t_expected_s"] - op_a["t_expected_s"])
    assert body["summary"]["run"]["chip"] == body["summary"]["other"]["chip"] == report_a.chip
    assert body["note"].startswith(f"re-judged against {report_a.chip}")


@pytest.mark.parametrize("pair", ["flipping", "random"])
def test_the_tab_and_the_cli_compare_alike(client, logdir, pair):
    """One comparison for every face: the tab's route and `hlo-roofline diff --format json`."""
    from click.testing import CliRunner

    from hlo_roofline import cli

    run_a, run_b = (
        [f"pair/{run}" for run in PAIR] if pair == "flipping"
        else ["random/tpu_v5e", "random/tpu_v5p"]
    )  # fmt: skip
    files = [logdir / run / "plugins/hlo_roofline/report.json" for run in (run_a, run_b)]
    result = CliRunner().invoke(cli.main, ["diff", *map(str, files), "--format", "json"])
    assert result.exit_code == 0, result.output
    cli_diff = json.loads(result.output)
    body = get_json(client, f"/compare?run={run_a}&other={run_b}")
    counts = body["counts"]
    for kind in ("flipped", "added", "removed", "changed"):
        assert counts[kind] == cli_diff[kind], kind
    assert sum(o["change"] == "changed" for o in cli_diff["ops"]) == counts["changed"]
    assert len(body["data"]) == len(cli_diff["ops"])
    assert body["summary"]["other"]["step_time_serial_s"] == pytest.approx(cli_diff["step_b_s"])
    # the same rows in the same order, each with the CLI's word for its change
    rows_tab = [(r["name"], r["name_other"], r["change"]) for r in _compare_rows(body)]
    rows_cli = [(o["name_a"], o["name_b"], o["change"]) for o in cli_diff["ops"]]
    assert rows_tab == rows_cli
    # and the table text prints the same counts
    table = CliRunner().invoke(cli.main, ["diff", *map(str, files)])
    words = {"flipped": "flipped bound", "added": "added", "removed": "removed"}
    for kind, n in counts.items():
        if kind != "matched":
            assert f"{words.get(kind, kind)}: {n}" in table.output


def test_compare_on_one_chip(client):
    body = get_json(client, "/compare?run=random/tpu_v5e&other=random/tpu_v5p&chip=v5e")
    assert body["chip"] == "v5e"
    assert body["summary"]["run"]["chip"] == body["summary"]["other"]["chip"] == "v5e"


# -- runs that cannot be shown, traces ------------------------------------------------------------


def test_run_errors_name_every_run_that_cannot_load(client, logdir):
    errors = get_json(client, "/run_errors")
    assert sorted(errors) == ["broken", "no_time"]
    assert errors["broken"].startswith("corrupt report:")
    assert "t_expected_s" in errors["no_time"]
    assert str(logdir) not in "".join(errors.values())


def test_report_missing_a_verdict_column_is_422_naming_it(client):
    body = get_json(client, "/report?run=no_time", code=422)
    assert "missing column" in body["error"] and "t_expected_s" in body["error"]
    assert "v5e" in body["error"]  # the chip it claims to be judged on
    # Re-classified for a chip, the verdict columns are computed afresh: it can be shown.
    assert get_json(client, "/report?run=no_time&chip=v5e")["summary"]["chip"] == "v5e"


def test_report_that_cannot_be_classified_is_422(tmp_path):
    without_column(fixture_report("mlp_bf16", "tpu_v5e", "v5e"), "mm_k").write_tensorboard(
        tmp_path, "r"
    )
    c = Client(application.TensorBoardWSGI([make_plugin(tmp_path)]))
    body = get_json(c, "/report?run=r&chip=v5p", code=422)
    assert "mm_k" in body["error"]


def test_trace_of_a_run_without_one_is_404(client):
    assert "no trace" in get_json(client, "/trace?run=mlp/v5e", code=404)["error"]


def test_trace_found_under_the_logdir_by_its_layout(tmp_path):
    """A recorded path from another machine: the session is found under the run by its layout."""
    report = fixture_report("mlp_bf16", "tpu_v5e", "v5e")
    session = tmp_path / "exp" / "step1" / "plugins" / "profile" / "2026_01_01_00_00_00"
    session.mkdir(parents=True)
    (session / "worker0.xplane.pb").write_bytes(b"")
    report.summary["measured_trace"] = (
        "/elsewhere/exp/step1/plugins/profile/2026_01_01_00_00_00/worker0.xplane.pb"
    )
    report.write_tensorboard(tmp_path, "exp/step1")
    c = Client(application.TensorBoardWSGI([make_plugin(tmp_path)]))
    assert get_json(c, "/trace?run=exp/step1") == {
        "recorded": "worker0.xplane.pb",
        "run": "exp/step1/2026_01_01_00_00_00",
        "host": "worker0",
    }
    report.summary["measured_trace"] = "/elsewhere/other/plugins/profile/s/w.xplane.pb"
    report.write_tensorboard(tmp_path, "exp/step1")
    assert get_json(c, "/trace?run=exp/step1")["run"] is None


# -- rollup (the tab's grouping) -------------------------------------------------------------------


def test_rollup_is_the_reports_rollup(client, logdir):
    """``/rollup?by=`` answers Report.rollup of the run (re-classified for ``chip``), key first."""
    report = Report.read(logdir / "mlp/v5e/plugins/hlo_roofline/report.json")
    for by in ("user_source", "user_function", "scope"):
        body = get_json(client, f"/rollup?run=mlp/v5e&by={by}")
        expected = report.rollup(by)
        assert body["by"] == by and body["columns"][0] == by
        rows = [dict(zip(body["columns"], row, strict=True)) for row in body["data"]]
        assert [r[by] for r in rows] == list(expected.index)
        assert [r["ops"] for r in rows] == list(expected["ops"])
        assert [r["bound"] for r in rows] == list(expected["bound"])
    other = get_json(client, "/rollup?run=mlp/v5e&by=scope&chip=v5p")
    share = other["columns"].index("t_expected_s")
    assert sum(r[share] for r in other["data"]) == pytest.approx(
        report.classify("v5p").summary["step_time_serial_s"]
    )


def test_rollup_rejects_other_keys_and_old_reports(client, logdir):
    assert "by must be one of" in get_json(client, "/rollup?run=mlp/v5e&by=flops", 400)["error"]
    assert "by must be one of" in get_json(client, "/rollup?run=mlp/v5e", 400)["error"]
    get_json(client, "/rollup?run=nope&by=scope", 404)


def test_report_payload_carries_scope_and_user_function(client):
    body = get_json(client, "/report?run=mlp/v5e")
    columns = body["columns"]
    assert {"user_source", "call_stack"} <= set(columns)
    assert {"scope", "user_function"} == set(body["derived"])
    assert all(len(v) == len(body["data"]) for v in body["derived"].values())
    stack = columns.index("call_stack")
    assert all(0 <= row[stack] < len(body["call_stacks"]) for row in body["data"])


def test_one_palette_for_the_tab_and_the_plot(client):
    """The tab's bound colours are the PNG/SVG plot's, sent by the server; neither the scripts nor
    the stylesheet define one of their own."""
    from pathlib import Path

    from hlo_roofline.judge.verdict import BOUNDS
    from hlo_roofline.plot import COLORS

    constants = get_json(client, "/constants")
    assert {b: constants["bound_colors"][b] for b in COLORS} == COLORS
    assert constants["bounds"] == list(BOUNDS)
    static = Path(tb_plugin.__file__).parent / "static"
    owned = {*constants["bound_colors"].values(), *constants["fit_colors"].values()}
    for script in static.glob("*.js"):
        text = script.read_text().lower()
        assert not [c for c in owned if c.lower() in text], script.name
    assert not re.search(
        r"--hr-(compute|memory|communication|unknown|none):", (static / "style.css").read_text()
    )


def test_a_run_deleted_while_served_is_404(tmp_path, monkeypatch, caplog):
    """The run is listed, then deleted between the name check and the read: 404, no traceback."""
    fixture_report("mlp_bf16", "tpu_v5e", "v5e").write_tensorboard(tmp_path, "gone")
    c = Client(application.TensorBoardWSGI([make_plugin(tmp_path)]))
    real_read = Report.read.__func__

    def read_after_delete(cls, path, **options):
        shutil.rmtree(tmp_path / "gone", ignore_errors=True)
        return real_read(cls, path, **options)

    monkeypatch.setattr(Report, "read", classmethod(read_after_delete))
    for route in ("/report?run=gone", "/csv?run=gone", "/report?run=gone&chip=v5p"):
        body = get_json(c, route, code=404)
        assert "gone" in body["error"]
        fixture_report("mlp_bf16", "tpu_v5e", "v5e").write_tensorboard(tmp_path, "gone")
    assert "Traceback" not in caplog.text


def test_a_report_written_before_the_free_text_and_roof_columns_is_shown(tmp_path):
    """A judged report without `hint` (free text) or the roof columns (written before them) is
    shown, not refused as corrupt; its timeline is the schedule of its own times."""
    report = fixture_report("mlp_bf16", "tpu_v5e", "v5e")
    for column in ("hint", "roof_flops_per_s", "roof_bytes_per_s", "roof_unit"):
        report = without_column(report, column)
    report.write_tensorboard(tmp_path, "old")
    c = Client(application.TensorBoardWSGI([make_plugin(tmp_path)]))
    body = get_json(c, "/report?run=old")
    assert "hint" not in body["columns"] and "roof_unit" not in body["columns"]
    assert get_json(c, "/run_errors") == {}
    timeline = get_json(c, "/timeline?run=old")
    timed = report.ops[report.ops["t_expected_s"] > 0]
    assert sorted(row[0] for row in timeline["data"]) == sorted(timed.index)
    assert timeline["step_s"] == pytest.approx(report.summary["step_expected_s"])


def test_an_older_unsigned_report_is_shown_and_a_contradicted_one_is_not(tmp_path):
    """The tab is a viewer: a run written before reports carried a checksum shows as written
    (``check`` refuses it without --trust-unsigned); one whose summary contradicts its rows is an
    error, whatever its checksum."""
    import re as _re

    report = fixture_report("mlp_bf16", "tpu_v5e", "v5e")
    report.write_tensorboard(tmp_path, "old")
    path = tmp_path / "old" / "plugins" / "hlo_roofline" / "report.json"
    unsigned = _re.sub(r'^\{"sha256": "[0-9a-f]{64}", ', "{", path.read_text())
    assert unsigned != path.read_text()
    path.write_text(unsigned)
    with pytest.raises(Exception, match="unsigned"):
        Report.read(path)
    c = Client(application.TensorBoardWSGI([make_plugin(tmp_path)]))
    body = get_json(c, "/report?run=old")
    assert body["summary"]["flops"] == pytest.approx(report.summary["flops"])
    data = json.loads(unsigned)
    data["summary"]["flops"] *= 2
    path.write_text(json.dumps(data))
    response = c.get(PREFIX + "/report?run=old")
    assert response.status_code >= 400
    assert "contradicts its rows" in response.get_data(as_text=True)
