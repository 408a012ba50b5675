"""``explore()``: validate everything (knobs, constraints, flags, make_step) before any compile,
run the candidates, and rank them into an :class:`~hlo_roofline.explorer.results.Exploration`."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, TextIO

import pandas as pd

from hlo_roofline.entries import parse_entry
from hlo_roofline.explorer.book import book_constants
from hlo_roofline.explorer.layouts import Constraints, candidates, is_number, per_knob, positive
from hlo_roofline.explorer.ranking import rank
from hlo_roofline.explorer.results import Exploration, flags_text, per_device, row
from hlo_roofline.explorer.status import STATUS_NOT_RUN
from hlo_roofline.explorer.step import check_knobs, make_step_reference, parameters_of_step
from hlo_roofline.explorer.workers import (
    FLAG_VARIABLES,
    WORKER_VARIABLE,
    Progress,
    compiler_flags,
    failed_result,
    run_on_executor,
    run_pool,
    user_executor,
)

if TYPE_CHECKING:
    from hlo_roofline.targets import Target


def default_name(make_step, target: str) -> str:
    """An exploration's directory name in a logdir: make_step's name and the target
    (``make_mlp_step@v5e-2x2``)."""
    if isinstance(make_step, str):
        name = parse_entry(make_step).name
    else:
        name = getattr(make_step, "__name__", "make_step")
    return re.sub(r"[^A-Za-z0-9_.@-]", "-", f"{name}@{target}")


def explore(
    make_step,
    target: str | Target,
    axes: Sequence[str] = ("data", "fsdp", "tensor"),
    knobs: Mapping[str, Iterable] | None = None,
    constraints: Constraints | Mapping | None = None,
    executor=None,
    jobs: int | None = None,
    cache: bool | str | os.PathLike = True,
    model_flops: float | str | Callable[..., float] | None = None,
    tokens_per_step: float | str | Callable[..., float] | None = None,
    hidden: int | Callable[..., int] | None = None,
    progress: bool = True,
    stream: TextIO | None = None,
    timeout: float | None = None,
    xla_flags: Iterable[str] = (),
    libtpu_flags: Iterable[str] = (),
    name: str | None = None,
    allow_split_physical_axes: bool = False,
) -> Exploration:
    """Compile ``make_step(mesh, **knob)`` for every candidate layout on ``target``; rank them.

    ``make_step`` (a function, ``"FILE.py:NAME"`` or ``"package.module:NAME"``) returns
    ``(fn, args, jit_kwargs)`` for a mesh of ``axes``, or ``(fn, args, jit_kwargs, work)`` with
    ``work`` the step's ``{"tokens": ..., "model_flops": ...}`` (all devices together): what the
    ranking counts throughput in. It may raise :class:`Refused` for a layout the model cannot
    take. Its name, its parameters against the knobs' names and types, and the constraints'
    axes are checked before anything compiles (a ValueError).

    Candidates are compiled in ``jobs`` worker processes of our own (default ``os.cpu_count()``):
    a candidate whose worker dies is retried once on a fresh one, one running past ``timeout``
    seconds is killed, and the workers exit with this process. Or on ``executor`` (any
    ``concurrent.futures`` executor, or a ``distributed.Client``). Each compiles through the HLO
    cache (``cache``, as for :func:`hlo_roofline.analyze`), so a second run compiles nothing
    again. ``tokens_per_step``, ``model_flops`` (each candidate's report gets its share per
    device, and the row's ``mfu_model`` is the report's) and ``hidden`` (the MLP's F, for the
    book's TP rules) may be numbers, functions of the knobs, or (the first two) expressions of the
    knobs (``"batch*2048"``, :class:`KnobExpression`). ``xla_flags`` / ``libtpu_flags`` go to
    every worker's ``XLA_FLAGS`` / ``LIBTPU_INIT_ARGS`` (and into each report's summary).
    ``allow_split_physical_axes`` lets a mesh axis take part of a torus axis (more layouts map).

    A candidate that fails is a row with its status, error and traceback: the exploration is then
    not :attr:`~Exploration.complete`.
    """
    from hlo_roofline import chips, targets

    if os.environ.get(WORKER_VARIABLE):
        raise RuntimeError(
            "explore() called inside an explorer worker: the file make_step is loaded from runs "
            'explore() when loaded; put that call under `if __name__ == "__main__":`'
        )
    axes = tuple(axes)
    if len(set(axes)) != len(axes) or not axes or not all(isinstance(a, str) for a in axes):
        raise ValueError(f"axes must be distinct names, got {axes}")
    if timeout is not None and not (is_number(timeout) and math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"timeout must be a number of seconds above 0, not {timeout!r}")
    knobs = {k: list(v) if not isinstance(v, str) else [v] for k, v in (knobs or {}).items()}
    for knob, values in knobs.items():
        if not values:
            raise ValueError(f"knob {knob!r} has no values")
    flags = compiler_flags(xla_flags, libtpu_flags)
    spec = targets.parse_target(target)
    constants = book_constants(chips.get(spec.chip))
    reference = make_step_reference(make_step)
    what = (
        make_step if isinstance(make_step, str) else getattr(make_step, "__qualname__", "make_step")
    )
    check_knobs(parameters_of_step(make_step, reference), knobs, str(what))
    tokens_of = per_knob(tokens_per_step, "tokens_per_step", knobs)
    flops_of = per_knob(model_flops, "model_flops", knobs)
    if hidden is not None and not callable(hidden):
        positive(hidden, "hidden")
    found, pruned = candidates(spec, axes, knobs, constraints, allow_split_physical_axes)
    jobs_list = []
    for c in found:  # every expression evaluated for every candidate before anything compiles
        values = dict(c.knobs)
        if tokens_of is not None:
            tokens_of(**values)
        flops = flops_of(**values) if flops_of is not None else None
        jobs_list.append({
            "reference": reference,
            "target": spec,  # the parsed Target: a worker reads no string again
            "sizes": c.sizes,
            "knobs": c.knobs,
            "cache": str(cache) if isinstance(cache, os.PathLike) else cache,
            "model_flops": per_device(flops, c),
            "flags": {FLAG_VARIABLES[k]: v for k, v in flags.items()},
            "allow_split_physical_axes": allow_split_physical_axes,
        })  # fmt: skip
    results: dict[int, dict] = {}
    bar = Progress(len(found), stream, progress)

    def on_result(i: int, result: dict) -> None:
        results[i] = result
        bar.step(found[i].label)

    if found:
        if executor is None:
            workers = min(jobs or os.cpu_count() or 1, len(found))
            run_pool(jobs_list, workers, timeout, jobs_list[0]["flags"], on_result)
        else:
            run_on_executor(user_executor(executor), jobs_list, timeout, on_result)
    from hlo_roofline.report import Report

    wanted_flags = flags_text({
        var: " ".join([os.environ.get(var, "").strip(), *flags.get(kind, [])]).strip()
        for kind, var in FLAG_VARIABLES.items()
    })  # fmt: skip
    rows, reports = [], {}
    for i, c in enumerate(found):
        result = results.get(i) or failed_result(STATUS_NOT_RUN, "never run", None)
        report = Report.from_dict(result["report"]) if result["report"] else None
        reports[c.label] = report
        rows.append(
            row(c, result, report, constants, tokens_per_step=tokens_of, hidden=hidden,
                flags=wanted_flags)
        )  # fmt: skip
    table = rank(pd.DataFrame(rows), list(knobs)) if rows else _empty_table(axes, knobs)
    return Exploration(
        table, reports, pruned, constants, spec.spec, axes, flags,
        default_name(make_step, spec.spec) if name is None else name, tuple(knobs),
    )  # fmt: skip


def _empty_table(axes: Sequence[str], knobs: Mapping) -> pd.DataFrame:
    """The table of an exploration with no candidate: its columns, no rows."""
    columns = [
        "candidate",
        *axes,
        *knobs,
        "status",
        "error",
        "step_s",
        "why",
        "rank",
        "gap_to_best",
    ]
    return pd.DataFrame({c: pd.Series(dtype=object) for c in columns})
