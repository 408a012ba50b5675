"""Compiling the candidates: one candidate judged in a worker (:func:`_evaluate`, which never
raises), the default pool of worker processes that survive their candidates and die with the
parent, the user's executor (Dask), the compiler flags they run under, and the progress bar."""

from __future__ import annotations

import concurrent.futures
import contextlib
import math
import os
import pickle
import re
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TextIO

from hlo_roofline.explorer.layouts import work_of
from hlo_roofline.explorer.status import (
    STATUS_CRASHED,
    STATUS_ERROR,
    STATUS_OK,
    STATUS_REFUSED,
    STATUS_TIMED_OUT,
    Refused,
)
from hlo_roofline.explorer.step import make_step_from
from hlo_roofline.text import one_line

# The environment variables compiler flags reach XLA through (read when JAX starts its backend),
# by the name explore() takes them under.
FLAG_VARIABLES = {"xla": "XLA_FLAGS", "libtpu": "LIBTPU_INIT_ARGS"}


WORKER_VARIABLE = "HLO_ROOFLINE_EXPLORE_WORKER"  # set in the default pool's workers


def failed_result(status: str, error: str, start: float | None, trace: str = "", **more) -> dict:
    return {
        "status": status,
        "error": error,
        "traceback": trace,
        "compile_s": time.perf_counter() - start if start is not None else math.nan,
        "report": None,
        **more,
    }


def flags_in_effect() -> dict[str, str]:
    """The compiler flags of this process's environment, by variable (only those set)."""
    return {
        v: os.environ[v].strip() for v in FLAG_VARIABLES.values() if os.environ.get(v, "").strip()
    }


def _evaluate(job: dict) -> dict:
    """Compile and judge one candidate; never raises (an error is the row's status, with the
    traceback). make_step raising :class:`Refused` is the row's result ``refused``; a
    ``MemoryError`` asks for a retry on a fresh worker (``retry``)."""
    import traceback

    start = time.perf_counter()
    try:
        wanted = job.get("flags") or {}
        env = flags_in_effect()
        missing = [f for var, fs in wanted.items() for f in fs if f not in env.get(var, "").split()]
        if missing:
            raise RuntimeError(
                f"this worker's environment lacks the compiler flag(s) {' '.join(missing)}: "
                "flags reach XLA through XLA_FLAGS / LIBTPU_INIT_ARGS when JAX starts, so start "
                "your executor's workers with them (Dask: LocalCluster(env={...})) or use the "
                "default pool"
            )
        from hlo_roofline import api, targets

        make_step = make_step_from(job["reference"])
        sizes = dict(job["sizes"])
        mesh = targets.make_mesh(job["target"], tuple(sizes.values()), tuple(sizes),
                                 bool(job.get("allow_split_physical_axes")))  # fmt: skip
        returned = make_step(mesh, **dict(job["knobs"]))
        if not isinstance(returned, tuple | list) or not 2 <= len(returned) <= 4:
            raise TypeError(
                "make_step must return (fn, args), (fn, args, jit_kwargs) or "
                f"(fn, args, jit_kwargs, work), not {type(returned).__name__}"
            )
        fn, args, *rest = returned
        jit_kwargs = dict(rest[0]) if rest and rest[0] is not None else {}
        work = work_of(rest[1] if len(rest) > 1 else None, "make_step")
        model_flops = job.get("model_flops")  # per device
        if model_flops is None and "model_flops" in work:
            model_flops = work["model_flops"] / math.prod(sizes.values())
        report = api.analyze(
            fn,
            *args,
            target=job["target"],
            cache=job["cache"],
            model_flops=model_flops,
            jit_kwargs=jit_kwargs,
        )
        report.summary["compiler_flags"] = env
    except Refused as exc:
        return failed_result(STATUS_REFUSED, one_line(exc), start)
    except MemoryError as exc:
        return failed_result(STATUS_CRASHED, f"MemoryError: {one_line(exc)} (out of host memory)",
                       start, traceback.format_exc(), retry=True)  # fmt: skip
    except (Exception, SystemExit) as exc:  # sys.exit() in make_step is its error too
        return failed_result(STATUS_ERROR, f"{type(exc).__name__}: {one_line(exc)}", start,
                       traceback.format_exc())  # fmt: skip
    return {
        "status": STATUS_OK,
        "error": "",
        "traceback": "",
        "compile_s": time.perf_counter() - start,
        "report": report.to_dict(),
        "work": work,
        "flags": env,
    }


