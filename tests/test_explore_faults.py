"""The explorer under faults, as a user meets them: a candidate that raises, runs out of host
memory, kills its worker (as the OOM killer does) once or every time, or hangs; a parent killed
while its workers compile; a script without a ``__main__`` guard; a mistyped knob, entry, axis or
number. Each is a row with its status and traceback (never a healthy candidate lost with it), an
exit code, or a one-line error before anything compiles; and a gate over an exploration that lacks
answers fails.

One tiny layout (v5e:2x2, data 4) and the MLP of fixtures/explore/mlp.py: the faults strike before
the compile, and the healthy candidates share one cache entry.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import FIXTURES, ROOT

from hlo_roofline import check as gate
from hlo_roofline import cli, explorer
from hlo_roofline.cli import explore as cli_explore
from hlo_roofline.explorer.run import _empty_table
from hlo_roofline.explorer.step import _parameters_of, make_step_reference

MLP = FIXTURES / "explore" / "mlp.py"
TARGET = "v5e:2x2"
AXES = ("data", "tensor")
ONE_LAYOUT = {"fixed": {"data": 4}}

# make_step with a fault per knob value; FAULT_DIR holds the marker of a fault that strikes once.
FAULTY = textwrap.dedent(f'''
    import os, signal, sys, time
    sys.path.insert(0, {str(MLP.parent)!r})
    from mlp import make_mlp_step

    def make_step(mesh, fault: str = "none", batch: int = 64):
        if fault == "raise":
            raise ValueError("injected: the user's own bug")
        if fault == "memory":
            raise MemoryError("injected")
        if fault == "exit":
            sys.exit(3)
        if fault == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if fault == "kill_once":
            marker = os.path.join(os.environ["FAULT_DIR"], "killed_once")
            if not os.path.exists(marker):
                open(marker, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
        if fault == "hang":
            time.sleep(3600)
        if fault == "refuse":
            from hlo_roofline.explorer import Refused
            raise Refused("heads do not split that way")
        return make_mlp_step(mesh, batch=batch, d=128, f=256, layers=1)
''')


@pytest.fixture(scope="module")
def faulty(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("faulty")
    (folder / "faulty.py").write_text(FAULTY)
    return folder / "faulty.py"


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("faults-cache")


@pytest.fixture(scope="module")
def faults(faulty, cache, tmp_path_factory):
    """Every fault at once on a pool of 2 workers, with a 30 s time-out."""
    marker_dir = tmp_path_factory.mktemp("markers")
    os.environ["FAULT_DIR"] = str(marker_dir)
    try:
        result = explorer.explore(
            f"{faulty}:make_step", TARGET, axes=AXES, constraints=ONE_LAYOUT, jobs=2, cache=cache,
            knobs={"fault": ["none", "raise", "memory", "kill", "kill_once", "hang", "refuse", "exit"]},
            timeout=30, progress=False,
        )  # fmt: skip
    finally:
        del os.environ["FAULT_DIR"]
    return result


def _row(result, fault: str) -> pd.Series:
    return result.table[result.table["fault"] == fault].iloc[0]


def test_each_fault_is_its_own_row(faults):
    """Before: one killed worker failed every pending candidate (BrokenProcessPool), a hang hung
    explore, and every error read "compile error" without a traceback. Now each fault is its own
    row and the healthy candidates compile."""
    assert _row(faults, "none")["status"] == "ok" and _row(faults, "none")["rank"] == 1
    raised = _row(faults, "raise")
    assert raised["status"] == explorer.STATUS_ERROR
    assert raised["error"] == "ValueError: injected: the user's own bug"
    assert 'raise ValueError("injected' in raised["traceback"]  # the user's line, in the row
    exited = _row(faults, "exit")  # sys.exit() in make_step: its error, the worker lives on
    assert exited["status"] == explorer.STATUS_ERROR and exited["error"] == "SystemExit: 3"
    memory = _row(faults, "memory")
    assert memory["status"] == explorer.STATUS_CRASHED
    assert "MemoryError" in memory["error"] and "again on a fresh worker" in memory["error"]
    killed = _row(faults, "kill")  # retried once on a fresh worker, killed again
    assert killed["status"] == explorer.STATUS_CRASHED
    assert "died twice (killed by SIGKILL)" in killed["error"]
    once = _row(faults, "kill_once")  # killed on its first worker, compiled on the second
    assert once["status"] == "ok" and once["step_s"] == _row(faults, "none")["step_s"]
    hung = _row(faults, "hang")
    assert hung["status"] == explorer.STATUS_TIMED_OUT and "30 s" in hung["error"]
    refused = _row(faults, "refuse")  # a result, not a failure, and no fake step time
    assert refused["status"] == explorer.STATUS_REFUSED and pd.isna(refused["step_s"])
    assert pd.isna(refused["rank"]) and refused["why"] == "refused: heads do not split that way"
    assert not faults.complete
    assert set(faults.failed["fault"]) == {"raise", "memory", "kill", "hang", "exit"}
    assert faults.best()["fault"] in ("none", "kill_once")


def test_the_gate_fails_an_incomplete_exploration(faults, tmp_path):
    """Before: with the best layout's candidate crashed, a worse one passed "is the best". Now the
    gate fails while candidates lack answers, unless --allow-missing names them."""
    path = tmp_path / "faults.json"
    faults.to_json(path)
    doc = json.loads(path.read_text())
    assert doc["complete"] is False and len(doc["failed"]) == 5
    table = explorer.read_table(path)
    result = gate.explore_gate(table, "fault=none", 100)
    assert not result.passed
    assert {v.op for v in result.violations} == set(doc["failed"])
    assert all(v.rule == gate.COMPLETE_RULE for v in result.violations)
    allowed = ["fault=raise", "fault=memory", "fault=kill", "fault=hang", "fault=exit"]
    assert gate.explore_gate(table, "fault=none", 100, allowed).passed
    assert gate.explore_gate(table, "fault=none", 100, ["any"]).passed
    runner = CliRunner()
    args = ["check", "--explore", str(path), "--layout", "fault=none", "--max-gap-to-best", "100"]
    failed = runner.invoke(cli.main, args)
    assert failed.exit_code == 1 and "complete-exploration" in failed.output
    passed = runner.invoke(cli.main, [*args, "--allow-missing", "any"])
    assert passed.exit_code == 0, passed.output
    bad = runner.invoke(cli.main, [*args, "--allow-missing", "nosuch=1"])
    assert bad.exit_code == 2 and "no column 'nosuch'" in bad.output


def test_show_prints_the_users_traceback(faults, tmp_path):
    faults.to_json(tmp_path / "faults.json")
    label = _row(faults, "raise")["candidate"]
    result = CliRunner().invoke(cli.main, ["explore", "--show", label, str(tmp_path / "faults.json")])
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"{label}: error")
    assert "Traceback (most recent call last)" in result.output
    assert "ValueError: injected: the user's own bug" in result.output
    missing = CliRunner().invoke(cli.main, ["explore", "--show", "nope", str(tmp_path / "faults.json")])
    assert missing.exit_code == 2


def _explore_cli(faulty, cache, *args):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu",
           "HLO_ROOFLINE_CACHE_DIR": str(cache)}  # fmt: skip
    code = "from hlo_roofline.cli import main; main(prog_name='hlo-roofline')"
    return subprocess.run(
        [sys.executable, "-c", code, "explore", f"{faulty}:make_step", "--target", TARGET,
         "--axes", "data,tensor", "--fixed", "data=4", "--jobs", "2", *args],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def test_cli_exit_codes(faulty, cache, tmp_path):
    """Before: explore exited 0 with every candidate failed. Now 1 when any failed unexpectedly
    (with a pointer to --show), 2 when none compiled, 0 with a refused one beside an ok one."""
    one_failed = _explore_cli(faulty, cache, "--knob", "fault=none,raise", "--json",
                              str(tmp_path / "x.json"))  # fmt: skip
    assert one_failed.returncode == 1, one_failed.stderr
    assert "incomplete: 1 of 2 candidates failed" in one_failed.stderr
    assert f"explore --show CANDIDATE {tmp_path / 'x.json'}" in one_failed.stderr
    assert "Traceback" not in one_failed.stderr
    none_compiled = _explore_cli(faulty, cache, "--knob", "fault=raise")
    assert none_compiled.returncode == 2 and "no candidate compiled" in none_compiled.stderr
    answered = _explore_cli(faulty, cache, "--knob", "fault=none,refuse")
    assert answered.returncode == 0, answered.stderr
    assert " refused" in answered.stdout


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    out = []
    for status in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = status.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(status.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_workers_die_with_a_killed_parent(faulty, tmp_path):
    """Before: killing explore's process left its spawn workers (~700 MB each) running under PID
    1. Now they exit with it."""
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from hlo_roofline import explorer
        explorer.explore({f"{faulty}:make_step"!r}, {TARGET!r}, axes=("data", "tensor"),
                         constraints={{"fixed": {{"data": 4}}}}, knobs={{"fault": ["hang", "hang"]}},
                         jobs=2, cache=False, progress=False)
    """))
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    parent = subprocess.Popen([sys.executable, str(script)], env=env)
    try:
        deadline = time.monotonic() + 300
        workers: list[int] = []
        while len(workers) < 2 and time.monotonic() < deadline:
            time.sleep(1)
            workers = _children(parent.pid)
        assert len(workers) == 2, "the workers did not start"
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 30
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_alive(w) for w in workers)
    finally:
        if parent.poll() is None:
            parent.kill()
        for w in _children(parent.pid):
            os.kill(w, signal.SIGKILL)


