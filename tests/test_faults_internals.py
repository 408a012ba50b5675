"""A fault campaign against the report's side table of model internals (``Report.internals``),
as a demanding user runs one: digit flips inside the internals, hand edits of them (rows out of
range, a row given twice, a column given twice, numbers past an int64), a report of the older
single-table form read, gated, diffed and judged again, and the tab's chip switch on both forms.

Every damaged file is refused with a message (exit 2), signed or read with ``--trust-unsigned``,
or it reads back as the very report written; what a file of the older form holds is judged as a
fresh analysis of the same program judges it (the oracle: ``analyze_hlo`` on another chip)."""

from __future__ import annotations

import json
import math
import random
import warnings

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import FIXTURES

from hlo_roofline import analyze_hlo, cli, evidence
from hlo_roofline._json import json_safe
from hlo_roofline.report import FORMAT, VERSION, Report, ReportError, _json_column, meta_path

TPU = FIXTURES / "gpt_tiny" / "tpu_v5e.hlo.txt"  # a TPU compile: 13 internal columns in use
GATE = ["--max-memory-share", "1"]  # fails on the intact report


@pytest.fixture(scope="module")
def judged() -> Report:
    return analyze_hlo(TPU, chip="v5e")


def _same(a: Report, b: Report) -> None:
    pd.testing.assert_frame_equal(a.model_frame(), b.model_frame(), check_exact=True)
    assert json.dumps(json_safe(a.summary), sort_keys=True) == json.dumps(
        json_safe(b.summary), sort_keys=True
    )


def _cli(*args) -> tuple[int, str]:
    result = CliRunner().invoke(cli.main, [str(a) for a in args])
    assert "Traceback" not in result.output, result.output
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


def _internal_digits(text: str) -> list[int]:
    start = text.index('"internals": ')
    end = text.index("}", start)
    return [i for i in range(start, end) if text[i].isdigit()]


def _flip(text: str, i: int, rng: random.Random) -> str:
    return text[:i] + str((int(text[i]) + rng.randint(1, 9)) % 10) + text[i + 1 :]


def test_every_digit_flip_in_the_internals_is_refused(judged, tmp_path):
    """120 single-digit changes inside the internals, of the JSON and of a CSV's sidecar: each
    is refused; read with --trust-unsigned, each is refused by its type or reads
    as a report that is judged again to finite numbers, the CLI answering exit 1 or 2."""
    rng = random.Random(4040)
    path = tmp_path / "r.csv"
    judged.to_csv(path)
    csv_text, meta_text = path.read_text(), meta_path(path).read_text()
    json_text = judged.to_json()
    trusted = 0
    for attempt in range(120):
        is_json = attempt % 2 == 0
        text = json_text if is_json else meta_text
        flipped = _flip(text, rng.choice(_internal_digits(text)), rng)
        args = (flipped,) if is_json else (csv_text, flipped)
        with pytest.raises(ReportError):  # its checksum, or its type before it
            Report.from_text(*args)
        try:
            read = Report.from_text(*args, trust_unsigned=True)
        except ReportError:
            continue
        trusted += 1
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            again = read.classify("v6e")
        assert np.isfinite(again.ops["t_expected_s"].to_numpy(dtype=float)).all()
        assert math.isfinite(again.summary["step_expected_s"])
        if trusted <= 6:  # the gate on a few of them: a message and exit 1 or 2, no traceback
            target = tmp_path / ("t.json" if is_json else "t.csv")
            target.write_text(flipped if is_json else csv_text)
            if not is_json:
                meta_path(target).write_text(flipped)
            code, _ = _cli("check", target, *GATE, "--trust-unsigned", "--chip", "v6e")
            assert code in (1, 2)
    assert trusted > 0  # most flips change a value within its type: those are read as trusted


def _cell(name: str):
    return lambda p: p["internals"][name][0]


def _both_places(payload: dict) -> None:
    """An internal column among the columns as well as in the side table (the two forms mixed)."""
    rows = {row: value for row, value in payload["internals"]["tile_steps"]}
    payload["columns"].append("tile_steps")
    for i, record in enumerate(payload["data"]):
        record.append(rows.get(i, 0.0) * 3)


