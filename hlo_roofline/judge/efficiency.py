"""How close a measured op came to its roofline, and why one that beat it cannot be believed.

``efficiency = t_roofline / measured``: an op cannot run faster than its roof allows, so where one
did, the efficiency is left out and ``measurement_problem`` names the cause. Used by the measured
join (:mod:`hlo_roofline.measured`) and again whenever a measured report is judged against another
chip (:meth:`hlo_roofline.report.Report.classify`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from hlo_roofline import chips, host


def add_efficiency(ops: pd.DataFrame, chip=None) -> pd.DataFrame:
    """Achieved rates and ``efficiency = t_bound / measured`` (NaN where either is missing): the
    share of the hardware's bound the op reached.

    An op cannot run faster than its roof: where it measured faster, ``efficiency`` is NaN and
    ``measurement_problem`` says why the roof does not hold for it (see :func:`problem`).
    Recompute after re-classifying a measured report against another chip.
    """
    measured = ops["measured_s"].to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        valid = measured > 0
        flops = np.where(valid, ops["flops"].to_numpy(dtype=float) / measured, np.nan)
        data = np.where(valid, ops["bytes_accessed"].to_numpy(dtype=float) / measured, np.nan)
        roofs = [c for c in ("t_bound_s", "t_expected_s") if c in ops]  # before the split: one
        if roofs:
            roof = ops[roofs[0]].to_numpy(dtype=float)
            efficiency = np.where(valid & (roof > 0), roof / measured, np.nan)
        else:
            efficiency = np.full(len(ops), np.nan)
    beyond = efficiency > 1
    problems = np.full(len(ops), "", dtype=object)
    causes = np.full(len(ops), "", dtype=object)
    if beyond.any():
        chip = chips.get(chip) if isinstance(chip, str) else chip
        rows = ops[beyond]
        bounds = rows["bound"] if "bound" in rows else pd.Series("", index=rows.index)
        found = [
            problem(ratio, seconds, bound, moved / count if count else moved, chip)
            for ratio, seconds, bound, moved, count in zip(
                efficiency[beyond], measured[beyond], bounds, rows["bytes_accessed"],
                rows["count"], strict=True,
            )
        ]  # fmt: skip
        causes[beyond] = [cause for cause, _ in found]
        problems[beyond] = [text for _, text in found]
        efficiency = np.where(beyond, np.nan, efficiency)
    return ops.assign(
        achieved_flops_per_s=flops,
        achieved_bytes_per_s=data,
        efficiency=efficiency,
        measurement_problem=problems,
        measurement_cause=causes,
    )


# Why an op measured faster than its roof allows (the ``measurement_cause`` column).
MEASUREMENT_CAUSES = ("too_short", "in_cache", "host_roof_low", "roof_low")
HOST_ROOF_LOW = "roof was measured too low"
SHORTEST_TIMED_S = 1e-6  # below this an op's trace time is mostly clock resolution and dispatch
_CACHES = ("llc", "l2")  # on-chip memories that hold what an op re-reads without the roof's trips


def problem(
    ratio: float, measured_s: float, bound: str, bytes_per_run: float, chip
) -> tuple[str, str]:
    """Why an op measured ``ratio`` times faster than its roof allows, as a code of
    :data:`MEASUREMENT_CAUSES` and in words: the first that applies of a time too short to
    measure, a working set that fits in a cache (the memory roof is DRAM or HBM bandwidth), a host
    roof measured too low (a busy machine), or a published figure below what the chip did."""
    faster = f"measured {ratio:.2f}x faster than its roof allows"
    if measured_s < SHORTEST_TIMED_S:
        return "too_short", (
            f"{faster}: {measured_s * 1e6:.2g} µs is too short to time (clock, dispatch)"
        )
    name = getattr(chip, "name", "the chip")
    if bound == "memory" and chip is not None:
        for cache in _CACHES:
            space = chip.memory.get(cache)
            size = space.total_capacity if space is not None else None
            if not size or bytes_per_run <= 0:
                continue
            if bytes_per_run <= size:
                return "in_cache", (
                    f"{faster}: its {_size(bytes_per_run)} per run fit in the {cache.upper()} "
                    f"({_size(size)}), so they did not all cross the memory the roof is set by"
                )
            skipped = bytes_per_run * (1 - 1 / ratio)  # the least that cannot have crossed it
            if skipped <= size:  # e.g. an operand its producer had just written, still cached
                return "in_cache", (
                    f"{faster}: at least {_size(skipped)} of its {_size(bytes_per_run)} per run "
                    f"came from the {cache.upper()} ({_size(size)}), not the memory the roof is "
                    "set by (an operand written just before, still cached)"
                )
    if getattr(chip, "key", None) == "host":
        kept = host.measurements()
        when = _conditions(kept[-1]) if kept else "conditions unknown"
        return "host_roof_low", (
            f"{faster}: the host's {bound + ' ' if bound else ''}{HOST_ROOF_LOW} (best of "
            f"{len(kept)} measurement(s); the last {when}): measure it again on a quieter "
            "machine, hlo_roofline.host.host_chip(refresh=True)"
        )
    figure = {"compute": "peak FLOP/s", "memory": "memory bandwidth"}.get(bound, "roof")
    return (
        "roof_low",
        f"{faster}: {name}'s {figure} is below what ran, or the op's cost is overcounted",
    )


def _size(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def _conditions(measurement: dict) -> str:
    conditions = measurement.get("conditions") or {}
    load = conditions.get("load_average") or [None]
    cores = conditions.get("usable_cores")
    if load[-1] is None or cores is None:
        return "under unrecorded conditions"
    return f"at load average {max(x for x in load if x is not None):.1f} on {cores} usable core(s)"


def problem_count(ops: pd.DataFrame) -> int:
    """Ops that measured faster than their roof allows (each says why in its row)."""
    return int((ops["measurement_problem"] != "").sum()) if "measurement_problem" in ops else 0
