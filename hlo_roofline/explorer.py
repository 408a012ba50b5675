"""The sharding explorer: compile every layout of a training step for a target and rank them.

"Which layout should I train on?" is the question of the training chapter of *How to Scale Your
Model*. Its closed forms (DP/FSDP are compute-bound while the per-chip batch B/X exceeds C/W_ici;
tensor parallelism turns communication-bound past Y > n_axes·F/(C/W_ici); ...) hold for an
idealised MLP. :func:`explore` asks the compiler instead: every factorization of the target's
devices over the named mesh axes (that the topology accepts), crossed with the user's knobs, is
compiled compile-only (in worker processes, through the on-disk HLO cache) and judged; each row
then says where it stands and what the book's rule predicts for it.

``make_step(mesh, **knobs)`` returns ``(fn, args, jit_kwargs)`` (the convention of
:mod:`hlo_roofline.examples`, with the mesh handed in). Workers import it by module path, by file
path, or receive it pickled by value with cloudpickle (closures, ``__main__``).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import importlib
import importlib.util
import itertools
import math
import multiprocessing
import os
import pickle
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import pandas as pd

__all__ = [
    "BookConstants",
    "Constraints",
    "Exploration",
    "book_constants",
    "candidates",
    "explore",
    "factorizations",
]

STATUS_OK, STATUS_NO_FIT, STATUS_ERROR = "ok", "does not fit", "compile error"
BATCH_AXES = ("data", "fsdp")  # axes that split the batch (the book's X)
MODEL_AXES = ("tensor", "model")  # axes that split the model's hidden dimension (the book's Y)


# -- the book's constants from the chip database -------------------------------------------------


@dataclass(frozen=True)
class BookConstants:
    """C (bf16 FLOP/s per chip), W_ici (bidirectional bytes/s of one link axis) and their ratio,
    the book's "ICI operational intensity" (≈ 2,550 on TPU v5p)."""

    chip: str
    C: float
    W_ici: float | None

    @property
    def ratio(self) -> float | None:
        return self.C / self.W_ici if self.W_ici else None


def book_constants(chip) -> BookConstants:
    """``C = chip.peak_flops("bf16")``, ``W_ici = chip.ici.link_bidirectional`` (the book's
    W_ici, per link and so per torus axis); GPUs: the NVLink one-way egress (the book's W_GPU)."""
    from hlo_roofline import chips

    chip = chips.get(chip) if isinstance(chip, str) else chip
    per_device = chip.per_device()
    w = None
    if chip.ici is not None and chip.ici.link_bidirectional:
        w = chip.ici.link_bidirectional
    elif chip.scaleup is not None and chip.scaleup.oneway:
        w = chip.scaleup.oneway
    return BookConstants(chip.key, per_device.peak_flops("bf16"), w)


# -- candidates ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Constraints:
    """Which layouts to try.

    ``divides``: axis → dimension(s) its size must divide (heads, batch, hidden size);
    ``fixed``: axis → its only size; ``maximum``: axis → its largest size; ``limit``: at most this
    many candidates (the ones listed first: axis sizes in increasing order of the last axis).
    """

    divides: Mapping[str, int | Sequence[int]] = field(default_factory=dict)
    fixed: Mapping[str, int] = field(default_factory=dict)
    maximum: Mapping[str, int] = field(default_factory=dict)
    limit: int | None = None

    @classmethod
    def of(cls, value: Constraints | Mapping | None) -> Constraints:
        if value is None:
            return cls()
        if isinstance(value, Constraints):
            return value
        unknown = set(value) - {"divides", "fixed", "maximum", "limit"}
        if unknown:
            raise ValueError(
                f"unknown constraints {sorted(unknown)}; known: divides, fixed, maximum, limit"
            )
        return cls(**value)

    def allows(self, sizes: Mapping[str, int]) -> str | None:
        """None if ``sizes`` passes, else why not."""
        for axis, size in sizes.items():
            if axis in self.fixed and size != self.fixed[axis]:
                return f"{axis} must be {self.fixed[axis]}"
            if axis in self.maximum and size > self.maximum[axis]:
                return f"{axis} {size} > maximum {self.maximum[axis]}"
            dims = self.divides.get(axis, ())
            for dim in [dims] if isinstance(dims, int) else dims:
                if dim % size:
                    return f"{axis} {size} does not divide {dim}"
        return None