def _write_message(stream, value) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(len(data).to_bytes(8, "little") + data)
    stream.flush()


def _read_exactly(fd: int, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError("the worker closed its pipe")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _worker_main(job_fd: int, result_fd: int, parent: int) -> None:
    """A worker of the default pool: read jobs, write results, until the pipe closes. It never
    imports the parent's ``__main__`` (a script without a guard is not run again), and exits when
    its parent does (``prctl(PR_SET_PDEATHSIG)`` on Linux, and a watch on the parent's pid)."""
    import threading

    os.environ[WORKER_VARIABLE] = "1"
    with contextlib.suppress(Exception):  # Linux: the kernel kills us with the parent
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, daemon=True).start()
    results = os.fdopen(result_fd, "wb")
    from hlo_roofline import api  # noqa: F401  (JAX started before the first candidate's clock)

    _write_message(results, None)  # ready: a candidate's --timeout counts from here
    while True:
        try:
            size = int.from_bytes(_read_exactly(job_fd, 8), "little")
            job = pickle.loads(_read_exactly(job_fd, size))
        except EOFError:
            return
        result = _evaluate(job)
        try:
            _write_message(results, result)
        except (pickle.PicklingError, TypeError, AttributeError, RecursionError) as exc:
            _write_message(results, failed_result(STATUS_ERROR, f"its result cannot be sent back: "
                                            f"{type(exc).__name__}: {one_line(exc)}", None))  # fmt: skip


class _Worker:
    """One worker process of the default pool, its pipes and its output (kept for the row of a
    candidate that kills it)."""

    def __init__(self, env: dict[str, str]) -> None:
        import subprocess
        import tempfile

        job_r, job_w = os.pipe()
        result_r, result_w = os.pipe()
        self.output = tempfile.TemporaryFile()  # noqa: SIM115 (closed in close())
        code = (
            "import sys; from hlo_roofline.explorer.workers import _worker_main; "
            "_worker_main(*map(int, sys.argv[1:]))"
        )
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", code, str(job_r), str(result_w), str(os.getpid())],
                pass_fds=(job_r, result_w), stdin=subprocess.DEVNULL, stdout=self.output,
                stderr=subprocess.STDOUT, env=env,
            )  # fmt: skip
        finally:
            os.close(job_r)
            os.close(result_w)
        self.jobs = os.fdopen(job_w, "wb")
        self.results = result_r
        self.ready = False  # it has imported JAX (its first message)

    def send(self, job: dict) -> None:
        _write_message(self.jobs, job)

    def receive(self) -> dict:
        size = int.from_bytes(_read_exactly(self.results, 8), "little")
        return pickle.loads(_read_exactly(self.results, size))

    def last_words(self) -> str:
        """How it ended and the end of what it printed."""
        import signal

        try:
            code = self.process.wait(timeout=30)
        except Exception:  # it closed its pipe but lives on: it is of no use any more
            self.process.kill()
            code = self.process.wait()
        how = f"exit status {code}"
        if code < 0:
            with contextlib.suppress(ValueError):
                how = f"killed by {signal.Signals(-code).name}"
        self.output.seek(0, os.SEEK_END)
        self.output.seek(max(0, self.output.tell() - 2000))
        tail = self.output.read().decode("utf-8", "replace").strip()
        return how + (f"; its last output:\n{tail}" if tail else "")

    def close(self, kill: bool = False) -> None:
        with contextlib.suppress(OSError):
            self.jobs.close()
        if kill:
            with contextlib.suppress(OSError):
                self.process.kill()
        try:
            self.process.wait(timeout=10)
        except Exception:
            self.process.kill()
            self.process.wait()
        with contextlib.suppress(OSError):
            os.close(self.results)
        self.output.close()


