"""Join measured per-op times from a ``jax.profiler`` trace with the static per-op report.

``measure(step, *args)`` profiles a few steps, reads the trace and returns the step's report with
measured columns; ``read_trace(logdir)`` does the same for a trace written earlier, on any backend.
The report is computed from the optimized HLO *embedded in the trace* (never a fresh compile, which
could rename instructions), so every op event names a row. Join rules (docs/measure.md):

* key ``(program_id, op name)``; an op's time in one step is the sum of its executions in that
  step (loop bodies: all iterations), and ``measured_s`` is the median over steps;
* control flow (while/conditional/call) keeps only its self time (parent − children); an event with
  no row of its own (a fused op on TPU, a branch op under ``cost_model="xla"``) adds to the nearest
  enclosing op that has one; opened containers get a row of their own for their self time;
* a step is a ``StepTraceAnnotation`` window (or a device ``Steps`` event); without any, each
  execution of the program is one step.

``hlo_roofline.measure`` and ``hlo_roofline.read_trace`` are this module's two entry points.
"""

from __future__ import annotations

import bisect
import contextlib
import math
import re
import shutil
import statistics
import tempfile
import warnings
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from hlo_roofline import chips, schema, xplane
from hlo_roofline.api import analyze_hlo, jitted, local_chip
from hlo_roofline.efficiency import (  # noqa: F401  (measured.* names kept for callers)
    HOST_ROOF_LOW,
    SHORTEST_TIMED_S,
    add_efficiency,
    problem,
    problem_count,
)
from hlo_roofline.hlo import Module, attrs, parse
from hlo_roofline.host import host_chip
from hlo_roofline.report import Report
from hlo_roofline.xplane import Event, Plane, TraceError

__all__ = ["MEASURED_COLUMNS", "OverlapWarning", "TraceError", "measure", "read_trace"]

MEASURED_COLUMNS = schema.names("measured", "float")  # the numbers the join adds
CONTAINERS = frozenset({"while", "conditional", "call"})
CONTAINER_NOTE = "control flow: measured self time only (its body ops have rows of their own)"
_HLO_STATS = ("Hlo Proto", "hlo_proto")
_MODULE_ID = re.compile(r"\((\d+)\)$")


class OverlapWarning(UserWarning):
    """Ops ran concurrently in the trace: per-op latencies overlap and their sum double-counts."""


# -- reading the trace -------------------------------------------------------------------------


def trace_files(path_or_dir: str | Path) -> list[Path]:
    """The ``*.xplane.pb`` files of one capture: a file, a run directory, or a logdir (latest run)."""
    path = Path(path_or_dir)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise TraceError(f"no trace at {path}")
    files = sorted(path.rglob("*.xplane.pb"))
    if not files:
        raise TraceError(f"no '*.xplane.pb' under {path} (expected logdir/plugins/profile/<run>/)")
    latest_run = max({f.parent for f in files}, key=lambda d: (d.name, str(d)))  # timestamps
    return [f for f in files if f.parent == latest_run]


@dataclass(frozen=True)
class Program:
    """One compiled program of the trace: its id, name and serialized ``xla.HloProto``."""

    program_id: int
    name: str
    hlo_proto: bytes

    def hlo_text(self) -> str:
        """The optimized HLO as text, via jaxlib's module class (no compilation)."""
        from jaxlib import _hlo

        try:
            module = _hlo.HloModule.from_serialized_hlo_module_proto(
                xplane.hlo_module_bytes(self.hlo_proto)
            )
        except TraceError:
            raise
        except Exception as exc:  # jaxlib raises its own runtime error types
            raise TraceError(f"embedded HLO of {self.name} cannot be read ({exc})") from None
        return module.to_string()


