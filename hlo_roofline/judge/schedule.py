"""The step as XLA scheduled it: one compute stream, and engines that move data beside it.

An optimized module is scheduled (``is_scheduled=true``): its ops run in the order they are printed.
Walking that order, each op occupies the compute stream for its roofline time, except that

- an async start (``all-gather-start``, ``async-start``, ``copy-start``, a TPU async-collective start
  fusion, ``send``/``recv``) hands its transfer to an engine — the interconnect for collectives, a
  DMA engine for copies — which runs it beside the ops scheduled before its done, one transfer at a
  time per engine. Where ``links`` says which links a collective uses (on a TPU torus, its device
  group: collectives over different mesh axes use different links), each set of links is an engine
  of its own, so an FSDP all-gather does not wait behind a tensor-axis permute. A program
  offloaded to another core (XLA:TPU's SparseCore: a collective, a gather) runs in that core's
  queue, beside the TensorCore's transfers;
- its done waits until the transfer has finished: the wait is the collective's *exposed* time;
- a synchronous collective waits for the interconnect and blocks the stream for its whole time.

A loop body's rows carry the loop's trip count already, so walking them once is walking every
iteration (each term of the walk is a sum or a max of times that all scale with the trip count).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

COLLECTIVE_ENGINE, COPY_ENGINE = "interconnect", "dma"
STREAM = "compute"  # the lane of the rows the compute stream runs


def shared_lane(queue: str, link: str) -> str:
    """The lane of a queue's transfers over one group's links (``interconnect:0-3 of 8``)."""
    return f"{queue}:{link}"


def lane_parts(lane: str) -> tuple[str, str]:
    """(queue, links' group) of a lane :func:`shared_lane` made; the group is "" for the others."""
    queue, _, group = lane.partition(":")
    return queue, group


class Scheduled(NamedTuple):
    """The walk's result: the step, per row the time the stream waited for that row's transfer
    (for a synchronous collective: all of its time), and the least any order of the same ops
    could take (``least_s``: see :func:`walk`). Where each row ran, for a timeline: ``begin_s``
    and ``end_s`` within the step and its ``lane`` (:data:`STREAM`, or the engine a transfer ran
    on)."""

    step_s: float
    exposed_s: np.ndarray
    least_s: float
    begin_s: np.ndarray | None = None
    end_s: np.ndarray | None = None
    lane: np.ndarray | None = None


def walk(
    names: np.ndarray,
    opcodes: np.ndarray,
    waits_for: np.ndarray,
    collective: np.ndarray,
    durations: np.ndarray,
    links: np.ndarray | None = None,
    offload: np.ndarray | None = None,
) -> Scheduled:
    """Walk rows in schedule order: ``names``, ``opcodes``, the start each row ``waits_for`` (done
    rows), whether a row is a ``collective``, and its ``durations`` (seconds, per step). A start is
    an op some done waits for, or any ``*-start``, ``send`` or ``recv`` (its done may be in the
    next loop iteration). ``links`` (optional): per row, the links a collective's transfer uses;
    collectives with different links run side by side (None: one interconnect for all).
    ``offload`` (optional): per row, the core a start's program runs on where not the main one
    (``""``); its transfers queue there, apart from the main core's engines.

    ``least_s`` is the step with perfect overlap between ops too: the largest of the compute
    stream's work (every row but the starts) and each engine's (its transfers, and on the
    interconnect the synchronous collectives). The walk never beats it: the stream runs all of its
    rows, and the step waits for each engine's last transfer, which runs after all of that
    engine's others. Nor is it above Σ ``durations`` (the clock and each engine's end never pass
    the sum of the rows walked so far)."""
    n = len(names)
    # Each row's facts as Python objects (a numpy scalar per lookup made the walk ~3x slower on a
    # 20k-op step); every sum below adds the same doubles in the same order as row by row.
    name_of, wait_of = names.tolist(), waits_for.tolist()
    starts = set(wait_of)
    starts.discard("")
    launching = {code for code in set(opcodes.tolist()) if launches(code)}
    is_start = np.fromiter(map(starts.__contains__, name_of), bool, n) | np.fromiter(
        map(launching.__contains__, opcodes.tolist()), bool, n
    )
    is_done = waits_for != ""
    is_sync = collective & ~is_start & ~is_done
    is_event = is_start | is_done | is_sync
    events = np.flatnonzero(is_event)
    between = np.where(is_event, 0.0, durations)
    elapsed = np.concatenate([[0.0], np.cumsum(between)])  # stream time of the rows before each
    seconds, at = durations.tolist(), elapsed.tolist()
    link_of = links.tolist() if links is not None else None
    core_of = offload.tolist() if offload is not None else None
    shared = collective.tolist()
    exposed = [0.0] * n
    begin_of: dict[int, float] = {}  # an event's begin (a stream row's follows from its segment)
    lane_of: dict[int, str] = {}  # an event's lane, where not the stream
    # The stream rows between two events run back to back: row j of the segment that starts
    # after event `last` begins at (clock + elapsed[j]) - elapsed[last], the clock then.
    segment_clock = [0.0] * (len(events) + 1)
    segment_at = [0.0] * (len(events) + 1)
    clock = 0.0
    last = 0
    free: dict[str, float] = {}
    in_flight: dict[str, tuple[float, int]] = {}  # start name -> (end of its transfer, its row)
    per_engine: dict[str, float] = {}  # each engine's transfers, summed in row order

    def engine(i: int) -> str:
        core = core_of[i] if core_of is not None else ""
        if not shared[i]:
            return core or COPY_ENGINE
        queue = core or COLLECTIVE_ENGINE
        return queue if link_of is None else shared_lane(queue, link_of[i])

    starting, waiting = is_start[events].tolist(), is_done[events].tolist()
    for k, i in enumerate(events.tolist()):
        segment_clock[k], segment_at[k] = clock, at[last]
        clock += at[i] - at[last]
        last = i + 1
        if starting[k]:
            lane = engine(i)
            begin = max(clock, free.get(lane, 0.0))
            end = begin + seconds[i]
            free[lane] = end
            in_flight[name_of[i]] = (end, i)
            lane_of[i] = lane
            per_engine[lane] = per_engine.get(lane, 0.0) + seconds[i]
        elif waiting[k]:
            end, start = in_flight.pop(wait_of[i], (clock, -1))
            if end > clock:
                exposed[start] += end - clock
                clock = end
            begin = clock
            clock += seconds[i]
        else:  # a synchronous collective: its links first finish what they are doing
            lane = engine(i)
            begin = max(clock, free.get(lane, 0.0))
            end = begin + seconds[i]
            free[lane] = end
            exposed[i] += end - clock
            clock = end
            lane_of[i] = lane
            per_engine[lane] = per_engine.get(lane, 0.0) + seconds[i]
        begin_of[i] = begin
    segment_clock[len(events)], segment_at[len(events)] = clock, at[last]
    clock += elapsed[n] - at[last]
    for end, start in sorted(in_flight.values()):  # launched, never waited for: the step waits
        if end > clock:
            exposed[start] += end - clock
            clock = end
    segment = np.searchsorted(events, np.arange(n))  # events before each row: its segment
    begin_s = (np.array(segment_clock)[segment] + elapsed[:n]) - np.array(segment_at)[segment]
    begin_s[events] = [begin_of[i] for i in events.tolist()]
    lane_s = np.full(n, STREAM, dtype=object)
    if lane_of:
        lane_s[list(lane_of)] = list(lane_of.values())
    on_stream = float(durations[~is_start].sum())
    return Scheduled(
        float(clock),
        np.array(exposed),
        max([on_stream, *per_engine.values()]),
        begin_s,
        begin_s + durations,
        lane_s,
    )


def launches(opcode: str) -> bool:
    """An op that starts a transfer whatever waits for it."""
    return opcode.endswith("-start") or opcode in ("send", "recv")