def _worker_environment(flags: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """The parent's environment, its ``sys.path`` (as ``spawn`` hands it on: a worker imports what
    the parent can) and the exploration's compiler flags appended to theirs."""
    env = dict(os.environ)
    paths = [p or os.getcwd() for p in sys.path]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    for var, given in flags.items():
        env[var] = " ".join([env.get(var, "").strip(), *given]).strip()
    return env


def run_pool(jobs_list, workers, timeout, flags, on_result) -> None:
    """Run every job on ``workers`` worker processes of our own. A candidate whose worker dies
    (the OOM killer, a segfault) or that runs out of host memory is retried once on a fresh
    worker; one past ``timeout`` seconds is killed with its worker (``timed_out``)."""
    import collections
    import select

    env = _worker_environment(flags)
    pending = collections.deque(range(len(jobs_list)))
    tries: dict[int, int] = collections.Counter()
    idle: list[_Worker] = []
    running: dict[_Worker, tuple[int, float]] = {}
    try:
        while pending or running:
            while pending and len(running) < workers:
                i = pending.popleft()
                worker = idle.pop() if idle else _Worker(env)
                tries[i] += 1
                try:
                    worker.send(jobs_list[i])
                except OSError:  # it died before it read the job
                    _died(i, worker, tries, pending, on_result)
                    continue
                started = worker.ready and timeout
                running[worker] = (i, time.monotonic() + timeout if started else math.inf)
            if not running:  # every send failed: the candidates are retried or rows already
                continue
            wait = min(deadline for _, deadline in running.values()) - time.monotonic()
            ready, _, _ = select.select(
                [w.results for w in running], [], [], max(0.0, min(wait, 3600.0))
            )
            for worker in [w for w in running if w.results in ready]:
                i, _ = running.pop(worker)
                try:
                    result = worker.receive()
                except (EOFError, OSError, pickle.UnpicklingError):
                    _died(i, worker, tries, pending, on_result)
                    continue
                if result is None:  # the worker started: its candidate's clock starts now
                    worker.ready = True
                    running[worker] = (i, time.monotonic() + timeout if timeout else math.inf)
                    continue
                if result.pop("retry", False):  # out of host memory: a fresh worker, once
                    worker.close(kill=True)
                    if tries[i] < 2:
                        pending.appendleft(i)
                        continue
                    result["error"] += "; again on a fresh worker"
                else:
                    idle.append(worker)
                on_result(i, result)
            now = time.monotonic()
            for worker, (i, deadline) in list(running.items()):
                if now >= deadline:
                    del running[worker]
                    worker.close(kill=True)
                    on_result(i, failed_result(
                        STATUS_TIMED_OUT, f"no result in {timeout:g} s (--timeout): killed", None,
                    ))  # fmt: skip
    finally:
        for worker in [*idle, *running]:
            worker.close(kill=worker in running)


def _died(i, worker: _Worker, tries, pending, on_result) -> None:
    """The worker running candidate ``i`` died: retry it once on a fresh worker, else a row."""
    words = worker.last_words()
    worker.close(kill=True)
    if tries[i] < 2:
        pending.appendleft(i)
        return
    first, _, rest = words.partition("\n")
    on_result(i, failed_result(
        STATUS_CRASHED, f"its worker died twice ({first.rstrip(';')})", None, rest,
    ))  # fmt: skip


def run_on_executor(pool, jobs_list, timeout, on_result) -> None:
    """Run every job on the user's executor (or a Dask client's). A candidate whose future fails
    (its worker died) is submitted once more; with ``timeout``, when no candidate finishes for
    that long, the rest are given up (``timed_out``: a foreign executor's worker cannot be
    killed from here)."""
    futures = {pool.submit(_evaluate, job): i for i, job in enumerate(jobs_list)}
    tries = dict.fromkeys(range(len(jobs_list)), 1)
    while futures:
        done, _ = concurrent.futures.wait(
            futures, timeout=timeout, return_when=concurrent.futures.FIRST_COMPLETED
        )
        if not done:
            for future, i in futures.items():
                future.cancel()
                on_result(i, failed_result(
                    STATUS_TIMED_OUT, f"no candidate finished in {timeout:g} s (--timeout)", None
                ))  # fmt: skip
            return
        for future in done:
            i = futures.pop(future)
            try:
                result = future.result()
            except Exception as exc:  # the worker itself died
                result = failed_result(STATUS_CRASHED,
                                 f"worker failed: {type(exc).__name__}: {one_line(exc)}", None,
                                 retry=True)  # fmt: skip
            if result.pop("retry", False) and tries[i] < 2:
                tries[i] += 1
                try:
                    futures[pool.submit(_evaluate, jobs_list[i])] = i
                    continue
                except Exception as exc:  # a broken pool takes nothing more
                    result["error"] += f"; no retry: {type(exc).__name__}: {one_line(exc)}"
            on_result(i, result)


class Progress:
    """``[####......] 3/8 compiled, 12 s, ETA 20 s`` on one stderr line, rewritten in place."""

    def __init__(self, total: int, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.total, self.done, self.start = total, 0, time.monotonic()
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled and total > 0

    def step(self, label: str = "") -> None:
        self.done += 1
        if not self.enabled:
            return
        elapsed = time.monotonic() - self.start
        eta = elapsed / self.done * (self.total - self.done)
        filled = round(20 * self.done / self.total)
        line = (
            f"\r[{'#' * filled}{'.' * (20 - filled)}] {self.done}/{self.total} compiled, "
            f"{elapsed:.0f} s, ETA {eta:.0f} s {label[:40]:<40}"
        )
        self.stream.write(line)
        if self.done == self.total:
            self.stream.write("\n")
        self.stream.flush()


def user_executor(executor):
    """The executor to submit to: the user's, or a Dask client's ``get_executor``."""
    get = getattr(executor, "get_executor", None)  # a distributed.Client
    if get is not None and not isinstance(executor, concurrent.futures.Executor):
        return get(pure=False)
    return executor


_FLAG = re.compile(r"--[A-Za-z0-9_.\-]+(=\S*)?")


def compiler_flags(xla_flags: Iterable[str] = (), libtpu_flags: Iterable[str] = ()) -> dict:
    """``{"xla": [...], "libtpu": [...]}`` (only those given), each flag ``--name`` or
    ``--name=value``; anything else is a ValueError."""
    out = {}
    for kind, given in (("xla", xla_flags), ("libtpu", libtpu_flags)):
        given = [given] if isinstance(given, str) else list(given)
        for flag in given:
            if not isinstance(flag, str) or not _FLAG.fullmatch(flag):
                raise ValueError(f"{kind} flag {flag!r} is not --name or --name=value")
        if given:
            out[kind] = given
    return out


def read_flags_file(path: str | os.PathLike) -> dict:
    """Compiler flags from a TOML file: ``xla = ["--xla_...=true"]``, ``libtpu = [...]``."""
    import tomllib

    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"cannot read the flags file {path}: {one_line(exc)}") from None
    unknown = set(data) - set(FLAG_VARIABLES)
    if unknown:
        raise ValueError(f"{path}: unknown key(s) {sorted(unknown)}; known: xla, libtpu")
    for kind, value in data.items():
        if not isinstance(value, list):
            raise ValueError(f"{path}: {kind} must be a list of flags, not {value!r}")
    return compiler_flags(data.get("xla", ()), data.get("libtpu", ()))