EDITS = {
    "row past the rows": (
        lambda p: _cell("tile_steps")(p).__setitem__(0, p["rows"]),
        "of its rows",
    ),
    "row negative": (lambda p: _cell("tile_steps")(p).__setitem__(0, -1), "of its rows"),
    "row a float": (lambda p: _cell("tile_steps")(p).__setitem__(0, 3.0), "of its rows"),
    "row true": (lambda p: _cell("tile_steps")(p).__setitem__(0, True), "of its rows"),
    "value NaN": (lambda p: _cell("tile_steps")(p).__setitem__(1, math.nan), "no smaller than 0"),
    "value inf": (lambda p: _cell("tile_steps")(p).__setitem__(1, math.inf), "no smaller than 0"),
    "value negative": (lambda p: _cell("tile_steps")(p).__setitem__(1, -2.0), "no smaller than 0"),
    "value text": (lambda p: _cell("tile_steps")(p).__setitem__(1, "7"), "no smaller than 0"),
    "value true": (lambda p: _cell("tile_steps")(p).__setitem__(1, True), "no smaller than 0"),
    "nullable NaN": (lambda p: _cell("xla_cycles")(p).__setitem__(1, math.nan), "no smaller"),
    "int a fraction": (lambda p: _cell("mm_split_k")(p).__setitem__(1, 2.5), "whole number"),
    "int past int64": (lambda p: _cell("mm_split_k")(p).__setitem__(1, 10**30), "whole number"),
    "int 2**63": (lambda p: _cell("mm_split_k")(p).__setitem__(1, 2**63), "whole number"),
    "int 1e20": (lambda p: _cell("mm_split_k")(p).__setitem__(1, 1e20), "whole number"),
    "a row twice, other value": (
        lambda p: p["internals"]["tile_steps"].append([_cell("tile_steps")(p)[0], 1.0]),
        "more than one value",
    ),
    "a row twice, same value": (
        lambda p: p["internals"]["tile_steps"].append(list(_cell("tile_steps")(p))),
        "more than one value",
    ),
    "unknown name": (lambda p: p["internals"].__setitem__("tile_stepz", []), "no model internal"),
    "a public name": (lambda p: p["internals"].__setitem__("flops", []), "no model internal"),
    "among the columns too": (_both_places, "given twice"),
    "a cell of three": (lambda p: _cell("tile_steps")(p).append(1), "of its rows"),
    "a column an object": (lambda p: p["internals"].__setitem__("tile_steps", {}), "of its rows"),
    "internals a list": (lambda p: p.__setitem__("internals", []), "not an object"),
    "ops emptied": (lambda p: (p.__setitem__("data", []), p.__setitem__("rows", 0)), "of its rows"),
    "ops and internals emptied": (
        lambda p: (
            p.__setitem__("data", []),
            p.__setitem__("rows", 0),
            p.__setitem__("internals", {name: [] for name in p["internals"]}),
        ),
        "contradicts its rows",
    ),
}


@pytest.mark.parametrize("case", sorted(EDITS))
def test_an_edited_internal_is_refused_even_trusted(judged, tmp_path, case):
    """Each edit is refused: by the checksum, and by the value's type and range when trusted or
    signed again (what the reader holds a file to is its content, not who signed it), in the
    JSON and in a CSV's sidecar alike; the CLI says so (exit 2) where a gate would read it."""
    edit, said = EDITS[case]
    payload = judged.to_dict()
    edit(payload)
    text = json.dumps(payload)
    with pytest.raises(ReportError):
        Report.from_text(text)
    for given in (text, evidence.sign(text)):
        with pytest.raises(ReportError, match=said):
            Report.from_text(given, trust_unsigned=True)
    path = tmp_path / "r.json"
    path.write_text(text)
    code, output = _cli("check", path, *GATE, "--trust-unsigned", "--chip", "v6e")
    assert code == 2 and said in output, output
    if case.startswith(("ops", "among")):
        return  # the CSV's rows are its own file
    csv_path = tmp_path / "r.csv"
    judged.to_csv(csv_path)
    meta = json.loads(meta_path(csv_path).read_text())
    del meta[evidence.SIGNATURE_KEY]
    edit(meta)
    meta_path(csv_path).write_text(json.dumps(meta))
    with pytest.raises(ReportError, match=said):
        Report.read(csv_path, trust_unsigned=True)


