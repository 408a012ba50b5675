"""Where the tool reads and writes (issue 40): remote URLs written through their filesystem or
refused, never a local folder named ``gs:``; inputs that are not regular files (FIFOs, devices,
folders) refused at once; gzipped HLO read wherever a file is read; and the remaining tracebacks
(a report without its hint, ``check = 5`` in pyproject.toml, explore's outputs) one-line exit-2
messages."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from hlo_roofline import analyze_hlo, cli
from hlo_roofline._atomic import RemoteUnavailableError, write_atomic
from hlo_roofline.hlo import HloParseError, parse_file
from hlo_roofline.report import Report

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SCAN = FIXTURES / "scan10" / "h100.hlo.txt"
MLP = FIXTURES / "explore" / "mlp.py"


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli.main, [str(a) for a in args])
    assert "Traceback" not in result.output, result.output
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


@pytest.fixture
def in_tmp(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(scope="module")
def report_json(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("r") / "r.json"
    analyze_hlo(SCAN, chip="h100").to_json(path)
    return path


# -- remote outputs ---------------------------------------------------------------------------------


def test_memory_urls_are_written_there_and_read_back(in_tmp):
    fsspec = pytest.importorskip("fsspec")
    code, output = _run("hlo", SCAN, "--chip", "h100", "--json", "memory://i40/x.json",
                        "--csv", "memory://i40/x.csv", "--logdir", "memory://i40/logs",
                        "--plot", "memory://i40/x.png",
                        "--trace-out", "memory://i40/x.trace.json")  # fmt: skip
    assert code == 0, output
    fs = fsspec.filesystem("memory")
    run = "memory://i40/logs/h100.hlo/plugins/hlo_roofline"
    for name in ("x.json", "x.csv", "x.meta.json", "x.png", "x.trace.json"):
        assert fs.exists(f"memory://i40/{name}"), name
    for name in ("report.json", "report.csv", "report.meta.json"):
        assert fs.exists(f"{run}/{name}"), name
    text = fs.cat("memory://i40/x.json").decode()
    csv = fs.cat("memory://i40/x.csv").decode()
    meta = fs.cat("memory://i40/x.meta.json").decode()
    assert Report.from_text(text).summary == Report.from_text(csv, meta).summary
    assert not any(p.name.endswith(":") for p in in_tmp.iterdir()), list(in_tmp.iterdir())


@pytest.mark.parametrize("flag", ["--json", "--csv", "--logdir", "--plot", "--trace-out"])
def test_a_url_without_its_filesystem_is_refused_and_nothing_is_written_locally(in_tmp, flag):
    suffix = {"--json": "x.json", "--csv": "x.csv", "--logdir": "logs", "--plot": "x.png",
              "--trace-out": "x.trace.json"}[flag]  # fmt: skip
    code, output = _run("hlo", SCAN, "--chip", "h100", flag, f"nosuchfs://bucket/{suffix}")
    assert code == 2 and "nosuchfs://" in output, output
    assert list(in_tmp.iterdir()) == []


def test_s3_without_s3fs_names_the_package(in_tmp):
    if importlib.util.find_spec("s3fs") is not None:
        pytest.skip("s3fs is installed here")
    code, output = _run("hlo", SCAN, "--json", "s3://b/x.json", "--logdir", "gs://bucket/logs")
    assert code == 2 and "s3fs" in output, output
    assert not (in_tmp / "s3:").exists() and not (in_tmp / "gs:").exists()


def test_the_writer_refuses_an_unknown_scheme():
    with pytest.raises(RemoteUnavailableError):
        write_atomic("nosuchfs://b/x.json", "{}")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--json", "/proc/x.json"], "/proc/x.json"),
        (["--logdir", "{file}"], "is a file"),
        (["--csv", "{dir}"], "is a directory"),
        (["--logdir", "{file}/sub"], "Not a directory"),
        (["--json", "nosuchfs://b/x.json"], "nosuchfs://"),
    ],
)
def test_explore_outputs_are_checked_before_compiling(in_tmp, args, said):
    (in_tmp / "a_file").write_text("x")
    (in_tmp / "a_dir").mkdir()
    args = [a.format(file=in_tmp / "a_file", dir=in_tmp / "a_dir") for a in args]
    code, output = _run("explore", f"{MLP}:tiny", "--target", "v5e:2x2", "--axes", "data,tensor",
                        *args)  # fmt: skip
    assert code == 2 and said in output, output
    assert "compil" not in output.lower() or "cannot write" in output


def test_reports_at_urls_are_read_there_by_every_command(in_tmp, report_json):
    """check, diff and plot read a report where the tool writes one (a URL through its
    filesystem), never from a local folder named ``memory:`` or ``s3:``; a chart goes there too."""
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    fs.pipe_file("memory://i40in/r.json", report_json.read_bytes())
    decoy = in_tmp / "memory:" / "i40in"  # what a path that folded the URL would have read
    decoy.mkdir(parents=True)
    (decoy / "r.json").write_text("not a report")
    assert _run("check", "memory://i40in/r.json", "--min-coverage", "1")[0] == 0
    assert _run("diff", "memory://i40in/r.json", report_json)[0] == 0
    code, output = _run("plot", "memory://i40in/r.json", "-o", "memory://i40in/r.png")
    assert code == 0 and fs.cat("memory://i40in/r.png")[:4] == b"\x89PNG", output
    code, output = _run("check", "memory://i40in/missing.json", "--min-coverage", "1")
    assert code == 2 and "memory://i40in/missing.json" in output, output
    if importlib.util.find_spec("s3fs") is None:
        code, output = _run("check", "s3://bucket/r.json", "--baseline", "s3://b/x.json")
        assert code == 2 and "s3fs" in output, output


def test_the_compile_cache_is_a_local_folder(in_tmp, monkeypatch, fifo):
    monkeypatch.setenv("HLO_ROOFLINE_CACHE_DIR", "gs://bucket/cache")
    for args in (["cache", "show"], ["cache", "clear"], ["cache", "prune"]):
        code, output = _run(*args)
        assert code == 2 and "local folder, not a URL" in output, (args, output)
    monkeypatch.delenv("HLO_ROOFLINE_CACHE_DIR")
    for args in (["cache", "show", "--dir", fifo], ["cache", "clear", "--dir", "/dev/null"]):
        code, output = _run(*args)
        assert code == 2 and "Not a directory" in output, (args, output)
    assert [p.name for p in in_tmp.iterdir()] == [fifo.name]  # no ./gs: folder


def test_a_stray_summary_beside_a_json_report_is_not_its(tmp_path, report_json):
    """``r.json.meta.json`` beside ``r.json`` (another tool's, or a CSV's named so) does not make
    the JSON report be read as a CSV."""
    path = tmp_path / "r.json"
    path.write_bytes(report_json.read_bytes())
    (tmp_path / "r.json.meta.json").write_text("{}")
    assert Report.read(path).summary["flops"] == Report.read(report_json).summary["flops"]


# -- inputs that are not regular files ------------------------------------------------------------


@pytest.fixture
def fifo(tmp_path) -> Path:
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


def test_a_fifo_is_refused_at_once_everywhere(fifo, report_json):
    for args in (
        ["hlo", fifo],
        ["check", fifo, "--min-coverage", "1"],
        ["check", report_json, "--rules", fifo],
        ["check", report_json, "--baseline", fifo, "--max-regression", "5"],
        ["diff", fifo, report_json],
        ["plot", fifo, "-o", fifo.with_name("x.png")],
    ):
        code, output = _run(*args)
        assert code == 2 and "FIFO" in output, (args, output)


def test_a_device_and_a_folder_are_refused(report_json):
    code, output = _run("hlo", "/dev/zero")
    assert code == 2 and "device" in output, output
    code, output = _run("check", report_json.parent, "--min-coverage", "1")
    assert code == 2, output
    with pytest.raises(HloParseError, match="directory"):
        parse_file(report_json.parent)


# -- gzip -----------------------------------------------------------------------------------------


def test_gzipped_hlo_is_read_as_its_text(tmp_path):
    zipped = tmp_path / "h100.hlo.txt.gz"
    zipped.write_bytes(gzip.compress(SCAN.read_bytes()))
    plain, unzipped = analyze_hlo(SCAN, chip="h100"), analyze_hlo(zipped, chip="h100")
    assert unzipped.summary["flops"] == plain.summary["flops"]
    assert unzipped.summary["step_time_serial_s"] == plain.summary["step_time_serial_s"]
    code, output = _run("hlo", zipped, "--chip", "h100", "--format", "json")
    assert code == 0
    assert Report.from_text(output).summary["flops"] == plain.summary["flops"]


def test_a_committed_gzipped_fixture_is_priced():
    zipped = sorted(FIXTURES.glob("*/*.hlo.txt.gz"))[0]
    code, output = _run("hlo", zipped)
    assert code == 0, output


def test_a_gzipped_dump_and_report_are_read(tmp_path, report_json):
    dump = tmp_path / "dump"
    dump.mkdir()
    name = "module_0000.jit_f.cpu_after_optimizations.txt.gz"
    (dump / name).write_bytes(gzip.compress(SCAN.read_bytes()))
    code, output = _run("hlo", dump)
    assert code == 0 and "gemm_fusion_dot" in output, output
    zipped = tmp_path / "r.json.gz"
    zipped.write_bytes(gzip.compress(report_json.read_bytes()))
    assert Report.read(zipped).summary == Report.read(report_json).summary


def test_damaged_gzip_is_a_message(tmp_path):
    cut = tmp_path / "cut.hlo.txt.gz"
    cut.write_bytes(gzip.compress(SCAN.read_bytes())[:40])
    code, output = _run("hlo", cut)
    assert code == 2 and "gzip" in output, output


# -- the remaining tracebacks ---------------------------------------------------------------------


def test_check_as_a_number_in_pyproject_is_a_message(in_tmp, report_json):
    (in_tmp / "pyproject.toml").write_text("[tool.hlo-roofline]\ncheck = 5\n")
    code, output = _run("check", report_json)
    assert code == 2 and "[tool.hlo-roofline.check] must be a table" in output, output


def test_a_report_without_its_hint_is_gated(tmp_path, report_json):
    data = json.loads(report_json.read_text())
    data.pop("sha256")
    drop = data["columns"].index("hint")
    data["columns"].pop(drop)
    for row in data["data"]:
        row.pop(drop)
    path = tmp_path / "no_hint.json"
    path.write_text(json.dumps(data))
    code, output = _run("check", path, "--require", "compute", "--trust-unsigned")
    assert code == 1 and "require compute" in output, output


def test_what_is_no_regular_file_is_written_into_never_replaced(tmp_path):
    """An output that is a FIFO (or ``/dev/null``, ``/dev/stdout``) is written into as it is:
    renamed over, it became a regular file (root may rename over ``/dev/null``, which a fault
    campaign did: every later ``> /dev/null`` on the machine failed)."""
    import stat
    import threading

    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    read: list[bytes] = []
    reader = threading.Thread(target=lambda: read.append(fifo.read_bytes()))
    reader.start()
    write_atomic(fifo, '{"a": 1}')
    reader.join(timeout=30)
    assert read == [b'{"a": 1}']
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["out.fifo"]  # no temporary left beside it


def test_a_link_is_written_through_to_its_file(tmp_path):
    (tmp_path / "reports").mkdir()
    target = tmp_path / "reports" / "r.json"
    target.write_text("old")
    link = tmp_path / "r.json"
    link.symlink_to(target)
    write_atomic(link, "new")
    assert link.is_symlink() and target.read_text() == "new" and link.read_text() == "new"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_a_device_that_refuses_the_write_says_so_and_stays_a_device():
    """Writing into a device that fails (``/dev/full``: no space) is that error, never a fall
    back to renaming a file over the device."""
    import stat

    with pytest.raises(OSError):
        write_atomic("/dev/full", "{}")
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)