def programs(planes: Iterable[Plane]) -> dict[int, Program]:
    """Programs whose optimized HLO the trace embeds (``/host:metadata``), by program id."""
    found: dict[int, Program] = {}
    for plane in planes:
        if plane.name != "/host:metadata":
            continue
        for metadata_id, (name, stats) in plane.metadata.items():
            proto = next((stats[k] for k in _HLO_STATS if k in stats), None)
            if isinstance(proto, bytes):
                program_id = int(stats.get("program_id", metadata_id))
                found.setdefault(program_id, Program(program_id, name, proto))
    return found


@dataclass(slots=True)
class OpEvent:
    """One execution of one HLO op on one device, with the completion time used as its end."""

    program_id: int
    op: str
    start_ps: int
    launch_end_ps: int
    host: str
    device: str
    line: int
    execution: object
    done_ps: int | None = None  # CPU ``end: <op>`` event: when the op's result became ready
    end_ps: int = 0

    @property
    def duration_ps(self) -> int:
        return self.end_ps - self.start_ps


def _program_id(event: Event, module_event: Event | None, by_name: dict[str, int]) -> int | None:
    stats = event.stats
    if "program_id" in stats:
        return int(stats["program_id"])
    for name in (stats.get("hlo_module"), module_event.name if module_event else None):
        if isinstance(name, str):
            if m := _MODULE_ID.search(name):
                return int(m.group(1))
            if name in by_name:
                return by_name[name]
    return None


def _windows(events: list[Event]) -> list[Event]:
    return sorted(events, key=lambda e: e.start_ps)


def _enclosing(windows: list[Event], starts: list[int], t: int) -> int | None:
    i = bisect.bisect_right(starts, t) - 1
    return i if i >= 0 and t <= windows[i].end_ps else None


def op_events(planes: list[Plane], known: dict[int, Program], host: str = "") -> list[OpEvent]:
    """Every HLO op execution of one host's planes: CPU thunks and device ``XLA Ops`` events.

    ``host`` prefixes device names when a capture holds several hosts' files.
    """
    by_name = {_MODULE_ID.sub("", p.name): pid for pid, p in known.items()}
    found: list[OpEvent] = []
    for plane in planes:
        on_host = plane.name.startswith("/host:")
        if plane.name == "/host:metadata" or not (on_host or plane.name.startswith("/device:")):
            continue
        modules = _windows(
            [e for line in plane.lines if line.name == "XLA Modules" for e in line.events]
        )
        module_starts = [e.start_ps for e in modules]
        done: dict[int, int] = {}
        for _, event in plane.events():
            if event.name.startswith("end: ") and "_c" in event.stats:
                done[event.stats["_c"]] = event.start_ps
        lines = plane.lines
        if not on_host and (xla_ops := plane.line("XLA Ops")) is not None:
            lines = [xla_ops]  # other lines (streams, TraceMe) would count the same ops twice
        for line, event in ((ln, ev) for ln in lines for ev in ln.events):
            op = event.stats.get("hlo_op")
            if op is None and line.name == "XLA Ops":
                op = event.name
            if not isinstance(op, str) or not op:
                continue
            index = _enclosing(modules, module_starts, event.start_ps) if modules else None
            module_event = modules[index] if index is not None else None
            program_id = _program_id(event, module_event, by_name)
            if program_id is None and len(known) == 1:
                program_id = next(iter(known))
            if program_id is None:
                continue
            run = event.stats.get("run_id")
            execution = run if run is not None else ("module", index) if modules else None
            found.append(
                OpEvent(
                    program_id, op, event.start_ps, event.end_ps, host, host + plane.name,
                    line.id, execution, done.get(event.stats.get("_p")) if on_host else None,
                )
            )  # fmt: skip
    return found


@dataclass(frozen=True)
class Steps:
    """Step events of one device, sorted by start, and a lookup of the step holding a time."""

    events: list[Event]
    starts: list[int]

    @classmethod
    def of(cls, events: Iterable[Event]) -> Steps:
        ordered = _windows(list(events))
        return cls(ordered, [e.start_ps for e in ordered])

    def index(self, t_ps: int) -> int | None:
        return _enclosing(self.events, self.starts, t_ps)