def _one_table(report: Report) -> dict:
    """The report as the release before the side table wrote it: every column in one table."""
    frame = report.model_frame()
    codes, stacks = pd.factorize(frame["call_stack"], sort=False)
    frame = frame.assign(call_stack=codes)
    return {
        "format": FORMAT,
        "version": VERSION,
        "module": report.module,
        "summary": json_safe(report.summary),
        "columns": list(frame.columns),
        "rows": len(frame),
        "data": [list(r) for r in zip(*(_json_column(frame[c]) for c in frame), strict=True)],
        "call_stacks": [str(s) for s in stacks],
    }


@pytest.mark.parametrize(
    ("column", "value", "said"),
    [
        ("mm_m", 2.5, "whole number"),  # pandas' astype would cut it to 2
        ("mm_split_k", 1.0000001, "whole number"),
        ("mm_k", 1e20, "whole number"),  # would wrap to a negative int64
        ("mm_n", 10**30, "whole number"),
        ("count", True, "not a number"),  # pandas reads true as 1
        ("flops", False, "not a number"),
    ],
)
def test_a_number_column_holds_its_type_in_either_form(judged, column, value, said):
    """A whole-number column holds whole numbers an int64 holds, a number column no true or false:
    the public columns and the older form's internals among them alike, refused, never cut."""
    payload = _one_table(judged)
    j = payload["columns"].index(column)
    row = next(i for i, r in enumerate(payload["data"]) if r[j])
    payload["data"][row][j] = value
    with pytest.raises(ReportError, match=f"row {row} .*{column} = .*{said}"):
        Report.from_text(evidence.sign(json.dumps(payload)))


def test_records_and_columns_are_whole(judged, tmp_path):
    """A record short of a cell (pandas fills it with None) and a column named twice (pandas
    keeps both, or renames the second in a CSV) are refused, not guessed at."""
    payload = judged.to_dict()
    payload["data"][7].pop()
    with pytest.raises(ReportError, match="record 7"):
        Report.from_text(json.dumps(payload), trust_unsigned=True)
    payload = judged.to_dict()
    payload["columns"].append("flops")
    for record in payload["data"]:
        record.append(0.0)
    with pytest.raises(ReportError, match="'flops' twice"):
        Report.from_text(json.dumps(payload), trust_unsigned=True)
    text = judged.to_csv()
    header, _, body = text.partition("\n")
    doubled = header + ",flops\n" + "".join(line + ",0.0\n" for line in body.splitlines())
    meta = {"format": FORMAT, "version": VERSION, "rows": len(judged.ops)}
    meta["summary"] = json_safe(judged.summary)
    with pytest.raises(ReportError, match="'flops' twice"):
        Report.from_text(doubled, json.dumps(meta), trust_unsigned=True)


@pytest.fixture(scope="module")
def two_forms(judged, tmp_path_factory) -> dict:
    directory = tmp_path_factory.mktemp("forms")
    new, old = directory / "new.json", directory / "old.json"
    judged.to_json(new)
    old.write_text(evidence.sign(json.dumps(_one_table(judged), allow_nan=False)))
    return {"new": new, "old": old}


