"""A logdir on another filesystem (``gs://``, ``s3://``): the plugin lists and serves its runs
through TensorBoard's file API. Here an fsspec in-memory filesystem (``memory://``), which
TensorBoard's gfile reaches the way it reaches ``gs://`` (gcsfs) when no TensorFlow is installed."""

from __future__ import annotations

import uuid

import pytest
from tb_helpers import fixture_report
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

from hlo_roofline_tensorboard import plugin as tb_plugin

fsspec = pytest.importorskip("fsspec")

PREFIX = "/data/plugin/hlo_roofline"


@pytest.fixture
def remote_logdir():
    fs = fsspec.filesystem("memory")
    root = f"/tab-{uuid.uuid4().hex}"
    report = fixture_report("mlp_bf16", "tpu_v5e", "v5e")
    for run in ("a/one", "b"):
        with fs.open(f"{root}/{run}/plugins/hlo_roofline/report.json", "w") as f:
            f.write(report.to_json())
    with fs.open(f"{root}/broken/plugins/hlo_roofline/report.json", "w") as f:
        f.write('{"format": "hlo_roofline.report", "version": 1, "data": [')
    fs.mkdir(f"{root}/empty")
    yield f"memory://{root}", report
    fs.rm(root, recursive=True)


def client(logdir: str) -> Client:
    plugin = tb_plugin.HloRooflinePlugin(base_plugin.TBContext(logdir=logdir), warm=False)
    return Client(application.TensorBoardWSGI([plugin]))


def test_a_remote_logdir_is_listed_and_served(remote_logdir):
    logdir, report = remote_logdir
    c = client(logdir)
    runs = c.get(f"{PREFIX}/runs").get_json()
    assert runs == ["a/one", "b", "broken"]
    body = c.get(f"{PREFIX}/report?run=a/one").get_json()
    assert body["columns"] == list(report.ops.columns)
    assert len(body["data"]) == len(report.ops)
    assert body["summary"]["chip"] == "v5e"
    errors = c.get(f"{PREFIX}/run_errors").get_json()
    assert set(errors) == {"broken"} and "corrupt report" in errors["broken"]
    assert logdir not in errors["broken"]  # the server's logdir is not shown
    response = c.get(f"{PREFIX}/report?run=broken")
    assert response.status_code == 422
    assert c.get(f"{PREFIX}/report?run=missing").status_code == 404
    assert c.get(f"{PREFIX}/report?run=../x").status_code == 400
    timeline = c.get(f"{PREFIX}/timeline?run=b").get_json()
    assert len(timeline["data"]) == int((report.ops["t_expected_s"] > 0).sum())
    csv = c.get(f"{PREFIX}/csv?run=b&chip=v5p")
    assert csv.status_code == 200 and "b.v5p.hlo_roofline.csv" in csv.headers["Content-Disposition"]


def test_a_remote_exploration_is_found_and_its_runs_named(remote_logdir):
    """An exploration beside runs under ``a/`` (as ``Exploration.write_tensorboard`` lays it
    out): found through gfile, its row's run named as the tab names it."""
    import json
    from pathlib import Path

    from hlo_roofline.logdir import EXPLORE_JSON

    logdir, _ = remote_logdir
    sweep = Path(__file__).resolve().parent.parent / "fixtures" / "explore" / "h100_gate"
    doc = json.loads((sweep / EXPLORE_JSON).read_text())
    doc["rows"][0]["run"] = "one"  # the run a/one stands in for the first candidate's
    fs = fsspec.filesystem("memory")
    with fs.open(f"{logdir.removeprefix('memory://')}/a/{EXPLORE_JSON}", "w") as f:
        f.write(json.dumps(doc))
    found = client(logdir).get(f"{PREFIX}/explorations").get_json()
    assert [d["dir"] for d in found] == ["a"]
    runs = [r["run"] for r in found[0]["rows"]]
    assert runs[0] == "a/one" and set(runs[1:]) == {None}
    assert found[0]["hbm_capacity"] == doc["hbm_capacity"]
