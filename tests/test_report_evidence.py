"""No gate passes on missing or contradicted evidence (issue 40).

A report is read by one reader (``Report.read``: check, diff, plot, the plugin): its rows are held to
the schema, its summary to its rows (``schema``'s declarations of which key is which sum, ratio or
walk), and its bytes to the checksum it was written with. Emptied rows, an edited summary or
sidecar, a flipped digit: each is refused (exit 2) or fails the gate, never passes it."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from hlo_roofline import analyze_hlo, cli, cost, evidence, schema
from hlo_roofline.check import Rules, check
from hlo_roofline.report import Report, ReportError, meta_path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
# Real compiles of several kinds: a GPU loop, a TPU Pallas kernel (0% coverage), collectives.
SAMPLES = {
    "scan10/h100": "h100",
    "pallas_tpu/tpu_v5e": "v5e",
    "gpt_tiny/tpu_v5e": "v5e",
    "collectives/fsdp_v5e": "v5e",
}


def _fixture(name: str) -> Path:
    plain = FIXTURES / f"{name}.hlo.txt"
    return plain if plain.is_file() else FIXTURES / f"{name}.hlo.txt.gz"


@pytest.fixture(scope="module")
def reports() -> dict[str, Report]:
    found = {}
    for name, chip in SAMPLES.items():
        path = _fixture(name)
        if path.is_file():
            found[name] = analyze_hlo(path, chip=chip)
    assert len(found) >= 3, found.keys()
    return found


def _check(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli.main, ["check", *map(str, args)])
    assert "Traceback" not in result.output, result.output
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


def test_real_reports_agree_with_their_rows(reports):
    for name, report in reports.items():
        assert evidence.contradictions(report.ops, report.summary) == [], name


def test_written_reports_are_signed_and_read_back(reports, tmp_path):
    report = reports["scan10/h100"]
    report.to_json(tmp_path / "r.json")
    report.to_csv(tmp_path / "r.csv")
    assert (tmp_path / "r.json").read_text().startswith('{"sha256": "')
    assert evidence.verify((tmp_path / "r.json").read_text()) is None
    meta = meta_path(tmp_path / "r.csv").read_text()
    assert evidence.verify(meta, (tmp_path / "r.csv").read_text()) is None
    for name in ("r.json", "r.csv"):
        back = Report.read(tmp_path / name)
        assert back.summary["flops"] == report.summary["flops"]


def test_emptied_rows_are_refused_or_fail_every_gate(reports, tmp_path):
    report = reports["scan10/h100"]
    report.to_json(tmp_path / "r.json")
    data = json.loads((tmp_path / "r.json").read_text())
    data["data"] = []
    (tmp_path / "empty.json").write_text(json.dumps(data))
    for gate in (["--max-memory-share", "1"], ["--require", "compute"]):
        assert _check(tmp_path / "empty.json", *gate)[0] == 2
        assert _check(tmp_path / "empty.json", *gate, "--trust-unsigned")[0] == 2
    # a report written with no rows (its totals agree, its checksum holds): every gate fails
    empty = Report(report.ops.iloc[:0], cost.summarize([], "roofline")).classify(report.chip)
    (tmp_path / "consistent.json").write_text(empty.to_json())
    for gate in (["--max-memory-share", "1"], ["--require", "compute"], ["--min-coverage", "1"]):
        code, output = _check(tmp_path / "consistent.json", *gate)
        assert code == 1, output
        assert "no rows" in output
    for pair in (("consistent.json", "r.json"), ("r.json", "consistent.json")):  # either side
        compared = CliRunner().invoke(
            cli.main, ["diff", *(str(tmp_path / p) for p in pair), "--min-coverage", "1"]
        )
        assert compared.exit_code == 1 and "no rows" in compared.output, compared.output


def test_no_rows_fail_every_rule(reports):
    ops = reports["scan10/h100"].ops.iloc[:0]
    rules = Rules(require="compute", max_memory_share=100.0, min_coverage=0.0)
    result = check(Report(ops, {"chip": "h100"}), rules)
    assert not result.passed
    assert {v.rule for v in result.violations} == set(rules.gates)


def test_edited_sidecar_coverage_is_refused(reports, tmp_path):
    report = reports["pallas_tpu/tpu_v5e"]
    assert report.summary["coverage"] == 0.0
    report.to_csv(tmp_path / "c.csv")
    meta = meta_path(tmp_path / "c.csv")
    meta.write_text(meta.read_text().replace('"coverage": 0.0', '"coverage": 1.0'))
    assert '"coverage": 1.0' in meta.read_text()
    code, output = _check(tmp_path / "c.csv", "--min-coverage", "99")
    assert code == 2 and ("checksum" in output or "coverage" in output), output
    code, output = _check(tmp_path / "c.csv", "--min-coverage", "99", "--trust-unsigned")
    assert code == 2 and "coverage" in output, output


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_every_digit_flip_is_refused(reports, tmp_path, fmt):
    """250 single-digit changes anywhere in the file (the CSV's or its sidecar's): each is
    refused, none read back as a report with other numbers."""
    report = reports["scan10/h100"]
    path = tmp_path / f"r.{fmt}"
    getattr(report, f"to_{fmt}")(path)
    targets = [path, meta_path(path)] if fmt == "csv" else [path]
    rng = random.Random(40)
    refused = 0
    for attempt in range(250):
        target = targets[attempt % len(targets)]
        text = target.read_text()
        digits = [i for i, c in enumerate(text) if c.isdigit()]
        i = rng.choice(digits)
        flipped = text[:i] + str((int(text[i]) + rng.randint(1, 9)) % 10) + text[i + 1 :]
        target.write_text(flipped)
        try:
            Report.read(path)
        except ReportError:
            refused += 1
        finally:
            target.write_text(text)
    assert refused == 250


def test_unsigned_reports_need_trust(reports, tmp_path):
    data = reports["scan10/h100"].to_dict()
    (tmp_path / "hand.json").write_text(json.dumps(data, indent=1))
    with pytest.raises(ReportError, match="unsigned"):
        Report.read(tmp_path / "hand.json")
    assert Report.read(tmp_path / "hand.json", trust_unsigned=True).summary == json.loads(
        json.dumps(data["summary"])
    )
    assert _check(tmp_path / "hand.json", "--max-memory-share", "100")[0] == 2
    assert _check(tmp_path / "hand.json", "--max-memory-share", "100", "--trust-unsigned")[0] == 0


def _declared_keys() -> list[str]:
    return [*schema.SUMMARY_SUMS, *schema.SUMMARY_RATIOS, *schema.SUMMARY_SCHEDULE, "coverage"]


@pytest.mark.parametrize("key", _declared_keys())
def test_each_declared_summary_number_is_held_to_the_rows(reports, key):
    """Every summary key schema declares as found from the rows: changed alone, it is named."""
    for name, report in reports.items():
        value = report.summary.get(key)
        if not isinstance(value, float | int) or isinstance(value, bool):
            continue
        changed = {**report.summary, key: value * 1.01 + (0.01 if value == 0 else 0.0)}
        if key == "coverage" and changed[key] > 1:
            changed[key] = value * 0.9 if value else 0.5
        found = evidence.contradictions(report.ops, changed)
        assert any(key in f for f in found), (name, key, found)
        return
    pytest.skip(f"no sample report has {key}")


def test_a_bound_its_times_contradict_is_refused(reports):
    report = reports["scan10/h100"]
    ops = report.ops.copy()
    row = int((ops["bound"] == "memory").to_numpy().nonzero()[0][0])
    ops.loc[ops.index[row], "t_compute_s"] = ops["t_memory_s"].iloc[row] * 2
    found = evidence.contradictions(ops, report.summary)
    assert any("bound = 'memory'" in f for f in found), found
    shares = report.ops.copy()
    shares.loc[shares.index[row], "share"] = 0.99
    assert any("share" in f for f in evidence.contradictions(shares, report.summary))


def _scaled_step(s: dict) -> None:
    s["step_expected_s"] *= 10
    s["exposed_comm_share"] = s["exposed_comm_s"] / s["step_expected_s"]


def _unknown_chip_scaled_step(s: dict) -> None:
    s["chip"] = "v5e-lab"  # a chip this process does not know: the walk on some kind's queues
    _scaled_step(s)


def _no_bound_scaled_step(s: dict) -> None:
    for key in ("step_bound_s", "mfu_expected", "host_dispatch_s"):
        s.pop(key)
    _scaled_step(s)


def _fit_edited(s: dict) -> None:
    s["memory_fit"]["used_fraction"] = 0.01


def _roofs_not_objects(s: dict) -> None:
    s["roofs"] = dict.fromkeys(s["roofs"], 5)


# Edits a gate would read past, each refused by the reader (a checksum only says the file is as
# written; anyone can write one, so the summary is held to its rows and its own figures).
SUMMARY_EDITS = {
    "step x10, the chip unknown here": (_unknown_chip_scaled_step, "schedule takes"),
    "step x10, its bound removed": (_no_bound_scaled_step, "lacks step_bound_s"),
    "step_time_serial_s removed": (lambda s: s.pop("step_time_serial_s"), "lacks"),
    "memory fit 1% used": (_fit_edited, "memory_fit.used_fraction"),
    "roofs not objects": (_roofs_not_objects, "roofs"),
    "chip_profile empty": (lambda s: s.update(chip_profile=""), "chip_profile"),
    "a buffer that is a number": (lambda s: s["memory"].update(largest=[5]), "not a buffer"),
}


@pytest.mark.parametrize("edit", sorted(SUMMARY_EDITS))
def test_a_summary_edited_past_its_evidence_is_refused(reports, edit):
    change, said = SUMMARY_EDITS[edit]
    report = reports["collectives/fsdp_v5e"]
    assert report.summary["memory_fit"] is not None and report.summary["exposed_comm_s"] > 0
    data = json.loads(report.to_json())
    data.pop(evidence.SIGNATURE_KEY, None)
    Report.from_dict(json.loads(json.dumps(data)))  # as written: read
    change(data["summary"])
    with pytest.raises(ReportError, match=said):
        Report.from_dict(data)


def test_a_row_run_no_time_costs_nothing(reports):
    """count 0 leaves a row out of the coverage: with a cost of its own it would hide an unpriced
    op from the coverage gate."""
    data = json.loads(reports["scan10/h100"].to_json())
    columns = data["columns"]
    row = max(range(len(data["data"])), key=lambda i: data["data"][i][columns.index("flops")])
    data["data"][row][columns.index("count")] = 0
    data["data"][row][columns.index("unknown")] = True
    with pytest.raises(ReportError, match="count = 0"):
        Report.from_dict(data)


@pytest.mark.parametrize("suffix", [".json", ".csv"])
def test_a_users_own_text_column_is_read_back_as_written(reports, tmp_path, suffix):
    """What the writer signs, the reader takes: a column of the user's own (a team's name beside
    each op) is theirs; a number column of the schema still holds numbers."""
    report = copy.deepcopy(reports["scan10/h100"])  # the module's reports stay as analyzed
    report.ops["team"] = "infra"
    path = tmp_path / f"u{suffix}"
    report.to_json(path) if suffix == ".json" else report.to_csv(path)
    back = Report.read(path)
    assert list(back.ops["team"].unique()) == ["infra"]
    data = json.loads(report.to_json())
    data["data"][0][data["columns"].index("flops")] = "infra"
    with pytest.raises(ReportError, match="flops = 'infra' is not a number"):
        Report.from_dict(data)


@pytest.mark.parametrize("cell", [["x"], {"a": 1}])
def test_a_text_cell_that_is_a_list_or_an_object_is_refused(reports, cell):
    data = json.loads(reports["scan10/h100"].to_json())
    data["data"][0][data["columns"].index("opcode")] = cell
    with pytest.raises(ReportError, match=r"opcode = .* is not text"):
        Report.from_dict(data)
