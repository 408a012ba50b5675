"""Roofline verdicts: each op's FLOPs and bytes against one chip's peaks, links and ridge, in two
models with one job each, over the chip's time model (:mod:`hlo_roofline.judge.time_model`).

The bound, from hardware facts only: ``intensity = flops / bytes``; the peak it runs at
(matmul-class ops at the rate of their input dtype, f32 ones at the rate their precision asks for;
other ops at the vector rate); ``t_compute = (flops + transcendentals) / peak`` (MXU tiles padded),
``t_memory = bytes / HBM bandwidth`` (bytes in a TPU's VMEM at its own bandwidth, where the
database has one), ``t_comm`` from the book's collective model; ``t_bound = max`` of the three and
the ``bound`` that sets it. ``step_bound_s``: each unit, memory and link queue busy for the sum of
its ops' times, the step at least the busiest.

The expectation: ``t_expected`` is the bound and every calibrated effect of the chip's
:class:`~hlo_roofline.chips.Calibration` (XLA:TPU's charges, the measured per-op floor), never
below the bound; ``step_expected_s`` walks XLA's schedule with it (:mod:`hlo_roofline.judge.schedule`).
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
import pandas as pd

from hlo_roofline import chips, schema
from hlo_roofline._frame import as_text, column_arrays, columns_read_once, frame_of_arrays
from hlo_roofline.chips import Chip
from hlo_roofline.judge import schedule, time_model
from hlo_roofline.judge.hints import hint_columns
from hlo_roofline.judge.step import (
    chip_summary,
    loops_summary,
    model_flops_summary,
    remat_summary,
)
from hlo_roofline.judge.xla_gap import xla_estimate, xla_gaps
from hlo_roofline.schema import BOUNDS

__all__ = ["BOUNDS", "VERDICT_COLUMNS", "classify", "walk_schedule"]

VERDICT_COLUMNS = schema.VERDICT_COLUMNS


def classify(
    ops: pd.DataFrame,
    chip: Chip | str,
    topology=None,
    model_flops: float | None = None,
    leave_out: Collection[str] = (),
) -> tuple[pd.DataFrame, schema.VerdictSummary]:
    """Add the verdict columns for ``chip`` to a report's ops; return them and summary entries.

    ``leave_out``: columns of ``ops`` the judged frame does not carry (by default it carries
    all): a report judges its ops with their model internals and keeps only its public columns,
    so the judged frame is built once, without them.

    ``model_flops``: the user's analytic count of the model's FLOPs per device and step (MaxText's
    ``calculate_tflops_training_per_device`` × 1e12): the summary then gives the MFU against it
    beside the HLO's (see :func:`model_flops_summary`).

    ``topology`` places the program's devices for the collective model: an
    :class:`~hlo_roofline.judge.interconnect.Topology`, a mesh (or its devices in partition order), or
    a report's stored one; None infers it from the chip and the groups (see
    :mod:`hlo_roofline.judge.interconnect`).
    """
    chip = chips.get(chip) if isinstance(chip, str) else chip
    if not isinstance(chip, Chip):
        raise ValueError(f"chip must be a chip's name or a Chip, not {type(chip).__name__}")
    bound_model, expected_model = time_model.models(chip)  # chosen once, for one JAX device
    chip = bound_model.model.chip  # an HLO module runs on one JAX device (one TensorCore of a 7x)
    judged_before = [c for c in VERDICT_COLUMNS if c in ops.columns]
    if judged_before:  # a report judged before: its verdicts are replaced
        ops = ops.drop(columns=judged_before)
    hbm = chip.hbm_bandwidth
    if "precision" not in ops:  # a report written before the column existed
        ops = ops.assign(precision=np.where(schema.matmul_rows(ops), "default", ""))
    ops = columns_read_once(ops)  # the judges read its columns by name, many twice
    rates = bound_model.model.rates(ops)
    matmul, no_rate, padding = rates.matmul, rates.no_rate, rates.padding
    flops = ops["flops"].to_numpy(dtype=float)
    data = ops["bytes_accessed"].to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        intensity = np.where(data > 0, flops / data, np.nan)
    # the bound: hardware facts only, each op at the slowest of its units, memory and links
    bound = bound_model.judge(ops, rates, topology)
    t_compute, t_comm, topology = bound.t_compute, bound.t_comm, bound.topology
    t_memory, t_vmem = bound.memory.t_memory, bound.memory.t_vmem
    t_bound = bound.t_bound
    # the expectation: the bound and every calibrated effect, each never below it
    expected_ops = expected_model.judge(ops, rates, bound)
    t_expected, scheduled = expected_ops.t_expected, expected_ops.scheduled
    step = float(t_expected.sum())
    is_collective = ops["collective"].to_numpy() != ""
    with np.errstate(divide="ignore", invalid="ignore"):  # seconds per byte this op moves
        per_byte = np.where(data > 0, t_memory / data, 1 / hbm)
    # the verdict columns as arrays, made into the report's frame once (see _judged_frame)
    xla = xla_estimate(ops, chip)
    verdicts = {
        "intensity": intensity,
        "critical_intensity": rates.peaks * per_byte,  # peak / HBM bandwidth, unless in VMEM
        "bound": _strings(bound.bound),
        "t_compute_s": t_compute,
        "compute_unit": _strings(bound.compute_unit),
        "t_memory_s": t_memory,
        "t_comm_s": t_comm,
        "t_bound_s": t_bound,
        "t_expected_s": t_expected,
        "expected_by": _strings(expected_ops.expected_by),
        "share": t_expected / step if step else np.zeros(len(ops)),
        "t_exposed_s": scheduled.exposed_s,
        "xla_estimate_s": xla,
        "xla_gap": xla_gaps(ops, chip, t_expected, xla, padding, bound.memory.own_memory),
    }
    verdicts.update(hint_columns(ops, verdicts, matmul, no_rate, rates.by_dtype, chip, padding))
    verdicts.update(_roof_columns(verdicts, t_compute, t_memory, t_vmem, flops, data))
    step_bound = bound_model.step(ops, bound)
    ops = _judged_frame(ops, verdicts, leave_out)
    times = np.stack([t_compute, t_memory, t_comm])
    upper = float(np.maximum(times.sum(axis=0), t_expected).sum())
    expected = expected_model.step(expected_ops, step_bound)
    summary = chip_summary(ops, chip, step, upper, step_bound, expected)
    comm = float(t_expected[is_collective].sum())
    exposed = float(scheduled.exposed_s[is_collective].sum())
    floors = expected_ops.effects.get("floor", np.zeros(len(ops)))
    summary.update(
        floor_share=float((np.maximum(t_bound, floors) - t_bound).sum()) / step if step else 0.0,
        step_time_min_s=scheduled.least_s,
        step_expected_s=expected,
        comm_time_s=comm,
        exposed_comm_s=exposed,
        exposed_comm_share=exposed / expected if expected else 0.0,
        host_dispatch_s=expected_model.model.dispatch(ops),
        topology=topology.to_dict() if topology is not None else None,
        loops=loops_summary(ops),
        **remat_summary(ops, step),
        **model_flops_summary(float(flops.sum()), model_flops, chip, expected),
    )
    return ops, summary


def walk_schedule(ops: pd.DataFrame, kind: str, durations: np.ndarray) -> schedule.Scheduled:
    """The step as scheduled (:func:`hlo_roofline.judge.schedule.walk`) for ops on a chip of
    ``kind``, on the queues of its backend's time model (:meth:`TimeModel.walk`)."""
    return time_model.for_kind(kind).walk(ops, durations)