def test_a_script_without_a_main_guard(tmp_path, cache):
    """Before: a script that calls explore at its top level (as docs/explore.md wrote it) failed
    every candidate with multiprocessing's bootstrapping error and exited 0. Now its make_step
    goes to the workers by value and the script is never run again; naming it as FILE.py:NAME
    (which a worker would load, top level and all) is refused before any worker starts."""
    script = tmp_path / "unguarded.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        sys.path.insert(0, {str(MLP.parent)!r})
        import hlo_roofline
        from mlp import make_mlp_step

        def make_step(mesh, batch):
            return make_mlp_step(mesh, batch=batch, d=128, f=256, layers=1)

        result = hlo_roofline.explore(make_step, {TARGET!r}, axes=("data", "tensor"),
                                      knobs={{"batch": [64]}}, constraints={{"fixed": {{"data": 4}}}},
                                      jobs=1, cache={str(cache)!r}, progress=False)
        print("STATUS", list(result.table["status"]))
    """))
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    run = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                         timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("STATUS") == 1 and "STATUS ['ok']" in run.stdout
    with pytest.raises(ValueError, match=r"unguarded\.py:\d+ calls explore\(\) at the top level"):
        explorer.explore(f"{script}:make_step", TARGET, axes=AXES, knobs={"batch": [64]})


@pytest.mark.parametrize(
    "args, message",
    [
        (["--knob", "fualt=raise"], "has no parameter 'fualt'"),
        (["--knob", "fualt=raise"], "did you mean 'fault'"),
        (["--knob", "batch=sixty"], "knob batch='sixty' is a str, not the int"),
        (["--knob", "batch=True"], "knob batch=True is a bool"),
        (["--model-flops", "nan"], "model_flops is nan"),
        (["--model-flops", "inf"], "model_flops is inf"),
        (["--tokens-per-step", "__import__('os')"], "only numbers, knob names"),
        (["--tokens-per-step", "bach*2048", "--knob", "batch=64"], "'bach' is not a knob"),
        (["--tokens-per-step", "batch-64", "--knob", "batch=64"], "must be a finite number above 0"),
        (["--fixed", "data=3"], "fixed data=3 does not divide the 4 devices"),
        (["--xla-flag", "no_dashes"], "is not --name or --name=value"),
    ],
)
def test_bad_input_before_any_compile(faulty, args, message):
    """Before: a misspelt knob reached make_step as a TypeError per candidate (after the workers
    started), 'False' arrived as a string, --model-flops nan was accepted, and a mesh that does not
    divide the devices printed no reason. Now: exit 2, one line, no worker started."""
    runner = CliRunner()
    base = ["explore", f"{faulty}:make_step", "--target", TARGET, "--axes", "data,tensor"]
    if "--fixed" not in args:
        base += ["--fixed", "data=4"]
    result = runner.invoke(cli.main, [*base, *args])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_a_wrong_entry_name_is_found_at_once(faulty):
    """Before: found 63 s in, after the workers started. Now read from the file's syntax tree."""
    result = CliRunner().invoke(
        cli.main, ["explore", f"{faulty}:make_stpe", "--target", TARGET, "--axes", "data,tensor"]
    )
    assert result.exit_code == 2
    assert "defines no 'make_stpe'; did you mean 'make_step'?" in result.output
    with pytest.raises(ValueError, match="has no 'nope'"):
        explorer.explore("hlo_roofline.examples:nope", TARGET, axes=AXES)


