"""Files the tool writes honour the user's umask (0644 under umask 022), not mkstemp's 0600.

Every writer goes through ``hlo_roofline._atomic.write_atomic``: the report's JSON and CSV
(``Report.to_json``/``to_csv``, the CLI's ``--json``/``--csv``), the TensorBoard files, the HLO
cache and the host's measured rates.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import FIXTURES

from hlo_roofline import analyze_hlo, cli
from hlo_roofline._atomic import write_atomic

HLO = FIXTURES / "mlp_bf16" / "tpu_v5e.hlo.txt"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(params=[0o022, 0o027, 0o077])
def umask(request):
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def test_write_atomic_gives_what_the_umask_allows(tmp_path, umask):
    target = tmp_path / "sub" / "file.txt"
    write_atomic(target, "one")
    write_atomic(target, "two")  # over an existing file: still the umask's mode, new content
    assert target.read_text() == "two"
    assert mode(target) == 0o666 & ~umask
    assert [p.name for p in target.parent.iterdir()] == ["file.txt"]  # no temporary left


def test_report_files_follow_the_umask(tmp_path, umask):
    report = analyze_hlo(HLO, chip="v5e")
    report.to_json(tmp_path / "r.json")
    report.to_csv(tmp_path / "r.csv")
    assert mode(tmp_path / "r.json") == mode(tmp_path / "r.csv") == 0o666 & ~umask
    # TensorBoard may run as another user: its files are 0644 whatever the umask
    directory = report.write_tensorboard(tmp_path / "logs", "run")
    assert {mode(p) for p in directory.iterdir()} == {0o644}


def test_cli_json_and_csv_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        result = CliRunner().invoke(
            cli.main,
            ["hlo", str(HLO), "--chip", "v5e", "--json", str(tmp_path / "r.json"),
             "--csv", str(tmp_path / "r.csv")],
        )  # fmt: skip
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.output
    assert mode(tmp_path / "r.json") == mode(tmp_path / "r.csv") == 0o644


def test_a_failed_write_leaves_nothing(tmp_path):
    with pytest.raises(TypeError):
        write_atomic(tmp_path / "x.txt", object())  # not text: the write fails
    assert list(tmp_path.iterdir()) == []