def step_windows(planes: list[Plane], host: str = "") -> dict[str, Steps]:
    """Step events: ``StepTraceAnnotation`` (keyed by ``host``) and device ``Steps`` lines."""
    steps: dict[str, list[Event]] = {}
    for plane in planes:
        if plane.name.startswith("/host:"):
            annotated = [e for _, e in plane.events() if "step_num" in e.stats]
            if annotated:
                steps.setdefault(host, []).extend(annotated)
        elif plane.name.startswith("/device:") and (line := plane.line("Steps")) is not None:
            steps[host + plane.name] = list(line.events)
    return {device: Steps.of(events) for device, events in steps.items() if events}


# -- per-op time: completion, nesting, attribution ---------------------------------------------


@dataclass
class _Structure:
    """What the join needs from the HLO: where each op lives, who calls it, who uses its result."""

    computation: dict[str, str] = field(default_factory=dict)
    callers: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    users: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    @classmethod
    def of(cls, module: Module) -> _Structure:
        s = cls()
        for comp in module.computations.values():
            for instr in comp.instructions:
                s.computation[instr.name] = comp.name
                for called in instr.called:
                    s.callers[called.name].append(instr.name)
                for operand in instr.operands:
                    s.users[operand.name].append(instr.name)
        return s


@dataclass
class _Execution:
    """Per-op attributed time and event counts of one execution of a program on one device."""

    time_ps: dict[str, float]
    events: dict[str, int]
    lines: int
    late_ends: int
    span_ps: tuple[int, int]


def _complete(events: list[OpEvent], structure: _Structure) -> int:
    """Set each event's end: its ``end:`` time capped by the first user's start; count late ends."""
    starts: dict[str, list[int]] = defaultdict(list)
    for e in events:
        starts[e.op].append(e.start_ps)
    late = 0
    for e in events:
        e.end_ps = e.launch_end_ps
        if e.done_ps is None or e.done_ps <= e.launch_end_ps:
            continue
        first_user = min(
            (s[i] for u in structure.users.get(e.op, ()) if (s := starts.get(u))
             if (i := bisect.bisect_right(s, e.start_ps)) < len(s)),
            default=None,
        )  # fmt: skip
        if first_user is not None and e.done_ps > first_user:
            late += 1
            e.end_ps = max(e.launch_end_ps, first_user)
        else:
            e.end_ps = e.done_ps
    return late


def _attribute(events: list[OpEvent], structure: _Structure, rows: set[str]) -> _Execution:
    """Self time per event (parent − children), given to the event's row or nearest ancestor's."""
    events = sorted(events, key=lambda e: (e.start_ps, -e.launch_end_ps))
    late = _complete(events, structure)
    by_op: dict[str, list[int]] = defaultdict(list)
    for i, e in enumerate(events):
        by_op[e.op].append(i)
    parent: list[int | None] = [None] * len(events)
    children_ps = [0] * len(events)
    for i, e in enumerate(events):
        comp = structure.computation.get(e.op)
        best = None
        for caller in structure.callers.get(comp, ()) if comp else ():
            indices = by_op.get(caller, [])
            k = bisect.bisect_left(indices, i) - 1  # the caller's last event started before e
            if k >= 0 and e.start_ps < events[indices[k]].end_ps:
                best = indices[k] if best is None else max(best, indices[k])
        if best is not None:
            parent[i] = best
            children_ps[best] += e.duration_ps
    time_ps: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for i, e in enumerate(events):
        counts[e.op] += 1
        target = i
        while events[target].op not in rows and parent[target] is not None:
            target = parent[target]
        owner = events[target].op if events[target].op in rows else e.op
        time_ps[owner] += max(0, e.duration_ps - children_ps[i])
    span = (min(e.start_ps for e in events), max(e.end_ps for e in events))
    return _Execution(time_ps, counts, len({e.line for e in events}), late, span)


# -- joining -----------------------------------------------------------------------------------


