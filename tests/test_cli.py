"""The `hlo-roofline` command, in-process (click's CliRunner) and as a real subprocess.

Real reports: the steps of docs/cli.md (a bf16 8192x8192 matmul at batch 1024 and 64, an
elementwise step), compiled compile-only for TPU v5e once per module. Every example in docs/cli.md
and in each command's --help runs here, from a directory holding those steps and the fixtures.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import FIXTURES, ROOT

from hlo_roofline import chips, cli
from hlo_roofline.cli import _common as cli_common
from hlo_roofline.report import Report, ReportError

DOCS = ROOT / "docs" / "cli.md"
BIN = Path(sys.executable).parent / "hlo-roofline"
EXAMPLE = re.compile(r"^\s*\$ hlo-roofline (?P<args>.+?)(?:\s+#\s*exit (?P<code>\d))?\s*$")
COMMANDS = ("chips", "hlo", "analyze", "check", "diff", "plot", "cache")  # files made by one feed the next


def doc_blocks() -> list[tuple[str, str]]:
    """(language, text) of each fenced block of docs/cli.md, in order."""
    return re.findall(r"```(\w+)\n(.*?)```", DOCS.read_text(), re.S)


def examples(text: str) -> list[tuple[list[str], int]]:
    """(argv, expected exit code) of every ``$ hlo-roofline ...  # exit N`` line."""
    found = []
    for line in text.splitlines():
        if m := EXAMPLE.match(line):
            found.append((shlex.split(m["args"]), int(m["code"] or 0)))
    return found


def invoke(*args: str, code: int | None = 0):
    result = CliRunner().invoke(cli.main, list(args), prog_name="hlo-roofline")
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    if code is not None:
        assert result.exit_code == code, f"{args}: exit {result.exit_code}\n{result.output}"
    return result