def test_the_older_form_is_read_gated_and_judged_as_a_fresh_analysis(two_forms):
    """A signed report of the single-table form reads as the report of today's form, and judged
    again on another chip gives what a fresh analysis on that chip gives."""
    new, old = (Report.read(two_forms[k]) for k in ("new", "old"))
    _same(old, new)
    for chip in ("v6e", "h100"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fresh = analyze_hlo(TPU, chip=chip)
        _same(old.classify(chip), fresh)
    for args in ([], ["--chip", "v6e"]):
        assert _cli("check", two_forms["old"], *GATE, *args)[0] == 1
        assert _cli("check", two_forms["new"], *GATE, *args)[0] == 1


def test_a_diff_across_the_two_forms_is_a_diff_of_one_report(two_forms):
    """``diff`` of today's form against the older form says what it says of a report against
    itself, judged as written and on another chip."""
    for args in ([], ["--chip", "v6e"]):
        across = _cli("diff", two_forms["new"], two_forms["old"], "--format", "json", *args)
        itself = _cli("diff", two_forms["new"], two_forms["new"], "--format", "json", *args)
        assert across[0] == itself[0] == 0
        assert across[1] == itself[1]


def test_the_tabs_chip_switch_serves_both_forms_as_a_fresh_analysis(judged, two_forms, tmp_path):
    """The plugin's /report?chip= on a run of each form serves the step a fresh analysis on that
    chip gives; a run whose internals were edited past their type is a 422, never a 500."""
    from tensorboard.backend import application
    from tensorboard.plugins import base_plugin
    from werkzeug.test import Client

    from hlo_roofline.logdir import PLUGIN_NAME, REPORT_JSON
    from hlo_roofline_tensorboard import plugin as tb_plugin

    runs = {
        "new": two_forms["new"].read_text(),
        "old": two_forms["old"].read_text(),
    }
    payload = judged.to_dict()
    payload["internals"]["mm_split_k"][0][1] = 10**30
    runs["past_int64"] = json.dumps(payload)
    for run, text in runs.items():
        directory = tmp_path / run / "plugins" / PLUGIN_NAME
        directory.mkdir(parents=True)
        (directory / REPORT_JSON).write_text(text)
    context = base_plugin.TBContext(logdir=str(tmp_path))
    client = Client(application.TensorBoardWSGI([tb_plugin.HloRooflinePlugin(context)]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fresh = analyze_hlo(TPU, chip="v6e").summary["step_expected_s"]
    for run in ("new", "old"):
        response = client.get(f"/data/plugin/hlo_roofline/report?run={run}&chip=v6e")
        assert response.status_code == 200, response.get_data(as_text=True)
        assert json.loads(response.get_data(as_text=True))["summary"]["step_expected_s"] == fresh
    response = client.get("/data/plugin/hlo_roofline/report?run=past_int64&chip=v6e")
    assert response.status_code == 422, response.get_data(as_text=True)
    assert "whole number" in response.get_data(as_text=True)


SUMMARY_EDITS = {  # what judging a report again reads from its summary, edited past its type
    "topology a number": ("topology", 5, "topology = 5 is not of its type"),
    "topology a list": ("topology", [2, 4], "topology = .* is not of its type"),
    "model_flops text": ("model_flops", "1e12", "model_flops = .* is not of its type"),
    "model_flops negative": ("model_flops", -1.0, "positive number of FLOPs"),
    "model_flops true": ("model_flops", True, "model_flops = True is not of its type"),
    "missing a number": ("missing", 5, "missing = 5 is not of its type"),
    "chip a list": ("chip", ["v5e"], "chip = .* is not of its type"),
    "memory without its need": ("memory", {"source": "hlo", "complete": True}, "need_bytes"),
    "memory a negative size": ("memory", None, "arguments_bytes = -5"),
    "memory complete as text": ("memory", None, "complete = 'yes'"),
}


@pytest.mark.parametrize("case", sorted(SUMMARY_EDITS))
def test_what_judging_again_reads_of_the_summary_is_held_to_its_type(judged, tmp_path, case):
    """The summary's inputs to judging again (its topology, model FLOPs, memory figures, missing
    facts) are held to ``schema.Summary``'s types as the report is read, trusted or not: the CLI
    judging it on another chip answers exit 2 with the key, where it raised TypeError,
    ValueError or KeyError (a traceback and exit 1) and the tab answered 500."""
    key, value, said = SUMMARY_EDITS[case]
    payload = judged.to_dict()
    if case == "memory a negative size":
        value = {**payload["summary"]["memory"], "arguments_bytes": -5}
    elif case == "memory complete as text":
        value = {**payload["summary"]["memory"], "complete": "yes"}
    payload["summary"][key] = value
    text = json.dumps(payload)
    for given in (text, evidence.sign(text)):
        with pytest.raises(ReportError, match=said):
            Report.from_text(given, trust_unsigned=True)
    path = tmp_path / "r.json"
    path.write_text(text)
    for args in (["check", path, *GATE], ["diff", path, path]):
        code, output = _cli(*args, "--trust-unsigned", "--chip", "h100")
        assert code == 2 and key in output, output


def test_a_valid_summary_of_each_kind_reads_back(judged, tmp_path):
    """An unjudged report, a judged one with a model FLOP count and one with its topology null
    read back as written: the types are the writer's."""
    from hlo_roofline import analyze_hlo as analyze

    for report in (
        analyze(TPU),
        judged.with_model_flops(2.5e8),
        Report(judged.ops, {**judged.summary, "topology": None}, judged.module, judged.internals),
    ):
        _same(Report.from_text(report.to_json()), report)
