"""The compile cache under damage: every entry read back is checked, no wait lasts forever, no
special file is opened, and the cache stays within its size. Each case compiles a small step on
the local CPU (fast), damages what the cache holds the way a crash, a disk or a person might, and
holds the next analysis to the undamaged report."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from click.testing import CliRunner

from hlo_roofline import analyze, cache, cli

S = jax.ShapeDtypeStruct
X = S((64, 128), jnp.float32)
W = S((128, 256), jnp.float32)


def step(x, w):
    return jnp.tanh(x @ w)


@pytest.fixture(autouse=True)
def _no_hang():
    """A case that would block (a FIFO opened, a lock never released) fails instead of hanging."""

    def fail(signum, frame):
        raise TimeoutError("the cache blocked")

    previous = signal.signal(signal.SIGALRM, fail)
    signal.alarm(120)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def _entry(directory: Path) -> tuple[Path, Path]:
    (hlo,) = directory.glob(f"*{cache.HLO_SUFFIX}")
    return hlo, hlo.with_name(hlo.name.removesuffix(cache.HLO_SUFFIX) + cache.META_SUFFIX)


def _counting_compiles(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = jax.stages.Lowered.compile
    monkeypatch.setattr(
        jax.stages.Lowered, "compile", lambda self, *a, **k: calls.append(1) or real(self, *a, **k)
    )
    return calls


@pytest.fixture
def cached(tmp_path):
    """A cache with one entry, and the report it gave."""
    report = analyze(step, X, W, cache=tmp_path)
    return tmp_path, report


def _damage_shape_digit(text: str) -> str:
    """One digit of the first array shape in the entry changed: still valid HLO, another program."""
    match = re.search(r"f32\[(\d+)", text)
    assert match, text[:200]
    digit = match.group(1)[0]
    other = "7" if digit != "7" else "3"
    return text[: match.start(1)] + other + text[match.start(1) + 1 :]


DAMAGES = {
    "a shape digit changed": lambda hlo, meta: hlo.write_text(_damage_shape_digit(hlo.read_text())),
    "truncated text": lambda hlo, meta: hlo.write_text(
        hlo.read_text()[: len(hlo.read_text()) // 2]
    ),
    "not HLO": lambda hlo, meta: hlo.write_text("garbage"),
    "memory figures of 1e30": lambda hlo, meta: meta.write_text(
        json.dumps(
            {**json.loads(meta.read_text()), "memory": {f: 10**30 for f in cache.MEMORY_FIELDS}}
        )
    ),
    "a memory field renamed": lambda hlo, meta: meta.write_text(
        meta.read_text().replace("temp_size_in_bytes", "temp_size_in_bytez")
    ),
    "stored under another key": lambda hlo, meta: meta.write_text(
        json.dumps({**json.loads(meta.read_text()), "key": "0" * 32})
    ),
    "metadata missing (killed between renames)": lambda hlo, meta: meta.unlink(),
    "metadata not JSON": lambda hlo, meta: meta.write_text('{"format": '),
    "metadata of another format": lambda hlo, meta: meta.write_text(json.dumps([1, 2])),
    "HLO missing": lambda hlo, meta: hlo.unlink(),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_entry_is_a_miss_that_compiles_again(cached, monkeypatch, damage):
    directory, first = cached
    hlo, meta = _entry(directory)
    DAMAGES[damage](hlo, meta)
    calls = _counting_compiles(monkeypatch)
    with pytest.warns(cache.CacheWarning, match=re.escape(str(directory))):
        again = analyze(step, X, W, cache=directory)
    assert calls == [1]  # compiled again, not trusted
    assert again.ops.equals(first.ops) and again.summary["flops"] == first.summary["flops"]
    # The entry was replaced: the next run reads it back with no warning and no compile.
    calls.clear()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", cache.CacheWarning)
        analyze(step, X, W, cache=directory)
    assert calls == []


def test_an_intact_entry_is_read_without_a_compile_or_a_warning(cached, monkeypatch):
    directory, first = cached
    calls = _counting_compiles(monkeypatch)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", cache.CacheWarning)
        again = analyze(step, X, W, cache=directory)
    assert calls == [] and again.ops.equals(first.ops)


@pytest.mark.parametrize("which", ["hlo", "meta", "lock"])
def test_a_special_file_in_the_cache_is_refused_not_opened(tmp_path, monkeypatch, which):
    lowered = jax.jit(step).lower(X, W)
    name = cache.key(lowered, None)
    suffix = {"hlo": cache.HLO_SUFFIX, "meta": cache.META_SUFFIX, "lock": cache.LOCK_SUFFIX}[which]
    os.mkfifo(tmp_path / f"{name}{suffix}")
    with pytest.warns(cache.CacheWarning, match="not a regular file"):
        report = analyze(step, X, W, cache=tmp_path)
    assert report.summary["flops"] >= 2 * 64 * 128 * 256  # the matmul, compiled without the cache


HOLDER = textwrap.dedent(
    """
    import os, signal, sys, time
    from pathlib import Path
    from hlo_roofline import cache
    with cache._locked(Path(sys.argv[1])) as usable:
        print("held" if usable else "unusable", flush=True)
        if sys.argv[2] == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)
        time.sleep(60)
    """
)


def _hold(lock: Path, how: str) -> subprocess.Popen:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock), how], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_a_stopped_lock_holder_is_named_and_not_waited_for(tmp_path):
    lowered = jax.jit(step).lower(X, W)
    lock = tmp_path / f"{cache.key(lowered, None)}{cache.LOCK_SUFFIX}"
    holder = _hold(lock, "stop")
    try:
        for _ in range(100):  # until the kernel reports it stopped
            if cache._process_state(holder.pid) in ("T", "t"):
                break
            time.sleep(0.05)
        started = time.monotonic()
        with pytest.warns(
            cache.CacheWarning, match=rf"{re.escape(str(lock))}.*{holder.pid}.*stopped"
        ):
            report = analyze(step, X, W, cache=tmp_path)
        assert time.monotonic() - started < 60 and report.summary["flops"] > 0
    finally:
        holder.kill()
        holder.wait()


def test_a_lock_held_too_long_times_out_naming_the_holder(tmp_path):
    lock = tmp_path / f"entry{cache.LOCK_SUFFIX}"
    holder = _hold(lock, "sleep")
    try:
        started = time.monotonic()
        named = rf"{re.escape(str(lock))}.*{holder.pid}.*0 s"
        with pytest.warns(cache.CacheWarning, match=named), cache._locked(lock, 0.4) as usable:
            assert usable is False
        assert 0.3 < time.monotonic() - started < 30
    finally:
        holder.kill()
        holder.wait()
    with cache._locked(lock, timeout_s=5) as usable:  # a killed holder's lock is free again
        assert usable is True


def test_stale_temporary_files_are_cleaned(tmp_path, monkeypatch):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    ).stdout.strip()
    stale = tmp_path / f"x{cache.HLO_SUFFIX}.{dead}{cache.TMP_SUFFIX}"
    stale.write_text("HloModule half")
    mine = tmp_path / f"y{cache.HLO_SUFFIX}.{os.getpid()}{cache.TMP_SUFFIX}"
    mine.write_text("HloModule being written")
    analyze(step, X, W, cache=tmp_path)
    assert not stale.exists()  # its writer is gone
    assert mine.exists()  # a live writer's file is left alone


def test_entries_honour_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        analyze(step, X, W, cache=tmp_path)
    finally:
        os.umask(old)
    for path in tmp_path.iterdir():
        assert path.stat().st_mode & 0o777 == 0o644, path


def test_the_cache_keeps_under_its_size_dropping_the_least_recently_used(tmp_path):
    shapes = [S((n, 128), jnp.float32) for n in (8, 16, 32, 64)]
    for x in shapes:
        analyze(step, x, W, cache=tmp_path)
        time.sleep(0.02)
    assert cache.usage(tmp_path).entries == 4
    one = cache.usage(tmp_path).bytes // 4
    # The first entry used again becomes the most recent; a cap of about two entries keeps it
    # and the newest one.
    analyze(step, shapes[0], W, cache=tmp_path)
    newest_key = cache.key(jax.jit(step).lower(shapes[-1], W), None)
    first_key = cache.key(jax.jit(step).lower(shapes[0], W), None)
    cache.prune(tmp_path, int(2.5 * one))
    kept = {p.name.removesuffix(cache.HLO_SUFFIX) for p in tmp_path.glob(f"*{cache.HLO_SUFFIX}")}
    assert kept == {newest_key, first_key}
    # Writing with a cap prunes by itself.
    analyze(step, S((4, 128), jnp.float32), W, cache=tmp_path)
    assert cache.usage(tmp_path).entries == 3
    from hlo_roofline.cache import compile_program

    compile_program(jax.jit(step).lower(S((2, 128), jnp.float32), W), None, tmp_path, max_bytes=1)
    assert cache.usage(tmp_path).entries == 1  # only the entry just written


def test_cache_command_shows_prunes_and_clears(tmp_path):
    analyze(step, X, W, cache=tmp_path)
    runner = CliRunner()
    shown = runner.invoke(cli.main, ["cache", "show", "--dir", str(tmp_path), "--format", "json"])
    assert shown.exit_code == 0, shown.output
    fields = json.loads(shown.output)
    assert fields["entries"] == 1 and fields["bytes"] > 0
    plain = runner.invoke(cli.main, ["cache", "--help"])
    assert plain.exit_code == 0 and "prune" in plain.output
    bad = runner.invoke(cli.main, ["cache", "prune", "--dir", str(tmp_path), "--max-size", "lots"])
    assert bad.exit_code == 2 and "Traceback" not in bad.output
    pruned = runner.invoke(cli.main, ["cache", "prune", "--dir", str(tmp_path), "--max-size", "1G"])
    assert pruned.exit_code == 0 and "dropped 0" in pruned.output
    cleared = runner.invoke(cli.main, ["cache", "clear", "--dir", str(tmp_path)])
    assert cleared.exit_code == 0 and "dropped 1" in cleared.output
    assert cache.usage(tmp_path).entries == 0
