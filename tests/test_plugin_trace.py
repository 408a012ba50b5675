"""The step as scheduled, exported as Chrome trace-event JSON (``Report.to_trace``, ``analyze
--trace-out``): the file is valid trace-event JSON (checked field by field against the format's
definition, Perfetto's trace processor not being installable here), it holds every op with time
at its roofline time, the compute stream never runs two things at once, and it ends where the
summary's scheduled step does."""

from __future__ import annotations

import itertools
import json
import math

import pytest
from click.testing import CliRunner
from tb_helpers import FIXTURES, fixture_report

from hlo_roofline import cli

# Chrome's Trace Event Format ("Trace Event Format", Google doc, the JSON Object Format): the
# phases this exporter writes and the fields each requires.
REQUIRED = {"X": {"name", "ph", "ts", "dur", "pid", "tid"}, "M": {"name", "ph", "pid", "args"}}
METADATA = {"process_name", "thread_name", "thread_sort_index", "process_sort_index"}


def assert_trace_event_json(text: str) -> dict:
    trace = json.loads(text)  # strict: allow_nan would have let NaN through; json.loads accepts it
    assert "NaN" not in text and "Infinity" not in text
    assert isinstance(trace, dict) and isinstance(trace["traceEvents"], list)
    assert trace.get("displayTimeUnit", "ms") in ("ms", "ns")
    for event in trace["traceEvents"]:
        assert event["ph"] in REQUIRED, event
        assert REQUIRED[event["ph"]] <= set(event), event
        assert isinstance(event["pid"], int) and isinstance(event.get("tid", 0), int)
        assert isinstance(event["name"], str)
        if event["ph"] == "X":
            assert math.isfinite(event["ts"]) and event["ts"] >= 0
            assert math.isfinite(event["dur"]) and event["dur"] >= 0
            assert isinstance(event.get("args", {}), dict)
        else:
            assert event["name"] in METADATA
    return trace


@pytest.mark.parametrize(
    ("program", "target", "chip", "links"),
    [
        ("fsdp_train_step", "tpu_v5p", "v5p", "ICI"),
        ("fsdp_train_step", "h100", "h100-sxm", "NVLink"),
        ("gpt_tiny", "tpu_v5e", "v5e", None),
    ],
)
def test_trace_is_the_step_as_scheduled(tmp_path, program, target, chip, links):
    report = fixture_report(program, target, chip)
    path = tmp_path / "step.trace.json"
    report.to_trace(path)
    trace = assert_trace_event_json(path.read_text())
    events = trace["traceEvents"]
    threads = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert threads[1] == "compute stream"
    if links:
        assert any(name.startswith(links) for name in threads.values()), threads
    ops = [
        e for e in events
        if e["ph"] == "X" and e["name"] != "exposed" and not e["name"].startswith("waits for ")
    ]  # fmt: skip
    # every op with time (or whose transfer the stream waits for), once, at its roofline time (µs)
    timed = report.ops[(report.ops["t_expected_s"] > 0) | (report.ops["t_exposed_s"] > 0)]
    assert sorted(e["name"] for e in ops) == sorted(timed["name"])
    want = dict(zip(timed["name"], timed["t_expected_s"], strict=True))
    for e in ops:
        assert e["dur"] == pytest.approx(want[e["name"]] * 1e6, rel=1e-9, abs=1e-9)
    # the compute stream (its ops and its waits) runs one thing at a time
    stream = sorted(
        (e for e in events if e["ph"] == "X" and e["tid"] == 1 and e["name"] != "exposed"),
        key=lambda e: e["ts"],
    )
    for a, b in itertools.pairwise(stream):
        assert a["ts"] + a["dur"] <= b["ts"] + 1e-6, (a, b)
    end = max(e["ts"] + e["dur"] for e in events if e["ph"] == "X")
    assert end == pytest.approx(report.summary["step_expected_s"] * 1e6, rel=1e-9)
    # the stream's waits for collectives are the summary's exposed communication
    collective = set(report.ops.loc[report.ops["collective"] != "", "name"])
    waits = sum(
        e["dur"] for e in stream if e["name"].startswith("waits for ")
        and e["args"]["op"] in collective
    )  # fmt: skip
    synchronous = sum(
        e["args"]["exposed_s"] * 1e6 for e in ops if e["name"] in collective and e["tid"] == 1
    )
    assert waits + synchronous == pytest.approx(report.summary["exposed_comm_s"] * 1e6, abs=1e-6)
    if links:
        assert report.summary["exposed_comm_s"] > 0 and waits > 0