def test_a_misspelt_constraint_axis():
    """Before: silently ignored (nothing pruned). Now a ValueError naming the axes."""
    with pytest.raises(ValueError, match=r"names the axis 'tensr'.*did you mean 'tensor'"):
        explorer.candidates(TARGET, AXES, None, {"maximum": {"tensr": 2}})
    with pytest.raises(ValueError, match="sizes are integers"):
        explorer.candidates(TARGET, AXES, None, {"divides": {"tensor": "16"}})


def test_knob_types_from_the_signature():
    def make(mesh, batch: int, adam: bool = False, rate: float = 1.0, policy: str = "full"):
        return None

    params = _parameters_of(make)
    explorer.check_knobs(params, {"batch": [8], "adam": [True], "rate": [2], "policy": ["x"]}, "m")
    for knobs, message in [
        ({"batch": [8], "adam": ["False"]}, "adam='False' is a str"),
        ({"batch": [True]}, "batch=True is a bool"),
        ({"batch": [8.5]}, "is a float"),
        ({"adam": [True]}, "needs batch but no knob gives it"),
    ]:
        with pytest.raises(ValueError, match=message):
            explorer.check_knobs(params, knobs, "m")
    assert cli_explore._value("False") is False and cli_explore._value("none") is None


def test_best_of_an_empty_exploration_says_why():
    """Before: KeyError: 'rank'. Now a ValueError that says what became of the candidates."""
    k = explorer.book_constants("v5e")
    empty = explorer.Exploration(_empty_table(AXES, {}), {}, [({"data": 3}, "x")], k,
                                 TARGET, AXES)  # fmt: skip
    with pytest.raises(ValueError, match="no candidate compiled and fits: 0 candidates; 1 layouts"):
        empty.best()
    assert empty.complete and explorer.rank(empty.table).empty


