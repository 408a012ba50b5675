"""The step as XLA scheduled it: one compute stream, and engines that move data beside it.

An optimized module is scheduled (``is_scheduled=true``): its ops run in the order they are printed.
Walking that order, each op occupies the compute stream for its roofline time, except that

- an async start (``all-gather-start``, ``async-start``, ``copy-start``, a TPU async-collective start
  fusion, ``send``/``recv``) hands its transfer to an engine — the interconnect for collectives, a
  DMA engine for copies — which runs it beside the ops scheduled before its done, one transfer at a
  time per engine. Where ``links`` says which links a collective uses (on a TPU torus, its device
  group: collectives over different mesh axes use different links), each set of links is an engine
  of its own, so an FSDP all-gather does not wait behind a tensor-axis permute;
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
) -> Scheduled:
    """Walk rows in schedule order: ``names``, ``opcodes``, the start each row ``waits_for`` (done
    rows), whether a row is a ``collective``, and its ``durations`` (seconds, per step). A start is
    an op some done waits for, or any ``*-start``, ``send`` or ``recv`` (its done may be in the
    next loop iteration). ``links`` (optional): per row, the links a collective's transfer uses;
    collectives with different links run side by side (None: one interconnect for all).

    ``least_s`` is the step with perfect overlap between ops too: the largest of the compute
    stream's work (every row but the starts) and each engine's (its transfers, and on the
    interconnect the synchronous collectives). The walk never beats it: the stream runs all of its
    rows, and the step waits for each engine's last transfer, which runs after all of that
    engine's others. Nor is it above Σ ``durations`` (the clock and each engine's end never pass
    the sum of the rows walked so far)."""
    n = len(names)
    exposed = np.zeros(n)
    starts = {w for w in waits_for if w}
    is_start = np.array(
        [name in starts or launches(code) for name, code in zip(names, opcodes, strict=True)],
        dtype=bool,
    ).reshape(n)
    is_done = waits_for != ""
    is_sync = collective & ~is_start & ~is_done
    events = np.flatnonzero(is_start | is_done | is_sync)
    between = np.where(is_start | is_done | is_sync, 0.0, durations)
    elapsed = np.concatenate([[0.0], np.cumsum(between)])  # stream time of the rows before each
    clock = 0.0
    last = 0
    engines = (
        np.where(collective, COLLECTIVE_ENGINE, COPY_ENGINE).astype(object)
        if links is None
        else np.where(collective, [f"{COLLECTIVE_ENGINE}:{k}" for k in links], COPY_ENGINE)
    )
    begin = np.zeros(n)
    lane = np.full(n, STREAM, dtype=object)
    free: dict[str, float] = {}
    in_flight: dict[str, tuple[float, int]] = {}  # start name -> (end of its transfer, its row)
    for i in events:
        begin[last:i] = clock + elapsed[last:i] - elapsed[last]
        clock += elapsed[i] - elapsed[last]
        last = i + 1
        if is_start[i]:
            engine = engines[i]
            begin[i] = max(clock, free.get(engine, 0.0))
            end = begin[i] + durations[i]
            free[engine] = end
            in_flight[names[i]] = (end, i)
            lane[i] = engine
        elif is_done[i]:
            end, start = in_flight.pop(waits_for[i], (clock, -1))
            if end > clock:
                exposed[start] += end - clock
                clock = end
            begin[i] = clock
            clock += durations[i]
        else:  # a synchronous collective: its links first finish what they are doing
            begin[i] = max(clock, free.get(engines[i], 0.0))
            end = begin[i] + durations[i]
            free[engines[i]] = end
            exposed[i] += end - clock
            clock = end
            lane[i] = engines[i]
    begin[last:n] = clock + elapsed[last:n] - elapsed[last]
    clock += elapsed[n] - elapsed[last]
    for end, start in sorted(in_flight.values()):  # launched, never waited for: the step waits
        if end > clock:
            exposed[start] += end - clock
            clock = end
    on_stream = float(durations[~is_start].sum())
    transfers = collective & (is_start | is_sync) | (is_start & ~collective)
    per_engine: dict[str, float] = {}
    for engine, seconds in zip(engines[transfers], durations[transfers], strict=True):
        per_engine[engine] = per_engine.get(engine, 0.0) + float(seconds)
    end_at = begin + durations
    return Scheduled(
        float(clock), exposed, max([on_stream, *per_engine.values()]), begin, end_at, lane
    )


def launches(opcode: str) -> bool:
    """An op that starts a transfer whatever waits for it."""
    return opcode.endswith("-start") or opcode in ("send", "recv")