@dataclass
class _Measured:
    per_step: dict[str, list[float]]  # op -> seconds in each step
    count: dict[str, float]  # op -> median events per step
    steps_from: str  # "step annotations", "device Steps events" or "executions"
    step_s: float  # median step wall time
    coverage: float  # median over steps of (Σ per-op time in the step / the step's wall time)
    steps: int
    overlap: list[str]
    devices: list[str]


def _per_step(
    events: list[OpEvent], structure: _Structure, rows: set[str], windows: dict[str, Steps]
) -> _Measured:
    """Group executions into steps and sum each op over a step (mean over devices)."""
    executions: dict[tuple[str, str, object], list[OpEvent]] = defaultdict(list)
    for e in events:
        execution = e.execution
        if execution is None:  # no run id, no module event: one execution per step window
            steps = windows.get(e.device) or windows.get(e.host)
            execution = ("step", steps.index(e.start_ps) if steps else None)
        executions[e.host, e.device, execution].append(e)
    done = {key: _attribute(group, structure, rows) for key, group in executions.items()}
    # step key -> device -> executions; a step is a window holding the execution's start
    grouped: dict[object, dict[str, list[_Execution]]] = defaultdict(lambda: defaultdict(list))
    step_wall: dict[object, float] = {}
    ordinal: dict[str, int] = defaultdict(int)  # without step events: the k-th execution per device
    for (host, device, _), result in sorted(done.items(), key=lambda kv: kv[1].span_ps[0]):
        steps = windows.get(device) or windows.get(host)
        index = steps.index(result.span_ps[0]) if steps else None
        if index is not None:
            key: tuple = ("window", device in windows, index)
            wall = steps.events[index].duration_ps * 1e-12
        elif windows:
            continue  # outside every step (warm-up in the trace, another call): not a step's work
        else:
            key = ("execution", ordinal[device])
            ordinal[device] += 1
            wall = (result.span_ps[1] - result.span_ps[0]) * 1e-12
        step_wall[key] = max(step_wall.get(key, 0.0), wall)  # the slowest device ends the step
        grouped[key][device].append(result)
    if not grouped:
        raise TraceError("no execution of the program falls inside a step of the trace")
    ops = {op for results in done.values() for op in results.time_ps}
    per_step: dict[str, list[float]] = {op: [] for op in ops}
    counts: dict[str, list[float]] = {op: [] for op in ops}
    coverage: list[float] = []
    for key, by_device in grouped.items():
        for op in ops:
            per_device = [sum(r.time_ps.get(op, 0.0) for r in rs) for rs in by_device.values()]
            events_per_device = [sum(r.events.get(op, 0) for r in rs) for rs in by_device.values()]
            per_step[op].append(statistics.fmean(per_device) * 1e-12)
            counts[op].append(statistics.fmean(events_per_device))
        step_total = sum(times[-1] for times in per_step.values())
        coverage.append(step_total / step_wall[key] if step_wall[key] > 0 else math.nan)
    overlap = []
    lines = max(r.lines for r in done.values())
    if lines > 1 and any("/host:" in device for _, device, _ in done):
        overlap.append(f"op events of one execution on {lines} threads")
    elif lines > 1:
        overlap.append(f"op events of one execution on {lines} device lines (streams)")
    if late := sum(r.late_ends for r in done.values()):
        overlap.append(f"{late} op(s) finished after a dependent op had started")
    sources = {key[1] for key in grouped if key[0] == "window"}
    steps_from = (
        "executions" if not sources
        else "device Steps events" if sources == {True} else "step annotations"
    )  # fmt: skip
    return _Measured(
        per_step,
        {op: float(statistics.median(c)) for op, c in counts.items()},
        steps_from,
        float(statistics.median(step_wall[k] for k in grouped)),
        float(statistics.median(coverage)),
        len(grouped),
        overlap,
        sorted({device for _, device, _ in done}),
    )


def _blank(column: pd.Series):
    if pd.api.types.is_bool_dtype(column):
        return False
    return 0 if pd.api.types.is_numeric_dtype(column) else ""


