"""Damaged reports never turn a failing gate into a pass.

A real report (the tiny GPT fixture judged on v5e) is written as CSV and JSON, each gate below is
checked to fail on the intact file, and then every damage a disk, a kill or a hand edit can do is
applied: the damaged file is either refused (exit 2, naming the file and the first bad field) or
judged to fail as well. Never exit 0."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from hlo_roofline import analyze_hlo, cli
from hlo_roofline.report import Report, ReportError, meta_path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

# Gates that fail on the intact report (asserted below), each for a different field.
GATES = {
    "memory share": ["--max-memory-share", "1"],
    "require memory": ["--select", "dot_general", "--require", "memory"],
    "hbm": ["--max-hbm", "0.0001"],
}


@pytest.fixture(scope="module")
def intact(tmp_path_factory) -> dict[str, Path]:
    report = analyze_hlo(FIXTURES / "gpt_tiny" / "tpu_v5e.hlo.txt", chip="v5e")
    report.summary["memory"] = report.summary.get("memory")
    directory = tmp_path_factory.mktemp("reports")
    paths = {"csv": directory / "r.csv", "json": directory / "r.json"}
    report.to_csv(paths["csv"])
    report.to_json(paths["json"])
    return paths


def _gate(path: Path, gate: str) -> int:
    # trusted: the damaged copies carry no checksum, so what refuses them is the reader's check of
    # their cells, rows and summary (test_report_evidence holds the checksum)
    result = CliRunner().invoke(cli.main, ["check", str(path), *GATES[gate], "--trust-unsigned"])
    assert "Traceback" not in result.output, result.output
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code


@pytest.mark.parametrize("gate", sorted(GATES))
@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_every_gate_fails_on_the_intact_report(intact, fmt, gate):
    if gate == "hbm" and Report.read(intact[fmt]).summary.get("memory_fit") is None:
        pytest.fail("the fixture's report has no memory fit to gate")
    assert _gate(intact[fmt], gate) == 1


def _truncations(text: str, count: int, seed: int) -> list[str]:
    """Cuts between records (at line ends) and inside them, spread over the whole file."""
    line_ends = [i + 1 for i, c in enumerate(text) if c == "\n"][1:-1]
    rng = random.Random(seed)
    cuts = rng.sample(line_ends, min(count, len(line_ends)))
    cuts += rng.sample(range(1, len(text) - 1), count)
    return [text[:cut] for cut in sorted(set(cuts))]


@pytest.mark.parametrize("gate", sorted(GATES))
def test_a_truncated_csv_is_refused(intact, tmp_path, gate):
    text = intact["csv"].read_text()
    for i, cut in enumerate(_truncations(text, 12, seed=len(gate))):
        damaged = tmp_path / f"cut{i}.csv"
        damaged.write_text(cut)
        _meta_beside(intact["csv"], damaged)  # unhashed: the row count alone must refuse it
        code = _gate(damaged, gate)
        assert code in (1, 2), (len(cut), code)
        if len(cut) < len(text) - 1:  # everything but the final newline is gone
            with pytest.raises(ReportError):
                Report.read(damaged, trust_unsigned=True)


def _meta_beside(intact_csv: Path, damaged: Path, hashed: bool = False) -> None:
    """The intact CSV's metadata beside a damaged copy: without the CSV's hash (a hand-edited
    file), so what refuses the damage is the check of its cells and rows, not the hash."""
    meta = json.loads(meta_path(intact_csv).read_text())
    if not hashed:
        del meta["sha256"]
    meta_path(damaged).write_text(json.dumps(meta))


def _csv_cells(text: str) -> list[list[str]]:
    import csv
    import io

    return list(csv.reader(io.StringIO(text)))


def _write_csv(path: Path, rows: list[list[str]]) -> None:
    import csv
    import io

    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    path.write_text(out.getvalue())


NUMERIC_DAMAGE = ("", "nan", "-1", "inf", "abc")


@pytest.mark.parametrize(
    "column", ["t_expected_s", "t_memory_s", "share", "flops", "bound", "unknown", "count", "mm_k"]
)
@pytest.mark.parametrize("value", NUMERIC_DAMAGE)
def test_a_damaged_csv_cell_never_passes_a_failing_gate(intact, tmp_path, column, value):
    rows = _csv_cells(intact["csv"].read_text())
    names = rows[0]
    index = names.index(column)
    share = names.index("share")
    # The op that takes most of the step: damaging it is what could flip a gate.
    target = max(range(1, len(rows)), key=lambda r: float(rows[r][share] or 0))
    rows[target][index] = value
    damaged = tmp_path / "d.csv"
    _write_csv(damaged, rows)
    _meta_beside(intact["csv"], damaged)
    for gate in GATES:
        assert _gate(damaged, gate) in (1, 2), (column, value, gate)


def _json_damages(data: dict) -> dict[str, dict]:
    """Named damages of a JSON report's payload."""
    columns = data["columns"]
    damages = {}
    for column in ("t_expected_s", "share", "flops", "count", "t_memory_s"):
        for value in (None, -1.0, 1e308 * 10 if False else "x"):
            changed = json.loads(json.dumps(data))
            for row in changed["data"]:
                row[columns.index(column)] = value
            damages[f"{column}={value!r}"] = changed
    bound = json.loads(json.dumps(data))
    bound["data"][0][columns.index("bound")] = "fast"
    damages["unknown bound"] = bound
    for key, value in (
        ("coverage", None),
        ("coverage", "abc"),
        ("coverage", -0.5),
        ("coverage", 7),
    ):
        changed = json.loads(json.dumps(data))
        changed["summary"][key] = value
        damages[f"summary {key}={value!r}"] = changed
    for value in (None, "abc", -1):
        changed = json.loads(json.dumps(data))
        if changed["summary"].get("memory_fit"):
            changed["summary"]["memory_fit"]["used_fraction"] = value
            damages[f"used_fraction={value!r}"] = changed
    changed = json.loads(json.dumps(data))
    changed["summary"]["memory_fit"] = "fits"
    damages["memory_fit a string"] = changed
    short = json.loads(json.dumps(data))
    short["data"][0] = short["data"][0][:-3]
    damages["a short record"] = short
    return damages