def test_show_reads_the_written_exploration_without_entry(faults, tmp_path):
    """``explore --show CANDIDATE --json x.json`` (or ``--logdir DIR``): no step named, no compile."""
    faults.write_tensorboard(tmp_path / "logs")
    label = _row(faults, "raise")["candidate"]
    by_logdir = CliRunner().invoke(cli.main, ["explore", "--show", label, "--logdir",
                                              str(tmp_path / "logs")])  # fmt: skip
    assert by_logdir.exit_code == 0, by_logdir.output
    assert "ValueError: injected: the user's own bug" in by_logdir.output
    nothing = CliRunner().invoke(cli.main, ["explore", "--show", label])
    assert nothing.exit_code == 2 and "reads a written exploration" in nothing.output


def test_a_script_without_cloudpickle_is_loaded_by_path_once_guarded(tmp_path, monkeypatch):
    """Without cloudpickle a script's make_step is loaded by path in the workers (its top level
    runs there): an unguarded explore() in it is refused before any worker starts, with the fix;
    a guarded one is loaded by path."""
    import types

    monkeypatch.setitem(sys.modules, "cloudpickle", None)  # import cloudpickle: ImportError
    for guarded in (False, True):
        script = tmp_path / f"script_{guarded}.py"
        call = "explore(make_step, 'v5e:2x2')"
        body = f'if __name__ == "__main__":\n    {call}\n' if guarded else f"{call}\n"
        script.write_text(f"from hlo_roofline import explore\n\ndef make_step(mesh):\n    pass\n\n{body}")
        main = types.ModuleType("__main__")
        main.__file__ = str(script)
        monkeypatch.setitem(sys.modules, "__main__", main)

        def make_step(mesh):
            return None

        make_step.__module__, make_step.__qualname__ = "__main__", "make_step"  # as a script's
        if guarded:
            assert make_step_reference(make_step) == ("file", str(script), "make_step")
        else:
            with pytest.raises(ValueError, match=r"calls explore\(\) at the top level.*install cloudpickle"):
                make_step_reference(make_step)