def assert_one_line_error(output: str, fragment: str) -> None:
    assert "Traceback" not in output, output
    errors = [line for line in output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, output
    assert fragment in errors[0], errors[0]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A directory with docs/cli.md's steps.py, the fixtures, and three compiled reports."""
    directory = tmp_path_factory.mktemp("cli")
    language, steps = doc_blocks()[0]
    assert language == "python" and steps.startswith("# steps.py\n")
    (directory / "steps.py").write_text(steps)
    (directory / "fixtures").symlink_to(FIXTURES)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(directory)
        # The examples include `hlo-roofline cache clear`: they get a cache of their own, never
        # the developer's.
        patch.setenv("HLO_ROOFLINE_CACHE_DIR", str(directory / "hlo-cache"))
        for name, out in (
            ("matmul_step", "large.json"),
            ("small_matmul_step", "small.json"),
            ("elementwise_step", "elementwise.json"),
        ):
            invoke("analyze", f"steps.py:{name}", "--chip", "v5e", "--json", out)
        yield directory


# -- analyze, hlo, chips, plot ---------------------------------------------------------------------


def test_analyze_prints_the_op_table_and_summary(workdir):
    output = invoke("analyze", "steps.py:matmul_step", "--chip", "v5e", "--top", "3").output
    assert re.split(r"\s{2,}", output.splitlines()[0]) == [
        "op", "opcode", "bound", "time ≥", "time ≈", "share", "FLOP/B", "ridge", "ridge M",
        "user line",
        "op_name", "hint",
    ]  # fmt: skip
    first = output.splitlines()[2]
    top = Report.read(workdir / "large.json").top(1).iloc[0]  # the same step, analyzed for v5e
    # its ridge: the bf16 peak over the bandwidth its bytes move at (some sit in VMEM on a TPU)
    peak = chips.get("v5e").peak_flops("bf16")
    assert top.critical_intensity == pytest.approx(peak * top.t_memory_s / top.bytes_accessed)
    assert " compute " in first and "819" in first and f" {top.critical_intensity:.0f} " in first
    assert "compute-bound at M=1024; ridge at M≈" in first and top.hint in first
    assert top.hint_reason == "ridge_m" and f" {top.ridge_m:.0f}  " in first  # the ridge M column
    assert " steps.py:9 (matmul) " in first  # the user's line, relative to the working directory
    for text in ("step time: ≥", "no overlap)", "MFU bound: ≤", "time per bound: compute 100.0%",
                 "coverage: 100.0%", "compiled for: v5e:2x2", "chip: TPU v5e (v5e, vendor)"):  # fmt: skip
        assert text in output


def test_analyze_data_formats_are_whole_reports(workdir):
    data = json.loads(invoke("analyze", "steps.py:small_matmul_step", "--chip", "v5e",
                             "--format", "json").stdout)  # fmt: skip
    report = Report.from_dict(data)
    assert report.chip == "v5e" and report.summary["time_share"]["memory"] == pytest.approx(1)
    csv = invoke("analyze", "steps.py:small_matmul_step", "--chip", "v5e", "--format", "csv")
    (workdir / "piped.csv").write_text(csv.stdout)
    piped = pd.read_csv(workdir / "piped.csv")  # a plain CSV: the report's columns, no metadata
    assert list(piped.columns) == list(report.ops.columns) and len(piped) == len(report.ops)
    assert piped["flops"].sum() == pytest.approx(report.ops["flops"].sum())
    with pytest.raises(ReportError, match=r"piped\.meta\.json"):  # its summary is not in it
        Report.read(workdir / "piped.csv")
    invoke("analyze", "steps.py:small_matmul_step", "--chip", "v5e", "--csv", "saved.csv")
    assert Report.read(workdir / "saved.csv").summary == report.summary  # --csv writes both


def test_analyze_writes_every_output(workdir):
    result = invoke(
        "analyze", "steps.py:elementwise_step", "--chip", "v5e", "--csv", "out/e.csv",
        "--json", "out/e.json", "--logdir", "runs", "--run", "ew", "--plot", "out/e.png",
    )  # fmt: skip
    for path in ("out/e.csv", "out/e.json", "out/e.png"):
        assert (workdir / path).stat().st_size > 0
        assert f"wrote {path}" in result.stderr
    assert Report.read(workdir / "runs" / "ew").summary == Report.read("out/e.csv").summary


def test_analyze_without_a_chip_reports_flops_and_bytes(workdir):
    output = invoke("analyze", "steps.py:elementwise_step").output
    assert re.split(r"\s{2,}", output.splitlines()[0].strip()) == [
        "op",
        "opcode",
        "FLOPs",
        "bytes",
        "FLOP/B",
        "user line",
        "op_name",
    ]
    assert "chip: none (pass --chip" in output and "compiled for: local" in output


def test_hlo_dump_directory(workdir, tmp_path):
    dump = tmp_path / "dump"
    dump.mkdir()
    programs = ["mlp_bf16", "attention", "convnet", "scan10", "reductions"]
    for i, program in enumerate(programs):
        target = dump / f"module_{i:04d}.jit_{program}.tpu_after_optimizations.txt"
        shutil.copy(FIXTURES / program / "tpu_v5e.hlo.txt", target)
    (dump / "module_0000.jit_mlp_bf16.before_optimizations.txt").write_text("not optimized")
    result = invoke(
        "hlo", str(dump), "--chip", "v5e", "--top", "2", "--json", str(tmp_path / "r.json")
    )
    overview = result.stdout.split("\n\n")[0].splitlines()
    assert overview[0].split()[:2] == ["module", "ops"] and len(overview) == 2 + len(programs)
    assert result.stdout.count("\n== module_") == len(programs)
    written = sorted(p.name for p in tmp_path.glob("r.*.json"))
    assert written == sorted(f"r.module_{i:04d}.jit_{p}.tpu.json" for i, p in enumerate(programs))
    one = invoke("hlo", str(dump), "--chip", "v5e", "--module", "scan10", "--format", "json")
    assert Report.from_dict(json.loads(one.stdout)).chip == "v5e"
    many = json.loads(invoke("hlo", str(dump), "--format", "json").stdout)
    assert len(many) == len(programs)


def test_chips_list_and_show(workdir):
    listing = invoke("chips").stdout.splitlines()
    assert listing[0].split() == ["key", "name", "bf16", "FLOP/s", "HBM", "B/s", "ridge", "FLOP/B"]
    v5e = next(line for line in listing if line.startswith("v5e "))
    assert "1.97e+14" in v5e and "8.19e+11" in v5e and v5e.endswith("241")
    shown = invoke("chips", "TPU v5 lite").stdout
    assert shown.startswith("TPU v5e (v5e;")
    assert re.search(r"^hbm\.bandwidth\s+8\.19e\+11\s+GCP-v5e", shown, re.M)
    assert "GCP-v5e: Google Cloud TPU v5e" in shown and "https://" in shown
    data = json.loads(invoke("chips", "v5e", "--format", "json").stdout)
    assert any(n["field"] == "flops.bf16" for n in data["numbers"]) and "GCP-v5e" in data["sources"]


def test_plot_png_and_svg(workdir):
    invoke("plot", "large.json", "-o", "chart.png")
    assert (workdir / "chart.png").read_bytes()[:4] == b"\x89PNG"
    invoke("plot", "large.json", "-o", "chart.svg", "--chip", "h100", "--title", "t")
    assert "<svg" in (workdir / "chart.svg").read_text()


# -- check -----------------------------------------------------------------------------------------


def test_elementwise_step_fails_require_compute_with_a_table(workdir):
    result = invoke("check", "elementwise.json", "--require", "compute", code=1)
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["rule", "op", "opcode", "bound", "share", "detail"]
    assert re.match(r"require compute\s+\S*fusion\S*\s+fusion\s+memory\s+100\.0%", lines[2])
    assert "failed: 1 violation(s) of require=compute" in result.stdout


def test_large_matmul_passes_require_compute(workdir):
    result = invoke("check", "large.json", "--select", "dot_general", "--require", "compute")
    assert result.stdout.startswith("passed: select=dot_general, require=compute (1 ops selected)")
    invoke("check", "small.json", "--select", "dot_general", "--require", "compute", code=1)


def test_check_selects_by_the_users_line(workdir):
    """``x @ w`` is steps.py line 9, in matmul(): --select finds its op by that line."""
    result = invoke("check", "large.json", "--select", r"steps\.py:9 ", "--require", "compute")
    assert "(1 ops selected)" in result.stdout
    invoke("check", "large.json", "--select", r"steps\.py:13 ", code=1)  # no op: a violation


def test_op_table_fits_the_width_by_cutting_the_middle():
    where = "/home/me/project/src/models/transformer.py:123 (Block.__call__)"
    assert cli.shorten_path(where, 80) == where
    assert cli.shorten_path(where, 45) == "/home/me…/transformer.py:123 (Block.__call__)"
    short = cli.shorten_path(where, 30)
    assert len(short) == 30 and short.startswith("…/transformer.py:123 (")
    op_name = "jit(train_step)/transpose(jvp())/while/body/closed_call/attention/qkv/dot_general"
    cut = cli.cut_middle(op_name, 40)
    assert len(cut) == 40 and cut.endswith("attention/qkv/dot_general") and "…" in cut


def test_check_from_a_step_and_other_chips(workdir):
    invoke("check", "--from", "steps.py:matmul_step", "--chip", "v5e", "--select", "dot",
           "--require", "compute")  # fmt: skip
    # re-judged against v6e (ridge 560 FLOP/B): 819 FLOP/B stays compute-bound, 63 does not
    invoke("check", "large.json", "--chip", "v6e", "--min-share", "50", "--require", "compute")
    invoke("check", "small.json", "--chip", "v6e", "--min-share", "50", "--require", "compute",
           code=1)  # fmt: skip


def test_baseline_regression_fails_the_gate(workdir):
    result = invoke("check", "large.json", "--baseline", "small.json", "--max-regression", "10",
                    code=1)  # fmt: skip
    assert re.search(r"max-regression\s+\(step\).*\(\+2\d\d\.\d%, max \+10%\)", result.stdout)
    assert "flipped: +" in result.stdout and "memory → compute" in result.stdout
    invoke("check", "small.json", "--baseline", "large.json", "--max-regression", "0")


def test_rules_file_and_pyproject(workdir, tmp_path, monkeypatch):
    rules = tmp_path / "gate.toml"
    rules.write_text('max-memory-share = 50\nbaseline = "base.json"\nmax-regression = 10\n')
    shutil.copy(workdir / "small.json", tmp_path / "base.json")  # baseline relative to the file
    result = invoke("check", "large.json", "--rules", str(rules), code=1)
    rules_broken = {line.split()[0] for line in result.stdout.splitlines()[2:] if line.strip()}
    assert rules_broken == {"max-regression", "failed:"}  # large.json is compute-bound
    invoke("check", "large.json", "--rules", str(rules), "--max-regression", "400")  # flag wins
    project = tmp_path / "project"
    (project / "sub").mkdir(parents=True)
    (project / "pyproject.toml").write_text('[tool.hlo-roofline.check]\nrequire = "compute"\n')
    monkeypatch.chdir(project / "sub")
    result = invoke("check", str(workdir / "elementwise.json"), code=1)
    assert f"rules from {project / 'pyproject.toml'}" in result.stderr
    invoke("check", str(workdir / "elementwise.json"), "--require", "memory")


def test_max_exposed_comm_gate_and_summary(workdir):
    hlo = "fixtures/fsdp_train_step/h100.hlo.txt"
    output = invoke("hlo", hlo, "--chip", "h100", "--json", "fsdp.json").output
    assert "step time expected, as scheduled: " in output and "exposed" in output
    share = Report.read(workdir / "fsdp.json").summary["exposed_comm_share"] * 100
    result = invoke("check", "fsdp.json", "--max-exposed-comm", f"{share - 1:.1f}", code=1)
    assert re.search(r"max-exposed-comm\s+\(step\)\s+communication", result.stdout)
    invoke("check", "fsdp.json", "--max-exposed-comm", f"{share + 1:.1f}")
    invoke("check", "fsdp.json", "--max-exposed-comm", "101", code=2)


def test_check_json_output(workdir):
    result = invoke("check", "elementwise.json", "--require", "compute", "--format", "json", code=1)
    data = json.loads(result.stdout)
    assert data["passed"] is False and data["violations"][0]["rule"] == "require compute"


# -- diff ------------------------------------------------------------------------------------------


def test_diff_of_two_batch_sizes_reports_the_flip(workdir):
    output = invoke("diff", "small.json", "large.json").stdout
    lines = output.splitlines()
    assert re.match(r"step: \S+ µs → \S+ µs \(\+2\d\d\.\d%\) on v5e", lines[0])
    assert lines[1].startswith("flipped bound: 1  added: 0  removed: 0")
    flip = next(line for line in lines[3:] if line.startswith("flipped "))
    assert "memory → compute" in flip and "jit(matmul)/dot_general" in flip
    data = json.loads(invoke("diff", "large.json", "small.json", "--format", "json").stdout)
    assert data["flipped"] == 1 and data["step_change"] < -0.5
    (flipped,) = [op for op in data["ops"] if op["change"] == "flipped"]
    assert (flipped["bound_a"], flipped["bound_b"]) == ("compute", "memory")


def test_diff_fail_on_regression(workdir):
    result = invoke("diff", "small.json", "large.json", "--fail-on-regression", "5", code=1)
    assert "failed: predicted step regressed more than 5%" in result.output
    invoke("diff", "large.json", "small.json", "--fail-on-regression", "5")
    csv = invoke("diff", "small.json", "large.json", "--format", "csv").stdout
    assert csv.splitlines()[0].startswith("change,name_a,name_b,opcode")


# -- bad input: exit 2, one line, no traceback -----------------------------------------------------

BAD_FILES = {
    "broken.py": "import jax\n\nx = 1 / 0\n",
    "syntax.py": "def f(:\n",
    "badreturn.py": "def f():\n    return 42\n",
    "badstep.py": (
        "import jax\nimport jax.numpy as jnp\n\n\ndef step(x, w):\n    return x @ w\n\n\n"
        "def f():\n    s = jax.ShapeDtypeStruct((4, 3), jnp.float32)\n    return step, (s, s)\n"
    ),
    "corrupt.json": '{"format": "hlo_roofline.report", "version": 1, "columns": ["name"]',
    "bad.hlo": "HloModule m\nENTRY %e (x: f32[2]) -> f32[2] {\n  %x = f32[2]{0} parameter(0)\n"
    "  ROOT %y = f32[2]{0} add(%x, %q\n}\n",
    "unknown_rule.toml": 'requre = "compute"\n',
    "empty_dump/readme.txt": "no modules here\n",
}
BAD_INPUT = [
    (["analyze", "missing.py:f"], "no such file: missing.py"),
    (["analyze", "steps.py"], "is not FILE.py:NAME"),
    (["analyze", "empty_dump"], "empty_dump is a directory: use `hlo-roofline hlo empty_dump`"),
    (["analyze", "empty_dump:f"], "empty_dump is a directory, not a Python file"),
    (["analyze", "no_such_package.steps:f"], "cannot import no_such_package.steps: ModuleNotFoundError"),
    (["analyze", "steps.py:f-g"], "is not FILE.py:NAME or package.module:NAME"),
    (["explore", "steps.py:f-g", "--target", "v5e:2x2"], "is not FILE.py:NAME or package.module:NAME"),
    (["analyze", "steps.py:matmul_stp"], "steps.py has no 'matmul_stp'; did you mean matmul_step"),
    (["analyze", "steps.py:matmul"], "steps.py:matmul needs arguments (x, w)"),
    (["analyze", "broken.py:f"], "cannot import broken.py: ZeroDivisionError: division by zero (broken.py:3)"),
    (["analyze", "syntax.py:f"], "cannot import syntax.py: SyntaxError"),
    (["analyze", "badreturn.py:f"], "must return (step, args) or (step, args, jit_kwargs), not int"),
    (["analyze", "badstep.py:f", "--chip", "v5e"], "compiling badstep.py:f failed: TypeError"),
    (["analyze", "steps.py:matmul_step", "--chip", "v5x"], "Close matches: 7x, v5p, v5e"),
    (["analyze", "steps.py:matmul_step", "--target", "v5x:2x2"], "v5p, v5e? Known targets"),
    (["analyze", "steps.py:matmul_step", "--run", "r"], "--run needs --logdir"),
    (["analyze", "steps.py:matmul_step", "--plot", "x.pdf"], "must end in .png or .svg"),
    (["hlo", "bad.hlo"], "bad.hlo:4:33: missing ')'"),
    (["hlo", "nothere.hlo"], "does not exist"),
    (["hlo", "empty_dump"], "no '*after_optimizations.txt' files under empty_dump"),
    (["hlo", "fixtures/mlp_bf16/tpu_v5e.hlo.txt", "--plot", "x.png"], "--plot needs a chip"),
    (["hlo", "fixtures/mlp_bf16/tpu_v5e.hlo.txt", "--chip", "tpu v9"], "unknown chip 'tpu v9'"),
    (["chips", "v5x"], "Close matches: 7x, v5p, v5e"),
    (["check", "large.json", "--select", "dot(", "--require", "compute"], "bad regex 'dot('"),
    (["check", "missing.json", "--require", "compute"], "cannot read report missing.json"),
    (["check", "corrupt.json", "--require", "compute"], "corrupt.json is not a readable hlo_roofline report"),
    (["check", "fixtures/manifest.json", "--require", "compute"], "not an hlo_roofline report"),
    (["check", "large.json"], "no rules"),
    (["check", "--require", "compute"], "give a REPORT or --from FILE.py:NAME (exactly one)"),
    (["check", "large.json", "--target", "v5e", "--require", "compute"], "--target compiles a step"),
    (["check", "large.json", "--baseline", "small.json"], "max-regression and baseline go together"),
    (["check", "large.json", "--require", "fast"], "'fast' is not one of"),
    (["check", "large.json", "--min-share", "150"], "min-share must be a percent in [0, 100], not 150"),
    (["check", "large.json", "--rules", "unknown_rule.toml"], "unknown rule 'requre' (did you mean require?)"),
    (["check", "large.json", "--baseline", "missing.json", "--max-regression", "5"], "cannot read report missing.json"),
    (["check", "--from", "steps.py:elementwise_step", "--require", "compute"], "not classified against a chip"),
    (["diff", "small.json", "missing.json"], "does not exist"),
    (["plot", "large.json"], "Missing option '-o'"),
]  # fmt: skip


@pytest.fixture(scope="module")
def bad_files(workdir):
    for name, text in BAD_FILES.items():
        (workdir / name).parent.mkdir(exist_ok=True)
        (workdir / name).write_text(text)
    return workdir


@pytest.mark.parametrize(("args", "message"), BAD_INPUT, ids=lambda v: " ".join(v)[:40])
def test_bad_input_exits_2_with_one_line(bad_files, args, message):
    result = invoke(*args, code=2)
    assert_one_line_error(result.output, message)


def test_analyze_takes_a_module_step_as_explore_does(workdir, monkeypatch):
    """``package.module:NAME`` names a step as ``FILE.py:NAME`` does (``hlo_roofline.entries``,
    one reader for every command): the same report as the file's."""
    monkeypatch.syspath_prepend(str(workdir))
    monkeypatch.delitem(sys.modules, "steps", raising=False)
    by_module = invoke("analyze", "steps:small_matmul_step", "--format", "json").stdout
    by_file = invoke("analyze", "steps.py:small_matmul_step", "--format", "json").stdout
    assert json.loads(by_module)["summary"]["flops"] == json.loads(by_file)["summary"]["flops"] > 0


# -- every documented example runs -----------------------------------------------------------------


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_examples_run(workdir, command):
    args = [command] if command else []
    text = invoke(*args, "--help").stdout
    found = examples(text)
    assert found, f"no example in `hlo-roofline {command or ''} --help`"
    for argv, code in found:
        invoke(*argv, code=code)


def test_docs_examples_run(workdir):
    """Blocks of docs/cli.md in order: files are written, `$ hlo-roofline` lines run."""
    ran = 0
    written = []
    try:
        for language, text in doc_blocks():
            if language in ("python", "toml"):
                name = text.splitlines()[0].removeprefix("# ").strip()
                if (
                    name == "steps.py"
                ):  # written by the fixture; unchanged, so compiled steps are reused
                    assert (workdir / name).read_text() == text
                    continue
                (workdir / name).write_text(text)
                written.append(workdir / name)
                if name.startswith("test_"):
                    run_pytest_example(workdir / name)
            for argv, code in examples(text):
                invoke(*argv, code=code)
                ran += 1
    finally:
        for path in written:
            path.unlink()
    assert ran >= 20


def run_pytest_example(path: Path) -> None:
    """Call each test function of a documented test file, with `steps` the CLI already loaded."""
    namespace: dict = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "steps", cli_common._import_file(path.parent / "steps.py"))
        exec(compile(path.read_text(), str(path), "exec"), namespace)
    tests = [f for name, f in namespace.items() if name.startswith("test_")]
    assert tests
    for test in tests:
        test()


