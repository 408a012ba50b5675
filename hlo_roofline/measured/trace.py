"""What a ``jax.profiler`` trace holds, read from its decoded planes (:mod:`hlo_roofline.xplane`).

The files of one capture, the programs whose optimized HLO it embeds, every execution of an HLO op
(CPU thunks, device ``XLA Ops``), the step windows, and the chip a device trace names. Nothing here
knows the report: the events are matched to its rows by :mod:`hlo_roofline.measured.attribution`.
"""

from __future__ import annotations

import bisect
import contextlib
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from hlo_roofline import chips, xplane
from hlo_roofline.xplane import Event, Plane, TraceError

__all__ = [
    "OpEvent",
    "Program",
    "Steps",
    "device_chip",
    "kernel_occupancy",
    "op_events",
    "programs",
    "step_windows",
    "trace_files",
]

_HLO_STATS = ("Hlo Proto", "hlo_proto")
_MODULE_ID = re.compile(r"\((\d+)\)$")
_COPIED = re.compile(r"\bsize:(\d+)")
_OCCUPANCY = re.compile(r"\bocc_pct:([\d.]+)")  # in a kernel's ``kernel_details``


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
    kernel: str = ""  # the event's own name (a GPU kernel's, a copy's)
    copied_bytes: int | None = None  # a device copy's size (``memcpy_details``)

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
            copy = _COPIED.search(event.stats.get("memcpy_details") or "")
            found.append(
                OpEvent(
                    program_id, op, event.start_ps, event.end_ps, host, host + plane.name,
                    line.id, execution, done.get(event.stats.get("_p")) if on_host else None,
                    kernel=event.name, copied_bytes=int(copy.group(1)) if copy else None,
                )
            )  # fmt: skip
    return found


def kernel_occupancy(
    planes: Iterable[Plane], known: dict[int, Program]
) -> dict[int, dict[str, float]]:
    """Each device op's occupancy, by program id and op name: the share of an SM's warp slots
    its kernels keep resident, as CUPTI records it for each kernel (``theoretical_occupancy_pct``,
    or ``occ_pct`` in ``kernel_details``: worked out from the kernel's registers a thread, block
    size and shared memory, compile facts, not a timing), weighted by the kernels' time. An op
    whose kernels name no program is left out where the trace holds several."""
    weighted: dict[int, dict[str, list[float]]] = {}
    only = next(iter(known)) if len(known) == 1 else None
    for plane in planes:
        if not plane.name.startswith("/device:"):
            continue
        for _, event in plane.events():
            stats = event.stats
            op, pct = stats.get("hlo_op"), stats.get("theoretical_occupancy_pct")
            details = stats.get("kernel_details")
            if pct is None and isinstance(details, str) and (found := _OCCUPANCY.search(details)):
                pct = found.group(1)
            try:
                share = float(pct) / 100 if pct is not None else math.nan
                program_id = int(stats["program_id"]) if "program_id" in stats else only
            except (TypeError, ValueError, OverflowError):  # a damaged stat: no figure
                continue
            if not isinstance(op, str) or not 0 < share <= 1 or program_id is None:
                continue
            duration = max(event.end_ps - event.start_ps, 1)
            sums = weighted.setdefault(program_id, {}).setdefault(op, [0.0, 0.0])
            sums[0] += duration * share
            sums[1] += duration
    return {
        program: {op: share / time for op, (share, time) in ops.items()}
        for program, ops in weighted.items()
    }


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


def device_chip(planes: list[Plane]):
    """The chip a device trace names in its plane stats, when the database knows it."""
    for plane in planes:
        if not plane.name.startswith("/device:"):
            continue
        for key in ("device_type_string", "device_type", "device_name", "gpu_device_name"):
            name = plane.stats.get(key)
            if isinstance(name, str) and name:
                with contextlib.suppress(chips.UnknownChipError):
                    return chips.get(name)
    return None