def test_a_damaged_json_report_never_passes_a_failing_gate(intact, tmp_path):
    data = json.loads(intact["json"].read_text())
    for name, damaged_data in _json_damages(data).items():
        damaged = tmp_path / "d.json"
        damaged.write_text(json.dumps(damaged_data))
        for gate in GATES:
            code = _gate(damaged, gate)
            assert code in (1, 2), (name, gate, code)


def test_a_refused_report_names_the_file_and_the_field(intact, tmp_path):
    data = json.loads(intact["json"].read_text())
    data["summary"]["coverage"] = None
    damaged = tmp_path / "bad.json"
    damaged.write_text(json.dumps(data))
    result = CliRunner().invoke(cli.main, ["check", str(damaged), "--min-coverage", "50"])
    assert result.exit_code == 2
    assert "bad.json" in result.output and "coverage" in result.output
    assert "Traceback" not in result.output


def test_a_report_missing_a_verdict_column_is_exit_2_unless_judged_again(intact, tmp_path):
    data = json.loads(intact["json"].read_text())
    drop = data["columns"].index("t_expected_s")
    data["columns"].pop(drop)
    for row in data["data"]:
        row.pop(drop)
    damaged = tmp_path / "no_time.json"
    damaged.write_text(json.dumps(data))
    result = CliRunner().invoke(
        cli.main, ["check", str(damaged), "--min-coverage", "50", "--trust-unsigned"]
    )
    assert result.exit_code == 2 and "t_expected_s" in result.output
    again = CliRunner().invoke(
        cli.main,
        ["check", str(damaged), "--chip", "v5e", "--min-coverage", "50", "--trust-unsigned"],
    )
    assert again.exit_code == 0, again.output


def test_intact_reports_round_trip_exactly(intact):
    csv_report, json_report = Report.read(intact["csv"]), Report.read(intact["json"])
    assert len(csv_report.ops) == len(json_report.ops) > 0
    for column in ("t_expected_s", "flops", "bytes_accessed"):
        a, b = csv_report.ops[column].to_numpy(), json_report.ops[column].to_numpy()
        assert all(math.isclose(x, y, rel_tol=1e-12) for x, y in zip(a, b, strict=True))


# -- in memory: a value a gate cannot judge is a violation, whatever made the report ------------

_IN_MEMORY = {
    "share NaN": ({"max_memory_share": 0.0}, lambda r: r.ops.__setitem__("share", math.nan)),
    "time NaN": ({"max_memory_share": 0.0}, lambda r: r.ops.__setitem__("t_expected_s", math.nan)),
    "bound empty": ({"select": "fusion", "require": "compute"},
                    lambda r: r.ops.__setitem__("bound", "")),
    "used_fraction NaN": ({"max_hbm": 0.0001},
                          lambda r: r.summary["memory_fit"].__setitem__("used_fraction", math.nan)),
    "exposed NaN": ({"max_exposed_comm": 0.0},
                    lambda r: r.summary.__setitem__("exposed_comm_s", math.nan)),
    "scheduled step NaN": ({"max_exposed_comm": 0.0},
                           lambda r: r.summary.__setitem__("step_expected_s", math.nan)),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(_IN_MEMORY))
def test_a_value_a_gate_cannot_judge_is_a_violation(case):
    import copy

    from hlo_roofline.check import Rules, check

    intact = analyze_hlo(FIXTURES / "fsdp_train_step" / "tpu_v5e.hlo.txt", chip="v5e")
    rules, damage = _IN_MEMORY[case]
    rules = Rules(**rules)
    assert not check(intact, rules).passed  # the gate fails on the intact report
    damaged = copy.deepcopy(intact)
    damage(damaged)
    assert not check(damaged, rules).passed


@pytest.mark.parametrize("column, value", [("hint_reason", "made_up"), ("bound", "fast")])
def test_a_code_the_reader_refuses_is_never_written(tmp_path, column, value):
    """write_tensorboard, to_json and to_csv refuse a code its owner does not list (what the
    reader would refuse), before any file is written; the report as judged writes and reads."""
    report = analyze_hlo(FIXTURES / "mlp_bf16" / "tpu_v5e.hlo.txt", chip="v5e")
    report.write_tensorboard(tmp_path / "good", "run")
    assert len(Report.read(tmp_path / "good" / "run").ops) == len(report.ops)
    ops = report.ops.copy()
    ops.loc[ops.index[0], column] = value
    bad = Report(ops, dict(report.summary), report.module)
    for write in (
        lambda: bad.write_tensorboard(tmp_path / "bad", "run"),
        lambda: bad.to_json(tmp_path / "bad.json"),
        lambda: bad.to_csv(tmp_path / "bad.csv"),
    ):
        with pytest.raises(ReportError, match=f"{column} = '{value}'"):
            write()
    assert not (tmp_path / "bad").exists() and not list(tmp_path.glob("bad.*"))