# -- as a real subprocess --------------------------------------------------------------------------


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    assert BIN.exists(), f"{BIN} missing: run .venv/bin/pip install -e {ROOT}"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    return subprocess.run(
        [str(BIN), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize(
    ("args", "code", "expected"),
    [
        (["check", "large.json", "--select", "dot_general", "--require", "compute"], 0, "passed"),
        (["check", "elementwise.json", "--require", "compute"], 1, "require compute"),
        (["check", "large.json", "--baseline", "small.json", "--max-regression", "10"], 1,
         "max-regression"),
        (["diff", "small.json", "large.json", "--fail-on-regression", "5"], 1, "flipped"),
        (["hlo", "bad.hlo"], 2, "Error: bad.hlo:4:33: missing ')'"),
        (["analyze", "broken.py:f"], 2, "Error: cannot import broken.py: ZeroDivisionError"),
    ],
)  # fmt: skip
def test_subprocess_exit_codes(bad_files, args, code, expected):
    proc = run_cli(*args, cwd=bad_files)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert expected in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr


def test_subprocess_analyze_pipes_clean_json(workdir):
    proc = run_cli("analyze", "steps.py:elementwise_step", "--chip", "v5e", "--format", "json",
                   cwd=workdir)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    report = Report.from_dict(json.loads(proc.stdout))
    assert report.summary["compiled_for"] == "v5e:2x2" and report.chip == "v5e"


def test_jax_persistent_cache_noise_is_not_echoed_as_ours(workdir, tmp_path):
    """JAX warns when its own compilation cache cannot be read; the CLI does not pass that on as
    a `warning:` of its own."""
    blocked = tmp_path / "a_file"
    blocked.write_text("")
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": str(ROOT),
        "JAX_COMPILATION_CACHE_DIR": str(blocked / "cache"),  # under a file: unusable
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
        "HLO_ROOFLINE_CACHE_DIR": str(tmp_path / "hlo"),
    }
    proc = subprocess.run(
        [sys.executable, "-c", "from hlo_roofline.cli import main; main()", "analyze",
         "steps.py:elementwise_step", "--target", "local", "--format", "json"],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "compilation cache" not in proc.stderr, proc.stderr
    assert json.loads(proc.stdout)["summary"]["flops"] > 0


# -- measured runs ---------------------------------------------------------------------------------

MEASURED_STEP = """
import jax.numpy as jnp

def step():
    def f(a, b):
        return jnp.tanh(a @ b) * 2
    return f, (jnp.ones((256, 256)), jnp.ones((256, 256)))
"""


def test_analyze_measure_runs_the_step_and_shows_measured_times(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run_step.py").write_text(MEASURED_STEP)
    output = invoke(
        "analyze", "run_step.py:step", "--measure", "--steps", "2", "--chip", "host"
    ).output
    header = output.splitlines()[0].split()
    assert {"measured", "eff."} <= set(header)
    assert "measured step:" in output and "compiled for: local" in output
    result = invoke("analyze", "run_step.py:step", "--measure", "--target", "v5e:2x2", code=2)
    assert_one_line_error(result.output, "cannot use --target")


def test_trace_command_reads_an_existing_profile(tmp_path):
    import jax.numpy as jnp

    from hlo_roofline import measure

    logdir = tmp_path / "logs"
    x = jnp.ones((128, 128))
    measure(lambda a: jnp.tanh(a @ a), x, steps=2, warmup=1, chip="host", logdir=logdir)
    output = invoke("trace", str(logdir), "--chip", "host").output
    assert "measured step:" in output and "measured" in output.splitlines()[0]
    (tmp_path / "empty").mkdir()
    result = invoke("trace", str(tmp_path / "empty"), code=2)
    assert_one_line_error(result.output, "xplane")
