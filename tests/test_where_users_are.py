"""Running where users are: the compile cache, one meaning for chip and target, clear errors for
odd calls, and a package that installs cleanly beside any current JAX."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
import zipfile
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from click.testing import CliRunner
from conftest import SLOW

import hlo_roofline
from hlo_roofline import HloParseError, analyze, analyze_hlo, api, cache, cli, wrap_step
from hlo_roofline.testing import assert_roofline

REPO = Path(__file__).resolve().parents[1]
S = jax.ShapeDtypeStruct


def matmul(x, w):
    return jnp.tanh(x @ w)


X = S((128, 256), jnp.bfloat16)
W = S((256, 512), jnp.bfloat16)


@pytest.fixture
def no_compiles(monkeypatch: pytest.MonkeyPatch):
    """Any compile from here on fails the test: what is asked must come from the cache."""

    def refuse(self, *args, **kwargs):
        raise AssertionError("compiled although the step is in the cache")

    monkeypatch.setattr(jax.stages.Lowered, "compile", refuse)


# -- the compile cache ----------------------------------------------------------------------------


def test_a_step_compiled_once_is_read_from_the_cache(tmp_path, monkeypatch):
    first = analyze(matmul, X, W, target="v5e:2x2", cache=tmp_path)
    entries = list(tmp_path.glob("*.hlo.txt"))
    assert len(entries) == 1 and entries[0].read_text().startswith("HloModule ")

    def refuse(self, *args, **kwargs):
        raise AssertionError("compiled although the step is in the cache")

    monkeypatch.setattr(jax.stages.Lowered, "compile", refuse)
    again = analyze(matmul, X, W, target="v5e:2x2", cache=tmp_path)
    assert again.ops.equals(first.ops)
    # Anything that changes the compiled program is another entry: a shape, a target, XLA_FLAGS.
    for changed in (
        lambda: analyze(matmul, S((64, 256), jnp.bfloat16), W, target="v5e:2x2", cache=tmp_path),
        lambda: analyze(matmul, X, W, target="v5p:2x2x1", cache=tmp_path),
        lambda: analyze(matmul, X, W, target="v5e:2x2", cache=False),
    ):
        with pytest.raises(AssertionError, match="compiled although"):
            changed()
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_hlo_as_text")
    with pytest.raises(AssertionError, match="compiled although"):
        analyze(matmul, X, W, target="v5e:2x2", cache=tmp_path)


def test_cache_key_follows_the_compiler_inputs(monkeypatch):
    lowered = jax.jit(matmul).lower(X, W)
    base = cache.key(lowered, None)
    assert cache.key(jax.jit(matmul).lower(X, W), None) == base  # same program, same key
    assert cache.key(lowered, "h100-sxm:1x1x1") != base
    monkeypatch.setenv("LIBTPU_INIT_ARGS", "--xla_tpu_enable_latency_hiding_scheduler=false")
    assert cache.key(lowered, None) != base


def test_default_directory_and_its_override(monkeypatch, tmp_path):
    monkeypatch.delenv(cache.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.default_dir() == tmp_path / "xdg" / "hlo_roofline" / "hlo"
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "mine"))
    assert cache.default_dir() == tmp_path / "mine"
    analyze(matmul, X, W, target="v5e:2x2")  # cache=True: the default directory
    assert len(list((tmp_path / "mine").glob("*.hlo.txt"))) == 1


def test_an_unwritable_cache_only_costs_the_compile(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    report = analyze(matmul, X, W, target="v5e:2x2", cache=blocked / "cache")
    assert report.summary["flops"] > 0


def test_a_broken_entry_is_compiled_again(tmp_path):
    analyze(matmul, X, W, target="v5e:2x2", cache=tmp_path)
    (entry,) = tmp_path.glob("*.hlo.txt")
    entry.write_text("HloMod")  # a truncated file, as a crash might have left without atomic writes
    with pytest.warns(cache.CacheWarning, match="does not match its checksum"):
        report = analyze(matmul, X, W, target="v5e:2x2", cache=tmp_path)
    assert report.summary["flops"] > 0 and entry.read_text().startswith("HloModule ")


PROCESS = textwrap.dedent(
    """
    import sys, jax, jax.numpy as jnp
    from hlo_roofline import analyze
    if sys.argv[1] == "cached":
        def refuse(self, *a, **k):
            raise SystemExit("compiled again")
        jax.stages.Lowered.compile = refuse
    def step(x, w):
        return jnp.tanh(x @ w)
    S = jax.ShapeDtypeStruct
    r = analyze(step, S((128, 256), jnp.bfloat16), S((256, 512), jnp.bfloat16), target="v5e:2x2")
    print(r.summary["flops"])
    """
)


@SLOW
def test_parallel_processes_share_one_entry_and_a_new_process_reuses_it(tmp_path):
    env = {**os.environ, cache.CACHE_ENV: str(tmp_path)}
    script = tmp_path / "step.py"
    script.write_text(PROCESS)
    runs = [
        subprocess.Popen(
            [sys.executable, str(script), "first"], env=env, stdout=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outputs = [run.communicate(timeout=300)[0] for run in runs]
    assert [run.returncode for run in runs] == [0, 0]
    assert len(set(outputs)) == 1
    assert len(list(tmp_path.glob("*.hlo.txt"))) == 1
    assert not list(tmp_path.glob("*.tmp"))
    done = subprocess.run(
        [sys.executable, str(script), "cached"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == outputs[0]


def test_cli_reuses_the_cache_and_no_cache_compiles(tmp_path, monkeypatch):
    steps = tmp_path / "steps.py"
    steps.write_text(
        "import jax, jax.numpy as jnp\n"
        "def example():\n"
        "    S = jax.ShapeDtypeStruct\n"
        "    f = lambda x, w: jnp.tanh(x @ w)\n"
        "    return f, (S((128, 256), jnp.bfloat16), S((256, 512), jnp.bfloat16))\n"
    )
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))
    runner = CliRunner()
    entry = f"{steps}:example"
    first = runner.invoke(cli.main, ["analyze", entry, "--target", "v5e:2x2", "--format", "json"])
    assert first.exit_code == 0, first.output
    calls = []
    real = jax.stages.Lowered.compile
    monkeypatch.setattr(
        jax.stages.Lowered, "compile", lambda self, *a, **k: calls.append(1) or real(self, *a, **k)
    )
    gate = ["check", "--from", entry, "--target", "v5e:2x2", "--min-coverage", "50"]
    assert runner.invoke(cli.main, gate).exit_code == 0
    assert calls == []
    assert runner.invoke(cli.main, [*gate, "--no-cache"]).exit_code == 0
    assert calls == [1]


# -- one meaning for chip and target ---------------------------------------------------------------


def test_roofline_wrapper_compiles_for_the_named_chip_and_runs_here():
    calls = []

    def step(x, w):
        calls.append(1)
        return jnp.tanh(x @ w)

    wrapped = wrap_step(step, chip="v5e")
    x, w = jnp.ones((128, 256), jnp.bfloat16), jnp.ones((256, 512), jnp.bfloat16)
    out = wrapped(x, w)
    assert out.shape == (128, 512) and jax.devices()[0].platform == "cpu"
    report = wrapped.report
    assert report.chip == "v5e" and report.summary["compiled_for"] == "v5e:2x2"
    assert "compile-only" in report.summary["how"]
    assert ":T(" in "".join(report.ops["shape"].astype(str)) or report.summary["flops"] > 0
    assert analyze(step, X, W, chip="v5e").ops["flops"].sum() == report.ops["flops"].sum()
    local = wrap_step(step, target="local")
    local(x, w)
    assert local.report.chip is None and local.report.summary["compiled_for"] == "local"


def test_assert_roofline_infers_the_chip_from_the_target():
    report = assert_roofline(matmul, X, W, target="h100", min_coverage=50)
    assert report.chip == "h100-sxm" and report.summary["compiled_for"] == "h100-sxm:1x1x1"
    with pytest.raises(TypeError, match="chip= or target="):
        assert_roofline(matmul, X, W, min_coverage=50)


def test_judging_against_another_chip_than_compiled_for_warns():
    with pytest.warns(api.JudgedElsewhereWarning, match="compiled for h100-sxm:1x1x1 but judged"):
        report = analyze(matmul, X, W, chip="v5e", target="h100")
    assert report.chip == "v5e" and report.summary["compiled_for"] == "h100-sxm:1x1x1"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        analyze(matmul, X, W, chip="h100", target="h100:1x1x1")  # the same chip: no warning


@pytest.mark.parametrize("chip", [5, 1.5, ["v5e"], object()])
def test_a_chip_of_the_wrong_type_names_what_is_accepted(chip):
    with pytest.raises(TypeError, match="chip must be a chip name such as 'v5e'"):
        analyze(matmul, X, W, chip=chip)


def test_unknown_chip_and_target_names():
    with pytest.raises(hlo_roofline.chips.UnknownChipError, match="v5e"):
        analyze(matmul, X, W, chip="v5")
    with pytest.raises(TypeError, match="target must be a string"):
        analyze(matmul, X, W, target=5)
    with pytest.raises(TypeError, match="expected a function"):
        analyze("matmul", X, W)


# -- bad input in the project's words -------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "   ", "hello", "x = f32[] add(a, b)"])
def test_text_that_is_not_hlo_is_a_parse_error(text, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # "" must never be taken for the current directory
    (tmp_path / "a_after_optimizations.txt").write_text("HloModule m\nENTRY e {\n}\n")
    with pytest.raises(HloParseError):
        analyze_hlo(text)


def test_hlo_before_optimization_warns_that_it_is_before_fusion():
    text = jax.jit(matmul).lower(X, W).as_text(dialect="hlo")
    with pytest.warns(api.UnoptimizedHloWarning, match="before fusion"):
        analyze_hlo(text)
    optimized = jax.jit(matmul).lower(X, W).compile().as_text()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        analyze_hlo(optimized)


def test_cli_explains_the_factory_form_for_a_step_that_needs_arguments(tmp_path):
    steps = tmp_path / "steps.py"
    steps.write_text("def train_step(params, batch):\n    return params\n")
    result = CliRunner().invoke(cli.main, ["analyze", f"{steps}:train_step"])
    assert result.exit_code == 2
    assert "needs arguments (params, batch)" in result.output
    assert "return train_step, (params, batch)" in result.output
    assert "Traceback" not in result.output


# The warning is this test's subject: shown as a user sees it (the suite makes it an error).
@pytest.mark.filterwarnings("default::hlo_roofline.api.UnoptimizedHloWarning")
def test_cli_prints_warnings_as_messages(tmp_path):
    path = tmp_path / "pre.hlo.txt"
    path.write_text(jax.jit(matmul).lower(X, W).as_text(dialect="hlo"))
    result = CliRunner().invoke(cli.main, ["hlo", str(path)])
    assert result.exit_code == 0
    assert "warning: module 'jit_matmul' looks unoptimized" in result.output
    assert "UnoptimizedHloWarning" not in result.output


# -- packaging ------------------------------------------------------------------------------------


@SLOW
def test_the_wheel_builds_without_deprecations_and_carries_its_data(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path), str(REPO)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    log = done.stdout + done.stderr
    assert "Deprecat" not in log and "BuildBackendWarning" not in log, log[-3000:]
    (wheel,) = tmp_path.glob("hlo_roofline-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "hlo_roofline/data/chips.toml" in names
    assert {"hlo_roofline/data/gpu/h100-sxm.txtpb", "hlo_roofline/cache.py"} <= names
    modules = {p.relative_to(REPO).as_posix() for p in (REPO / "hlo_roofline").rglob("*.py")}
    assert modules <= names, sorted(modules - names)  # every subpackage is listed in pyproject
    assert any(n.startswith("hlo_roofline_tensorboard/static/") for n in names)
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    requires = [
        line
        for line in zipfile.ZipFile(wheel).read(metadata).decode().splitlines()
        if line.startswith("Requires-Dist: jax")
    ]
    assert "Requires-Dist: jax>=0.10.2" in requires
    assert not [r for r in requires if "jax[tpu]" in r]  # [tpu] is libtpu alone: test_install.py
    assert 'Requires-Dist: jax[cuda13-local]>=0.10.2; extra == "gpu"' in requires
    assert not [r for r in requires if "==" in r.partition(";")[0]]  # no pin on any jax
