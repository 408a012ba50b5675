"""Run a step under ``jax.profiler`` and join the trace it writes: :func:`measure`.

Compiles (jits) the step, runs warm-up calls outside the trace, then ``steps`` annotated steps
inside it, and reads the trace back through :func:`hlo_roofline.measured.join.joined_reports`.
"""

from __future__ import annotations

import shutil
import tempfile
import warnings
from pathlib import Path

import pandas as pd

from hlo_roofline.compile import jitted, local_chip
from hlo_roofline.host import host_chip
from hlo_roofline.measured.join import joined_reports, resolve_chip
from hlo_roofline.placement import map_arrays
from hlo_roofline.report import Report
from hlo_roofline.xplane import TraceError

__all__ = ["measure"]


def measure(
    fn,
    *args,
    steps: int = 10,
    warmup: int = 2,
    chip=None,
    logdir: str | Path | None = None,
) -> Report:
    """Profile ``fn(*args)`` for ``steps`` steps and return its report with measured columns.

    ``fn`` is jitted if it is not already; ``warmup`` calls (compilation, caches) run before the
    trace. Each step runs under a ``StepTraceAnnotation`` and waits for its outputs. ``chip``
    defaults to the local accelerator, or on a CPU to the ``host`` chip (this machine's measured
    peaks, see :mod:`hlo_roofline.host`). The trace goes to ``logdir`` when given (viewable in
    TensorBoard's profile tab), else to a temporary directory that is removed afterwards.
    For clean per-op times on CPU run the process on one core (docs/measure.md).
    ``jax.ShapeDtypeStruct`` arguments (as the CLI's steps use) are run as arrays of zeros.
    """
    import jax
    import jax.numpy as jnp

    if steps < 1:
        raise ValueError(f"steps must be ≥ 1, not {steps}")
    args = map_arrays(
        lambda x: jnp.zeros(x.shape, x.dtype) if isinstance(x, jax.ShapeDtypeStruct) else x, args
    )  # through each framework's own view of its objects (nnx.split / merge)
    jitted_step = jitted(fn, {})
    for _ in range(max(warmup, 0)):
        jax.block_until_ready(jitted_step(*args))
    if chip is None:
        chip = local_chip() if jax.devices()[0].platform != "cpu" else "host"
    chip = resolve_chip(chip)  # before tracing: the host benchmark must not land in the trace
    scratch = logdir is None
    directory = Path(tempfile.mkdtemp(prefix="hlo_roofline_trace_") if scratch else logdir)
    before = {p: p.stat().st_mtime_ns for p in directory.rglob("*.xplane.pb")}
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0  # python events only add overhead to the steps
    try:
        jax.profiler.start_trace(str(directory), profiler_options=options)
        try:
            for step in range(steps):
                with jax.profiler.StepTraceAnnotation("hlo_roofline_step", step_num=step):
                    jax.block_until_ready(jitted_step(*args))
        finally:
            jax.profiler.stop_trace()
        fresh = [p for p in directory.rglob("*.xplane.pb") if before.get(p) != p.stat().st_mtime_ns]
        if not fresh:
            raise TraceError(f"jax.profiler wrote no new trace under {directory}")
        reports, files = joined_reports(max(fresh, key=lambda p: p.stat().st_mtime_ns), chip)
    finally:
        if scratch:
            shutil.rmtree(directory, ignore_errors=True)
    name, report = max(reports.items(), key=lambda kv: kv[1].summary["measured_op_s"])
    causes = report.ops.get("measurement_cause", pd.Series(dtype=object))
    if getattr(chip, "key", None) == "host" and (causes == "host_roof_low").any():
        # An op beat the host's roof (not by a cache): measure the roof again now that the steps
        # are done (the best of all measurements is kept) and judge again; what still beats it
        # says why.
        report = report.classify(host_chip(refresh=True))
        report.summary["measured_host_roof_remeasured"] = True
    if len(reports) > 1:
        others = {k: r.summary["measured_op_s"] for k, r in reports.items() if k != name}
        report.summary["measured_other_programs"] = others
        warnings.warn(
            f"{len(others)} other program(s) ran inside the steps and are not in this report: "
            + ", ".join(others),
            stacklevel=2,
        )
    report.summary["compiled_for"] = "local"
    report.summary["how"] = "profiled locally; optimized HLO embedded in the trace"
    if scratch:
        report.summary.pop("measured_trace", None)
    else:
        report.summary["measured_trace"] = str(files[0])
    return report
