"""Which HLO op each trace event's time belongs to, and how much of it falls in each step.

An op's time in one step is the sum of its executions in that step (loop bodies: all iterations);
control flow (while/conditional/call) keeps only its self time (parent − children), and an event
with no row of its own (a fused op on TPU, a branch op under ``cost_model="xla"``) adds to the
nearest enclosing op that has one. A step is a ``StepTraceAnnotation`` window (or a device
``Steps`` event); without any, each execution of the program is one step.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from hlo_roofline.hlo import Module
from hlo_roofline.measured.trace import OpEvent, Steps
from hlo_roofline.xplane import TraceError

__all__ = ["HloStructure", "MeasuredTimes", "per_step_times"]


@dataclass
class HloStructure:
    """What the join needs from the HLO: where each op lives, who calls it, who uses its result."""

    computation: dict[str, str] = field(default_factory=dict)
    callers: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    users: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    @classmethod
    def of(cls, module: Module) -> HloStructure:
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


def _complete(events: list[OpEvent], structure: HloStructure) -> int:
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


def _attribute(events: list[OpEvent], structure: HloStructure, rows: set[str]) -> _Execution:
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


@dataclass
class MeasuredTimes:
    """Per-op times of one program, step by step: what the join adds to the report."""

    per_step: dict[str, list[float]]  # op -> seconds in each step
    count: dict[str, float]  # op -> median events per step
    steps_from: str  # "step annotations", "device Steps events" or "executions"
    step_s: float  # median step wall time
    coverage: float  # median over steps of (Σ per-op time in the step / the step's wall time)
    steps: int
    overlap: list[str]
    devices: list[str]


def per_step_times(
    events: list[OpEvent], structure: HloStructure, rows: set[str], windows: dict[str, Steps]
) -> MeasuredTimes:
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
    return MeasuredTimes(
        per_step,
        {op: float(statistics.median(c)) for op, c in counts.items()},
        steps_from,
        float(statistics.median(step_wall[k] for k in grouped)),
        float(statistics.median(coverage)),
        len(grouped),
        overlap,
        sorted({device for _, device, _ in done}),
    )