def _container_rows(report: Report, module: Module, measured: _Measured) -> pd.DataFrame:
    """Rows for opened control flow that shows up in the trace: they carry its self time."""
    structure_ops = {i.name: i for i in module.instructions()}
    names = [op for op in measured.per_step if op not in set(report.ops["name"])]
    if not names:
        return report.ops
    blank = {c: _blank(report.ops[c]) for c in report.ops.columns}
    extra = []
    for op in names:
        instr = structure_ops.get(op)
        if instr is None:
            continue
        meta = attrs.metadata(instr)
        row = dict(blank)
        row.update(
            name=op,
            opcode=instr.opcode,
            computation=instr.computation.name,
            count=measured.count.get(op, 0.0),
            op_name=meta.op_name,
            source=attrs.source(instr, module),
            note=CONTAINER_NOTE if instr.opcode in CONTAINERS else "no row in the static report",
        )
        extra.append(row)
    if not extra:
        return report.ops
    return pd.concat(
        [report.ops, pd.DataFrame(extra, columns=report.ops.columns)], ignore_index=True
    )


def join(report: Report, module: Module, measured: _Measured, chip) -> Report:
    """The report with measured columns (and re-classified against ``chip`` when given)."""
    ops = _container_rows(report, module, measured)
    per_step = measured.per_step
    names = ops["name"]

    def column(f) -> list[float]:
        return [f(per_step[n]) if n in per_step else np.nan for n in names]

    ops = ops.assign(
        measured_s=column(statistics.median),
        measured_p10_s=column(lambda v: float(np.percentile(v, 10))),
        measured_p90_s=column(lambda v: float(np.percentile(v, 90))),
        measured_count=[measured.count.get(n, np.nan) for n in names],
    )
    joined = Report(ops, dict(report.summary), report.module)
    if chip is not None:
        joined = joined.classify(chip)
    joined.ops = add_efficiency(joined.ops, chip)
    total = float(np.nansum(joined.ops["measured_s"]))
    unmatched = sorted(set(per_step) - set(names))  # event names the embedded HLO does not have
    joined.summary.update(
        measured_step_s=measured.step_s,
        measured_coverage=measured.coverage,
        measured_op_s=total,
        measured_steps=measured.steps,
        measured_steps_from=measured.steps_from,
        measured_devices=measured.devices,
        measured_overlap=bool(measured.overlap),
        measured_unmatched_ops=unmatched,
        measured_problems=problem_count(joined.ops),
    )
    return joined


def _resolve_chip(chip):
    if isinstance(chip, str) and chip.strip().lower() == "host":
        return host_chip()
    return chips.get(chip) if isinstance(chip, str) else chip


def _device_chip(planes: list[Plane]):
    """The chip a device trace names in its plane stats, when the database knows it."""
    for plane in planes:
        if not plane.name.startswith("/device:"):
            continue
        for key in ("device_type_string", "device_type", "device_name"):
            name = plane.stats.get(key)
            if isinstance(name, str) and name:
                with contextlib.suppress(chips.UnknownChipError):
                    return chips.get(name)
    return None


def _measure_programs(by_program, analyzed, windows: dict[str, Steps]) -> dict[int, _Measured]:
    """Per-step times of every program that ran inside a step (or at all, without steps)."""
    found = {}
    for program_id, events in by_program.items():
        _, report, structure = analyzed[program_id]
        with contextlib.suppress(TraceError):  # raised when it ran outside every step
            found[program_id] = _per_step(events, structure, set(report.ops["name"]), windows)
    return found


