"""The join: a trace's per-op times (:mod:`hlo_roofline.measured.attribution`) set against the
rows of the report computed from the HLO the trace embeds, with each op's efficiency.

The report is computed from the optimized HLO *embedded in the trace* (never a fresh compile, which
could rename instructions), so every op event names a row; the key is ``(program_id, op name)``.
Opened control flow that shows up in the trace gets a row of its own for its self time.
"""

from __future__ import annotations

import contextlib
import statistics
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd

from hlo_roofline import chips, schema, xplane
from hlo_roofline.api import analyze_hlo
from hlo_roofline.cost.control_flow import CONTAINERS
from hlo_roofline.hlo import Module, attrs, parse
from hlo_roofline.host import host_chip
from hlo_roofline.judge.efficiency import add_efficiency, problem_count
from hlo_roofline.measured import renames
from hlo_roofline.measured.attribution import HloStructure, MeasuredTimes, per_step_times
from hlo_roofline.measured.trace import (
    OpEvent,
    Steps,
    device_chip,
    kernel_occupancy,
    op_events,
    programs,
    step_windows,
    trace_files,
)
from hlo_roofline.report import Report
from hlo_roofline.xplane import TraceError

__all__ = [
    "CONTAINER_NOTE",
    "MEASURED_COLUMNS",
    "CommandBufferWarning",
    "OverlapWarning",
    "join",
    "joined_reports",
    "read_trace",
    "resolve_chip",
]

MEASURED_COLUMNS = schema.names("measured", "float")  # the numbers the join adds
CONTAINER_NOTE = "control flow: measured self time only (its body ops have rows of their own)"


class OverlapWarning(UserWarning):
    """Ops ran concurrently in the trace: per-op latencies overlap and their sum double-counts."""


class CommandBufferWarning(UserWarning):
    """XLA:GPU ran kernels as CUDA graphs: the trace names the graph, not each kernel's op."""


def _blank(column: pd.Series):
    if pd.api.types.is_bool_dtype(column):
        return False
    return 0 if pd.api.types.is_numeric_dtype(column) else ""


def _container_rows(report: Report, module: Module, measured: MeasuredTimes) -> pd.DataFrame:
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


def join(
    report: Report,
    module: Module,
    measured: MeasuredTimes,
    chip,
    occupancy: dict[str, float] | None = None,
) -> Report:
    """The report with measured columns (and re-classified against ``chip`` when given).
    ``occupancy``: each op's kernels' occupancy the trace records
    (:func:`~hlo_roofline.measured.trace.kernel_occupancy`), which the expected model reads."""
    ops = _container_rows(report, module, measured)
    per_step = measured.per_step
    names = ops["name"]
    occupancy = occupancy or {}

    def column(f) -> list[float]:
        return [f(per_step[n]) if n in per_step else np.nan for n in names]

    ops = ops.assign(
        measured_s=column(statistics.median),
        measured_p10_s=column(lambda v: float(np.percentile(v, 10))),
        measured_p90_s=column(lambda v: float(np.percentile(v, 90))),
        measured_count=[measured.count.get(n, np.nan) for n in names],
        occupancy=[occupancy.get(n, np.nan) for n in names],
    )
    joined = Report(ops, dict(report.summary), report.module, report.internals)
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


def resolve_chip(chip):
    """A chip, a name from the database, or ``"host"`` (this machine's CPU, measured)."""
    if isinstance(chip, str) and chip.strip().lower() == "host":
        return host_chip()
    return chips.get(chip) if isinstance(chip, str) else chip


def _measure_programs(by_program, analyzed, windows: dict[str, Steps]) -> dict[int, MeasuredTimes]:
    """Per-step times of every program that ran inside a step (or at all, without steps)."""
    found = {}
    for program_id, events in by_program.items():
        _, report, structure = analyzed[program_id]
        with contextlib.suppress(TraceError):  # raised when it ran outside every step
            found[program_id] = per_step_times(events, structure, set(report.ops["name"]), windows)
    return found


def joined_reports(path_or_dir, chip) -> tuple[dict[str, Report], list[Path]]:
    """Every program of a capture that ran inside a step, joined: reports by program name, and
    the capture's files."""
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
    chip = resolve_chip(chip) if chip is not None else device_chip(planes)
    by_program: dict[int, list[OpEvent]] = defaultdict(list)
    for e in events:
        if e.program_id in known:
            by_program[e.program_id].append(e)
    if not by_program:
        raise TraceError(f"{files[0]}: no op event names a program whose HLO the trace embeds")
    analyzed = {}
    renamed: dict[int, dict[str, str]] = {}
    for program_id, program_events in by_program.items():
        module = parse(known[program_id].hlo_text())
        report = analyze_hlo(module)
        analyzed[program_id] = module, report, HloStructure.of(module)
        renamed[program_id] = renames.resolve(program_events, module)
    occupancy = kernel_occupancy(planes, known)
    measured = _measure_programs(by_program, analyzed, windows)
    if not measured and windows:  # device clocks not aligned with the host's step annotations?
        measured = _measure_programs(by_program, analyzed, {})
    reports: dict[str, Report] = {}
    overlaps: list[str] = []
    for program_id, result in measured.items():
        program = known[program_id]
        module, report, _ = analyzed[program_id]
        joined = join(report, module, result, chip, occupancy.get(program_id))
        joined.summary.update(
            compiled_for="trace",
            how=f"optimized HLO embedded in the trace {files[0]}",
            measured_trace=str(files[0]),
            measured_program=program.name,
            measured_renamed_ops=renamed[program_id],
        )
        reports[program.name] = joined
        overlaps += [f"{program.name}: {o}" for o in result.overlap]
        if graphs := [n for n in joined.summary["measured_unmatched_ops"]
                      if renames.COMMAND_BUFFER.match(n)]:  # fmt: skip
            warnings.warn(
                f"{program.name} ran {len(graphs)} CUDA graph(s) (XLA:GPU command buffers): "
                "their library kernels name no op and are left out of the ops' times (fusions "
                "are matched by kernel name). For every op's time, profile with "
                "XLA_FLAGS=--xla_gpu_enable_command_buffer= (docs/measure.md).",
                CommandBufferWarning,
                stacklevel=3,
            )
    if overlaps:
        on_host = any(  # a CPU's thunks, not a device's streams
            "/host:" in device for r in measured.values() if r.overlap for device in r.devices
        )
        warnings.warn(
            "the trace shows overlapping ops (" + "; ".join(overlaps) + "): per-op times are "
            "latencies that overlap, so they double-count. "
            + ("Capture on one core (taskset -c 0, or os.sched_setaffinity before importing "
               "jax) for clean per-op times." if on_host else
               "On a device this is concurrency (copies or collectives on their own streams "
               "beside compute): compare the step, not Σ measured_s."),
            OverlapWarning,
            stacklevel=3,
        )  # fmt: skip
    return reports, files


def read_trace(path_or_dir: str | Path, chip=None) -> Report | dict[str, Report]:
    """Reports with measured columns from an existing ``jax.profiler`` trace (no recompilation).

    ``path_or_dir`` is an ``*.xplane.pb``, a run directory, or a logdir (its latest run under
    ``plugins/profile``). ``chip`` classifies the ops (``"host"`` for this machine's CPU); by
    default a device trace is judged against the chip its planes name, a CPU trace is left
    unclassified (no ``efficiency``). One report, or a dict by program name when several
    programs ran. Unreadable traces raise :class:`TraceError`.
    """
    reports, _ = joined_reports(path_or_dir, chip)
    return next(iter(reports.values())) if len(reports) == 1 else reports