def test_a_zero_time_transfer_the_stream_waits_for_is_drawn():
    """gpt_tiny on v5e has copy-starts priced at no time whose transfer the stream still waits
    for (``t_exposed_s`` > 0): the timeline keeps them, with that wait, so the table's exposed
    time has a hatched bar."""
    report = fixture_report("gpt_tiny", "tpu_v5e", "v5e")
    ops = report.ops
    waited = ops[(ops["t_expected_s"] == 0) & (ops["t_exposed_s"] > 0)]
    assert len(waited) >= 1
    frame = report.timeline()
    exposed = frame[frame["exposed_s"] > 0]
    assert set(exposed["row"]) == set(ops.index[ops["t_exposed_s"] > 0])
    by_row = frame.set_index("row")
    for row, op in waited.iterrows():
        assert by_row.loc[row, "exposed_s"] == pytest.approx(op["t_exposed_s"], rel=1e-9)


def test_an_unjudged_report_has_no_schedule():
    report = fixture_report("mlp_bf16", "tpu_v5e", "v5e")
    from hlo_roofline.report import Report

    bare = Report(report.ops[["name", "opcode"]], {}, report.module)
    with pytest.raises(ValueError, match="not judged"):
        bare.to_trace()


def test_analyze_trace_out_writes_the_trace(tmp_path, monkeypatch):
    steps = tmp_path / "steps.py"
    steps.write_text(
        "import jax, jax.numpy as jnp\n"
        "def step():\n"
        "    x = jax.ShapeDtypeStruct((256, 512), jnp.bfloat16)\n"
        "    w = jax.ShapeDtypeStruct((512, 512), jnp.bfloat16)\n"
        "    return (lambda x, w: jnp.tanh(x @ w)), (x, w)\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HLO_ROOFLINE_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "step.trace.json"
    result = CliRunner().invoke(
        cli.main, ["analyze", "steps.py:step", "--chip", "v5e", "--json", "r.json",
                   "--trace-out", str(out)], prog_name="hlo-roofline",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    trace = assert_trace_event_json(out.read_text())
    from hlo_roofline.report import Report

    report = Report.read(tmp_path / "r.json")
    names = {e["name"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert set(report.ops.loc[report.ops["t_expected_s"] > 0, "name"]) <= names
    bad = CliRunner().invoke(
        cli.main, ["analyze", "steps.py:step", "--chip", "v5e", "--trace-out",
                   str(steps / "t.json")], prog_name="hlo-roofline",
    )  # fmt: skip
    assert bad.exit_code == 2 and "Traceback" not in bad.output
    assert bad.output.count("Error:") == 1 and "cannot write" in bad.output


def test_hlo_trace_out_writes_the_trace_of_the_text(tmp_path):
    """``hlo FILE --trace-out`` writes what ``Report.to_trace`` gives for the same text and chip;
    without a chip there is no schedule to write (exit 2, a message)."""
    fixture = FIXTURES / "fsdp_train_step" / "tpu_v5p.hlo.txt"
    out = tmp_path / "step.trace.json"
    result = CliRunner().invoke(
        cli.main, ["hlo", str(fixture), "--chip", "v5p", "--trace-out", str(out)],
        prog_name="hlo-roofline",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert_trace_event_json(out.read_text())
    assert json.loads(out.read_text()) == json.loads(fixture_report(
        "fsdp_train_step", "tpu_v5p", "v5p"
    ).to_trace())  # fmt: skip
    bare = CliRunner().invoke(
        cli.main, ["hlo", str(fixture), "--trace-out", str(tmp_path / "x.json")],
        prog_name="hlo-roofline",
    )  # fmt: skip
    assert bare.exit_code == 2 and "Traceback" not in bare.output
    assert "--trace-out needs a chip" in bare.output
    assert not (tmp_path / "x.json").exists()


def test_hlo_trace_out_names_each_module_of_a_dump(tmp_path):
    """A dump of several modules writes one trace per module, the module's key before the suffix
    (as --csv and --json do)."""
    dump = tmp_path / "dump"
    dump.mkdir()
    for program in ("mlp_bf16", "gpt_tiny"):
        text = (FIXTURES / program / "tpu_v5e.hlo.txt").read_text()
        (dump / f"module_{program}.after_optimizations.txt").write_text(text)
    out = tmp_path / "t.json"
    result = CliRunner().invoke(
        cli.main, ["hlo", str(dump), "--chip", "v5e", "--trace-out", str(out)],
        prog_name="hlo-roofline",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    written = sorted(tmp_path.glob("t.*.json"))
    assert len(written) == 2, result.output
    for path in written:
        assert_trace_event_json(path.read_text())
