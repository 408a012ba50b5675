"""Outputs that cannot be written are one-line messages with exit 2, never a traceback: a file
where a folder should be, ``/proc``, a run name that leaves the logdir. (Tests run as root here,
so a read-only folder would still be writable: the cases use paths no user can write.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from hlo_roofline import cli

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "mlp_bf16" / "tpu_v5e.hlo.txt"


@pytest.fixture
def blocker(tmp_path) -> Path:
    path = tmp_path / "a_file"
    path.write_text("not a folder")
    return path


def _run(*args: str):
    result = CliRunner().invoke(cli.main, list(args))
    assert "Traceback" not in result.output, result.output
    assert not (result.exception and not isinstance(result.exception, SystemExit)), result.exception
    return result


@pytest.mark.parametrize("flag", ["--json", "--csv", "--plot"])
def test_an_unwritable_report_file_is_exit_2(blocker, flag):
    suffix = {"--json": "r.json", "--csv": "r.csv", "--plot": "r.png"}[flag]
    for where in (blocker / suffix, Path("/proc") / suffix):
        result = _run("hlo", str(FIXTURE), "--chip", "v5e", flag, str(where))
        assert result.exit_code == 2, result.output
        assert "cannot write" in result.output and str(where.parent) in result.output


def test_an_unwritable_logdir_or_a_run_outside_it_is_exit_2(blocker, tmp_path):
    result = _run("hlo", str(FIXTURE), "--chip", "v5e", "--logdir", str(blocker / "logs"))
    assert result.exit_code == 2 and "cannot write" in result.output
    outside = _run("hlo", str(FIXTURE), "--chip", "v5e", "--logdir", str(tmp_path / "logs"),
                   "--run", "../../elsewhere")  # fmt: skip
    assert outside.exit_code == 2 and "outside the logdir" in outside.output


def test_plot_to_an_unwritable_path_is_exit_2(blocker, tmp_path):
    report = tmp_path / "r.json"
    assert _run("hlo", str(FIXTURE), "--chip", "v5e", "--json", str(report)).exit_code == 0
    result = _run("plot", str(report), "-o", str(blocker / "chart.png"))
    assert result.exit_code == 2 and "cannot write" in result.output


def test_demo_refuses_an_unwritable_out_before_compiling(blocker):
    done = subprocess.run(
        [sys.executable, "-m", "hlo_roofline.demo", "--out", str(blocker / "demo")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert "cannot write to --out" in done.stderr and "Traceback" not in done.stderr
    assert "compiling for" not in done.stdout