def _strings(values) -> np.ndarray:
    """A column of text as a NumPy array (of objects, as the time model gives it)."""
    return values if isinstance(values, np.ndarray) else np.asarray(values, dtype=object)


def _judged_frame(
    ops: pd.DataFrame, verdicts: dict[str, np.ndarray], leave_out: Collection[str] = ()
) -> pd.DataFrame:
    """``ops`` (less its columns in ``leave_out``) with the verdict columns, in the schema's
    order, built once from its columns and theirs (each ``assign`` or insert of a column copies
    and checks the whole frame: most of a small module's judging). Dtypes as ``assign`` makes
    them: text as pandas' string type."""
    names = [c for c in ops.columns if c not in leave_out]
    arrays = column_arrays(ops, names)
    if arrays is not None:
        arrays.update((name, as_text(np.asarray(v))) for name, v in verdicts.items())
        arrays = {name: arrays[name] for name in schema.ordered(arrays)}
        frame = frame_of_arrays(arrays, ops.index, consolidate=True)
        if frame is not None:
            return frame
    if len(names) < len(ops.columns):
        ops = ops[names]
    ops = ops.assign(**verdicts)  # the public way: repeated names, objects, another pandas
    return ops[schema.ordered(ops.columns)]


def _roof_columns(
    verdicts: dict[str, np.ndarray],
    t_compute: np.ndarray,
    t_memory: np.ndarray,
    t_vmem: np.ndarray,
    flops: np.ndarray,
    data: np.ndarray,
) -> dict[str, np.ndarray]:
    """The roof behind each verdict, so a face draws it without arithmetic on the model: the
    FLOP/s the op's compute side reaches on its binding unit, the bandwidth its bytes move at,
    and the unit whose roof its bound point lies on. The bound's point (intensity, flops ÷
    ``t_bound_s``) lies on min(compute roof, intensity × memory roof) unless its link time sets
    it; the expected point (flops ÷ ``t_expected_s``) on or under it."""
    with np.errstate(divide="ignore", invalid="ignore"):
        roof_flops = np.where((flops > 0) & (t_compute > 0), flops / t_compute, np.nan)
        roof_bytes = np.where((data > 0) & (t_memory > 0), data / t_memory, np.nan)
    bound = verdicts["bound"]
    memory = np.where(t_vmem > t_memory - t_vmem, "vmem", "hbm")
    unit = np.select(
        [bound == "none", bound == "compute", bound == "memory", bound == "communication"],
        ["", np.asarray(verdicts["compute_unit"], dtype=object), memory, "link"],
        "",
    ).astype(object)
    return {"roof_flops_per_s": roof_flops, "roof_bytes_per_s": roof_bytes, "roof_unit": unit}