def _reports(path_or_dir, chip) -> tuple[dict[str, Report], list[Path]]:
    files = trace_files(path_or_dir)
    per_file = {f: xplane.load(f) for f in files}
    planes = [plane for file_planes in per_file.values() for plane in file_planes]
    known = programs(planes)
    if not known:
        raise TraceError(
            f"{files[0]} embeds no optimized HLO (no '/host:metadata' plane with 'Hlo Proto'): "
            "capture with jax.profiler and ProfileOptions.enable_hlo_proto left on"
        )
    events: list[OpEvent] = []
    windows: dict[str, Steps] = {}
    for f, file_planes in per_file.items():
        host = f.name.removesuffix(".xplane.pb") + ":" if len(files) > 1 else ""
        events += op_events(file_planes, known, host)
        windows.update(step_windows(file_planes, host))
    if not events:
        raise TraceError(f"{files[0]} holds no HLO op events (was a step run while tracing?)")
    chip = _resolve_chip(chip) if chip is not None else _device_chip(planes)
    by_program: dict[int, list[OpEvent]] = defaultdict(list)
    for e in events:
        if e.program_id in known:
            by_program[e.program_id].append(e)
    if not by_program:
        raise TraceError(f"{files[0]}: no op event names a program whose HLO the trace embeds")
    analyzed = {}
    for program_id in by_program:
        module = parse(known[program_id].hlo_text())
        report = analyze_hlo(module)
        analyzed[program_id] = module, report, _Structure.of(module)
    measured = _measure_programs(by_program, analyzed, windows)
    if not measured and windows:  # device clocks not aligned with the host's step annotations?
        measured = _measure_programs(by_program, analyzed, {})
    reports: dict[str, Report] = {}
    overlaps: list[str] = []
    for program_id, result in measured.items():
        program = known[program_id]
        module, report, _ = analyzed[program_id]
        joined = join(report, module, result, chip)
        joined.summary.update(
            compiled_for="trace",
            how=f"optimized HLO embedded in the trace {files[0]}",
            measured_trace=str(files[0]),
            measured_program=program.name,
        )
        reports[program.name] = joined
        overlaps += [f"{program.name}: {o}" for o in result.overlap]
    if overlaps:
        warnings.warn(
            "the trace shows overlapping ops (" + "; ".join(overlaps) + "): per-op times are "
            "latencies that overlap, so they double-count. Capture on one core (taskset -c 0, or "
            "os.sched_setaffinity before importing jax) for clean per-op times.",
            OverlapWarning,
            stacklevel=3,
        )
    return reports, files


def read_trace(path_or_dir: str | Path, chip=None) -> Report | dict[str, Report]:
    """Reports with measured columns from an existing ``jax.profiler`` trace (no recompilation).

    ``path_or_dir`` is an ``*.xplane.pb``, a run directory, or a logdir (its latest run under
    ``plugins/profile``). ``chip`` classifies the ops (``"host"`` for this machine's CPU); by
    default a device trace is judged against the chip its planes name, a CPU trace is left
    unclassified (no ``efficiency``). One report, or a dict by program name when several
    programs ran. Unreadable traces raise :class:`TraceError`.
    """
    reports, _ = _reports(path_or_dir, chip)
    return next(iter(reports.values())) if len(reports) == 1 else reports


# -- profiling a step --------------------------------------------------------------------------


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
    args = jax.tree.map(
        lambda x: jnp.zeros(x.shape, x.dtype) if isinstance(x, jax.ShapeDtypeStruct) else x, args
    )
    jitted_step = jitted(fn, {})
    for _ in range(max(warmup, 0)):
        jax.block_until_ready(jitted_step(*args))
    if chip is None:
        chip = local_chip() if jax.devices()[0].platform != "cpu" else "host"
    chip = _resolve_chip(chip)  # before tracing: the host benchmark must not land in the trace
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
        reports, files = _reports(max(fresh, key=lambda p: p.stat().st_mtime_ns), chip)
    finally:
        if scratch:
            shutil.rmtree(directory, ignore_errors=True)
    name, report = max(reports.items(), key=lambda kv: kv[1].summary["measured_op_s"])
    problems = report.ops.get("measurement_problem", pd.Series(dtype=object))
    if getattr(chip, "key", None) == "host" and problems.str.contains(HOST_ROOF_LOW).any():
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