def factorizations(n: int, k: int) -> list[tuple[int, ...]]:
    """Every ordered k-tuple of positive integers whose product is n."""
    if k == 0:
        return [()] if n == 1 else []
    out = []
    for first in range(1, n + 1):
        if n % first == 0:
            out += [(first, *rest) for rest in factorizations(n // first, k - 1)]
    return out


@dataclass(frozen=True)
class Candidate:
    """One layout to compile: mesh axis sizes and knob values."""

    sizes: tuple[tuple[str, int], ...]
    knobs: tuple[tuple[str, Any], ...]
    n_axes: tuple[tuple[str, int], ...] = ()  # torus axes each mesh axis spans

    @property
    def label(self) -> str:
        parts = [f"{a}{s}" for a, s in self.sizes] + [f"{k}={v}" for k, v in self.knobs]
        return "_".join(parts)


def candidates(
    target: str,
    axes: Sequence[str],
    knobs: Mapping[str, Iterable] | None = None,
    constraints: Constraints | Mapping | None = None,
) -> tuple[list[Candidate], list[tuple[dict, str]]]:
    """(candidates, pruned): every factorization of the target's devices over ``axes`` that the
    constraints allow and the topology maps onto (``targets.make_mesh`` accepts), crossed with
    the knobs; the pruned ones with the reason."""
    from hlo_roofline import targets

    rules = Constraints.of(constraints)
    n = len(targets.devices(target))
    knob_names = list(knobs or {})
    knob_values = list(itertools.product(*[list(v) for v in (knobs or {}).values()]))
    kept, pruned = [], []
    for shape in factorizations(n, len(axes)):
        sizes = dict(zip(axes, shape, strict=True))
        reason = rules.allows(sizes)
        if reason is None:
            try:
                mesh = targets.make_mesh(target, shape, tuple(axes))
            except Exception as exc:  # the topology cannot hold this mesh
                first = _one_line(exc).split(". ")[0]  # libtpu's message goes on with advice
                reason = f"does not map onto {target}: {first}"
        if reason is not None:
            pruned.append((sizes, reason))
            continue
        spans = tuple((a, _torus_axes(mesh, i)) for i, a in enumerate(axes))
        for values in knob_values:
            kept.append(
                Candidate(tuple(sizes.items()), tuple(zip(knob_names, values, strict=True)), spans)
            )
    if rules.limit is not None and len(kept) > rules.limit:
        pruned += [(dict(c.sizes), f"over the limit of {rules.limit}") for c in kept[rules.limit :]]
        kept = kept[: rules.limit]
    return kept, pruned


def _torus_axes(mesh, index: int) -> int:
    """How many torus dimensions the devices along mesh axis ``index`` span (the book's
    n_axes: a collective over them gets that many links' bandwidth)."""
    devices = mesh.devices
    line = devices[tuple(slice(None) if i == index else 0 for i in range(devices.ndim))]
    coords = [getattr(d, "coords", None) for d in line.flat]
    if len(coords) < 2 or any(c is None for c in coords):
        return 1 if len(coords) >= 2 else 0
    return sum(len({c[k] for c in coords}) > 1 for k in range(len(coords[0])))


# -- passing make_step to workers ----------------------------------------------------------------


def _reference(make_step) -> tuple:
    """How a worker finds ``make_step``: ("module", name, qualname), ("file", path, qualname) or
    ("pickle", bytes) for what neither reaches (closures, lambdas, ``__main__``)."""
    if isinstance(make_step, str):
        where, sep, name = make_step.rpartition(":")
        if not sep:
            raise ValueError(f"{make_step!r} is not FILE.py:NAME or package.module:NAME")
        if where.endswith(".py"):
            return ("file", str(Path(where).resolve()), name)
        return ("module", where, name)
    qualname = getattr(make_step, "__qualname__", "")
    module = sys.modules.get(getattr(make_step, "__module__", None) or "")
    if "<" not in qualname and module is not None and module.__name__ != "__main__":
        file = getattr(module, "__file__", None)
        if _importable(module.__name__):
            return ("module", module.__name__, qualname)
        if file:
            return ("file", str(Path(file).resolve()), qualname)
    try:
        import cloudpickle
    except ImportError:
        raise ValueError(
            f"{qualname or make_step!r} cannot be imported by a worker (a closure, a lambda or "
            "in __main__) and cloudpickle is not installed: define it at module level in a file"
        ) from None
    return ("pickle", cloudpickle.dumps(make_step))


def _importable(name: str) -> bool:
    """Whether another process can import ``name``: its top-level package is found by the import
    system itself (not merely present in ``sys.modules``, as a module loaded from a file path is)."""
    top = name.partition(".")[0]
    if top in sys.builtin_module_names:
        return True
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        with contextlib.suppress(Exception):
            if find(top, None) is not None:
                return True
    return False


_files: dict[str, Any] = {}


def _resolve(reference: tuple) -> Callable:
    kind = reference[0]
    if kind == "pickle":
        return pickle.loads(reference[1])
    if kind == "module":
        value: Any = importlib.import_module(reference[1])
    else:
        path = reference[1]
        module = _files.get(path)
        if module is None:
            name = "_hlo_roofline_explore_" + re.sub(r"\W", "_", path)
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot import {path}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            sys.path.insert(0, str(Path(path).parent))
            try:
                spec.loader.exec_module(module)
            finally:
                sys.path.remove(str(Path(path).parent))
            _files[path] = module
        value = module
    for part in reference[2].split("."):
        value = getattr(value, part)
    return value


# -- one candidate, in a worker ------------------------------------------------------------------


def _evaluate(job: dict) -> dict:
    """Compile and judge one candidate; never raises (an error is the row's status)."""
    start = time.perf_counter()
    try:
        from hlo_roofline import api, targets

        make_step = _resolve(job["reference"])
        sizes = dict(job["sizes"])
        mesh = targets.make_mesh(job["target"], tuple(sizes.values()), tuple(sizes))
        returned = make_step(mesh, **dict(job["knobs"]))
        fn, args, *rest = returned
        jit_kwargs = dict(rest[0]) if rest else {}
        report = api.analyze(
            fn,
            *args,
            target=job["target"],
            cache=job["cache"],
            **jit_kwargs,
        )
    except Exception as exc:
        return {
            "status": STATUS_ERROR,
            "error": f"{type(exc).__name__}: {_one_line(exc)}",
            "compile_s": time.perf_counter() - start,
            "report": None,
        }
    return {
        "status": STATUS_OK,
        "error": "",
        "compile_s": time.perf_counter() - start,
        "report": report.to_dict(),
    }


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# -- the result ----------------------------------------------------------------------------------


@dataclass
class Exploration:
    """The candidates as a ranked DataFrame (``table``), each one's :class:`Report`
    (``reports[label]``, None where it did not compile), what was pruned, and the book's constants.
    """

    table: pd.DataFrame
    reports: dict[str, Any]
    pruned: list[tuple[dict, str]]
    constants: BookConstants
    target: str
    axes: tuple[str, ...]

    def best(self) -> pd.Series:
        """The first-ranked candidate's row."""
        ok = self.table[self.table["rank"].notna()]
        if ok.empty:
            raise ValueError("no candidate compiled and fits")
        return ok.sort_values("rank").iloc[0]

    def write_tensorboard(self, logdir: str | os.PathLike) -> list[Path]:
        """Every candidate's report into ``logdir``, one run per candidate label."""
        return [r.write_tensorboard(logdir, label) for label, r in self.reports.items() if r]

    def to_csv(self, path: str | os.PathLike | None = None) -> str:
        text = self.table.to_csv(index=False)
        if path is not None:
            Path(path).write_text(text)
        return text

    def to_json(self, path: str | os.PathLike | None = None) -> str:
        text = self.table.to_json(orient="records", indent=1)
        if path is not None:
            Path(path).write_text(text)
        return text


def row(candidate: Candidate, result: dict, report, constants: BookConstants, **given) -> dict:
    """One candidate's row: axis sizes, knobs, the times, the fit, and why (see ``why``)."""
    sizes, knobs = dict(candidate.sizes), dict(candidate.knobs)
    out: dict[str, Any] = {"candidate": candidate.label, **sizes, **knobs}
    out.update({f"n_axes_{axis}": n for axis, n in candidate.n_axes})
    tokens = _given(given.get("tokens_per_step"), knobs)
    model_flops = _given(given.get("model_flops"), knobs)
    hidden = _given(given.get("hidden"), knobs)
    devices = math.prod(sizes.values())
    out.update(
        status=result["status"],
        error=result["error"],
        compile_s=result["compile_s"],
    )
    if report is None:
        out["why"] = f"compile error: {result['error']}"
        return out
    s = report.summary
    ops = report.ops
    step = s.get("step_time_scheduled_s")
    compute = float(ops["t_compute_s"].sum()) if "t_compute_s" in ops else math.nan
    memory_t = float(ops["t_memory_s"].sum()) if "t_memory_s" in ops else math.nan
    comm = s.get("comm_time_s", math.nan)
    if model_flops and step:
        mfu = model_flops / (devices * constants.C * step)
    else:
        mfu = s.get("flops", 0.0) / (constants.C * step) if step else math.nan
    fit = s.get("memory_fit") or {}
    mem = s.get("memory") or {}
    out.update(
        step_s=step,
        lower_s=s.get("step_time_lower_s"),
        upper_s=s.get("step_time_upper_s"),
        compute_s=compute,
        memory_s=memory_t,
        comm_s=comm,
        exposed_comm_s=s.get("exposed_comm_s"),
        exposed_comm_share=s.get("exposed_comm_share"),
        mfu_bound=mfu,
        tokens_per_s_per_chip=(tokens / step / devices) if tokens and step else math.nan,
        hbm_per_device=fit.get("need_bytes", mem.get("need_bytes")),
        fit=fit.get("verdict", "unknown"),
        bound=_bound(compute, memory_t, comm) if len(ops) else "unknown",
    )
    if fit.get("verdict") == "does not fit":
        out["status"] = STATUS_NO_FIT
    out["why"] = why(out, candidate, constants, tokens, hidden)
    return out


def _given(value, knobs: dict):
    return value(**knobs) if callable(value) else value


def _bound(compute: float, memory: float, comm: float) -> str:
    """What the compiled step is bound by: its largest total time."""
    times = {"compute": compute, "memory": memory, "communication": comm}
    times = {k: v for k, v in times.items() if v == v}
    return max(times, key=times.get) if times else "unknown"


def why(out: dict, candidate: Candidate, k: BookConstants, tokens, hidden) -> str:
    """Where this candidate stands, in the book's terms: the compiled step's bound and exposed
    communication, then each of the book's rules that applies, with its threshold.

    Rules (R = C/W_ici; X = product of the batch axes, Y = the model axis, N = X·Y, n_axes =
    torus axes a mesh axis spans): DP/FSDP compute-bound iff B/X > R/n_axes(X) (T1); TP
    communication-bound iff Y > n_axes(Y)·F/R (T2); FSDP×TP compute-bound iff B/N > 2·R²/F (T3).
    """
    sizes, spans = dict(candidate.sizes), dict(candidate.n_axes)
    parts = []
    if out["status"] == STATUS_NO_FIT:
        parts.append(
            f"does not fit: {out['hbm_per_device'] / 1e9:.3g} GB per device"
            if out.get("hbm_per_device")
            else "does not fit"
        )
    share = out.get("exposed_comm_share") or 0.0
    if out["bound"] == "unknown":  # the compiler refused it: no optimized program to judge
        parts.append("compiled: refused by the compiler, no program to time")
    else:
        parts.append(
            f"compiled: {out['bound']}-bound, {share:.0%} of the step exposed communication"
        )
    if k.ratio is None:
        return "; ".join(parts)
    r = k.ratio
    x_axes = [a for a in BATCH_AXES if sizes.get(a, 1) > 1]
    y_axes = [a for a in MODEL_AXES if sizes.get(a, 1) > 1]
    x = math.prod(sizes.get(a, 1) for a in BATCH_AXES)
    y = math.prod(sizes.get(a, 1) for a in MODEL_AXES)
    if tokens and x_axes:
        n = max(1, sum(spans.get(a, 1) for a in x_axes))
        per_chip = tokens / x
        threshold = r / n
        side = "compute" if per_chip > threshold else "communication"
        parts.append(
            f"book T1: B/X = {per_chip:,.0f} tokens {'>' if side == 'compute' else '≤'} "
            f"C/(W_ici·{n}) = {threshold:,.0f} ⇒ {side}-bound over {'×'.join(x_axes)}"
        )
    if hidden and y_axes:
        n = max(1, sum(spans.get(a, 1) for a in y_axes))
        threshold = n * hidden / r
        side = "communication" if y > threshold else "compute"
        parts.append(
            f"book T2: {'×'.join(y_axes)} axis {y} {'>' if y > threshold else '≤'} "
            f"n_axes·F/(C/W_ici) = {n}·{hidden}/{r:,.0f} = {threshold:.3g} ⇒ {side}-bound on "
            "the model axis"
        )
    if hidden and tokens and x_axes and y_axes:
        per_chip = tokens / (x * y)
        threshold = 2 * r * r / hidden
        side = "compute" if per_chip > threshold else "communication"
        parts.append(
            f"book T3: B/N = {per_chip:,.0f} {'>' if side == 'compute' else '≤'} "
            f"2·(C/W_ici)²/F = {threshold:,.0f} ⇒ {side}-bound (FSDP×TP)"
        )
    return "; ".join(parts)


def rank(table: pd.DataFrame) -> pd.DataFrame:
    """Rank the candidates that compiled and fit: most tokens/s per chip first where known, else
    the shortest predicted step."""
    table = table.copy()
    table["rank"] = pd.NA
    ok = table["status"] == STATUS_OK
    if not ok.any():
        return table
    tps = table.get("tokens_per_s_per_chip")
    if tps is not None and tps[ok].notna().all():
        order = table[ok].sort_values("tokens_per_s_per_chip", ascending=False, kind="stable")
    else:
        order = table[ok].sort_values("step_s", kind="stable")
    table.loc[order.index, "rank"] = range(1, len(order) + 1)
    table["rank"] = table["rank"].astype("Int64")
    sort_key = table["rank"].astype("Float64").fillna(math.inf)
    return table.assign(_k=sort_key).sort_values("_k", kind="stable").drop(columns="_k")


# -- running -------------------------------------------------------------------------------------


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


def _executor(executor, jobs: int | None):
    """(executor, owned): the user's, a Dask client's, or a spawn process pool we shut down."""
    if executor is not None:
        get = getattr(executor, "get_executor", None)  # a distributed.Client
        if get is not None and not isinstance(executor, concurrent.futures.Executor):
            return get(pure=False), False
        return executor, False
    workers = jobs or os.cpu_count() or 1
    # spawn, not fork: JAX in the parent holds threads a forked child would inherit half-alive.
    context = multiprocessing.get_context("spawn")
    return concurrent.futures.ProcessPoolExecutor(workers, mp_context=context), True


def explore(
    make_step,
    target: str,
    axes: Sequence[str] = ("data", "fsdp", "tensor"),
    knobs: Mapping[str, Iterable] | None = None,
    constraints: Constraints | Mapping | None = None,
    executor=None,
    jobs: int | None = None,
    cache: bool | str | os.PathLike = True,
    model_flops: float | Callable[..., float] | None = None,
    tokens_per_step: int | Callable[..., int] | None = None,
    hidden: int | Callable[..., int] | None = None,
    progress: bool = True,
    stream: TextIO | None = None,
) -> Exploration:
    """Compile ``make_step(mesh, **knob)`` for every candidate layout on ``target``; rank them.

    ``make_step`` (a function, ``"FILE.py:NAME"`` or ``"package.module:NAME"``) returns
    ``(fn, args, jit_kwargs)`` for a mesh of ``axes``. Candidates are compiled in ``jobs`` worker
    processes (default ``os.cpu_count()``) or on ``executor`` (any ``concurrent.futures``
    executor, or a ``distributed.Client``), each through the HLO cache (``cache``, as for
    :func:`hlo_roofline.analyze`), so a second run compiles nothing again. ``tokens_per_step``,
    ``model_flops`` and ``hidden`` (the MLP's F, for the book's TP rules) may be numbers or
    functions of the knobs. A candidate that fails to compile is a row with its error.
    """
    from hlo_roofline import chips, targets

    axes = tuple(axes)
    if len(set(axes)) != len(axes) or not axes:
        raise ValueError(f"axes must be distinct names, got {axes}")
    spec = targets.parse_target(target)
    constants = book_constants(chips.get(spec.chip))
    reference = _reference(make_step)
    found, pruned = candidates(spec.spec, axes, knobs, constraints)
    jobs_list = [
        {
            "reference": reference,
            "target": spec.spec,
            "sizes": c.sizes,
            "knobs": c.knobs,
            "cache": str(cache) if isinstance(cache, os.PathLike) else cache,
        }
        for c in found
    ]
    results: dict[int, dict] = {}
    bar = Progress(len(found), stream, progress)
    if found:
        pool, owned = _executor(executor, jobs)
        try:
            futures = {pool.submit(_evaluate, job): i for i, job in enumerate(jobs_list)}
            for future in concurrent.futures.as_completed(futures):
                i = futures[future]
                try:
                    results[i] = future.result()
                except Exception as exc:  # the worker itself died
                    results[i] = {
                        "status": STATUS_ERROR,
                        "error": f"worker failed: {type(exc).__name__}: {_one_line(exc)}",
                        "compile_s": math.nan,
                        "report": None,
                    }
                bar.step(found[i].label)
        finally:
            if owned:
                pool.shutdown(wait=True, cancel_futures=True)
    from hlo_roofline.report import Report

    rows, reports = [], {}
    for i, c in enumerate(found):
        result = results[i]
        report = Report.from_dict(result["report"]) if result["report"] else None
        reports[c.label] = report
        rows.append(
            row(
                c,
                result,
                report,
                constants,
                tokens_per_step=tokens_per_step,
                model_flops=model_flops,
                hidden=hidden,
            )
        )
    table = rank(pd.DataFrame(rows)) if rows else pd.DataFrame()
    return Exploration(table, reports, pruned, constants, spec.spec, axes)
