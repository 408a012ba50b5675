"""Rules files and pyproject tables with wrong value types, or not text at all: a one-line
message naming the file, exit 2, never a traceback (in a rules file and in pyproject.toml)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from hlo_roofline import analyze_hlo, cli

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "mlp_bf16" / "tpu_v5e.hlo.txt"

BAD_RULES = {
    "select a number": b"select = 5\nrequire = 'compute'\n",
    "baseline a list": b"baseline = [1]\nmax-regression = 5\n",
    "coverage a bool": b"min-coverage = true\n",
    "share a string": b"max-memory-share = 'x'\n",
    "not UTF-8": b"\xff\xfe = 1\n",
    "not TOML": b"select = \n",
    "a table where a value belongs": b"[require]\nx = 1\n",
}


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("r") / "r.json"
    analyze_hlo(FIXTURE, chip="v5e").to_json(path)
    return path


@pytest.mark.parametrize("case", sorted(BAD_RULES))
def test_a_bad_rules_file_is_exit_2_naming_it(report, tmp_path, case):
    rules = tmp_path / "rules.toml"
    rules.write_bytes(BAD_RULES[case])
    result = CliRunner().invoke(cli.main, ["check", str(report), "--rules", str(rules)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "rules.toml" in result.output


@pytest.mark.parametrize("case", sorted(BAD_RULES))
def test_a_bad_pyproject_table_is_exit_2_naming_it(report, tmp_path, monkeypatch, case):
    body = BAD_RULES[case]
    if case not in ("not UTF-8", "not TOML"):
        body = b"[tool.hlo-roofline.check]\n" + body.replace(b"[require]", b"[tool.hlo-roofline.check.require]")
    (tmp_path / "pyproject.toml").write_bytes(body)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli.main, ["check", str(report)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "pyproject.toml" in result.output
