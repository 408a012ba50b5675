"""The bound and the expectation, each with one job, on real compiled programs.

The bound (``t_bound_s``, ``bound``, the roofs, ``step_bound_s``, ``mfu_upper_bound``) reads the
chip's facts and what follows from them; the expectation (``t_expected_s``, ``step_expected_s``)
adds the chip's calibration. Perturbing every calibrated number must leave every bound field as
it was, and move the expectation (so the check can fail), on TPU and GPU programs alike.
"""

from __future__ import annotations

import dataclasses
import gzip
import warnings
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hlo_roofline import analyze_hlo, chips, schema
from hlo_roofline.judge import time_model

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
PROGRAMS = {  # a real compiled step per platform, and programs XLA:TPU's calibration reads
    "fsdp_train_step/tpu_v5e.hlo.txt": "v5e",
    "fsdp_train_step/tpu_v5p.hlo.txt": "v5p",
    "gpt_tiny/h100.hlo.txt": "h100",
    "tpu_programs/llama_decode.v6e.hlo.txt.gz": "v6e",
    "tpu_programs/llama_train.7x.hlo.txt.gz": "7x",
    "multislice/v5e_2x2_x4_grad.hlo.txt.gz": "v5e",  # its all-reduce over 4 slices on DCN
}
# Every column and summary key the bound model writes: none may read a calibrated number.
BOUND_COLUMNS = ("intensity", "critical_intensity", "bound", "t_compute_s", "compute_unit",
                 "t_memory_s", "t_comm_s", "t_bound_s", "ridge_m", "ridge_k", "mxu_waste",
                 "roof_flops_per_s", "roof_bytes_per_s", "roof_unit")  # fmt: skip
BOUND_SUMMARY = ("step_bound_s", "mfu_upper_bound", "mfu_dtype", "hbm_bandwidth",
                 "vmem_bandwidth", "roofs", "comm_time_s")  # fmt: skip


def _text(name: str) -> str:
    path = FIXTURES / name
    return gzip.open(path, "rt").read() if path.suffix == ".gz" else path.read_text()


@cache
def _plain(name: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return analyze_hlo(_text(name))


def _perturbed(chip: chips.Chip) -> chips.Chip:
    """The chip with every calibrated number three times larger (floors and passes slower, rates
    faster)."""
    values = {k: v * 3 for k, v in chip.calibration.values().items()}
    return dataclasses.replace(chip, calibration=dataclasses.replace(chip.calibration, **values))


def _judged(name: str, chip: chips.Chip):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _plain(name).classify(chip)


def test_the_programs_exist():
    missing = [name for name in PROGRAMS if not (FIXTURES / name).exists()]
    assert not missing


@pytest.mark.parametrize("name", PROGRAMS)
def test_no_calibrated_number_reaches_the_bound(name):
    chip = chips.get(PROGRAMS[name])
    assert chip.calibration.values(), "the chip has a calibration to perturb"
    plain, moved = _judged(name, chip), _judged(name, _perturbed(chip))
    for column in BOUND_COLUMNS:
        pd.testing.assert_series_equal(plain.ops[column], moved.ops[column], obj=column)
    for key in BOUND_SUMMARY:
        if key != "comm_time_s":  # Σ t_expected_s of the collectives: an expectation
            assert plain.summary[key] == moved.summary[key], key
    # the perturbation reached the expectation: the check above can fail
    assert (moved.ops["t_expected_s"] != plain.ops["t_expected_s"]).any()
    assert moved.summary["step_expected_s"] != plain.summary["step_expected_s"]


@pytest.mark.parametrize("name", PROGRAMS)
def test_the_book_profile_is_the_bound_alone(name):
    """Under the book profile (facts only) every op is expected at its bound."""
    book = _judged(name, chips.get(PROGRAMS[name], "book"))
    ops = book.ops
    assert (ops["t_expected_s"] == ops["t_bound_s"]).all()
    assert (ops["expected_by"] == "").all()


@pytest.mark.parametrize("name", PROGRAMS)
def test_the_expectation_is_never_below_the_bound(name):
    report = _judged(name, chips.get(PROGRAMS[name]))
    ops, s = report.ops, report.summary
    assert (ops["t_expected_s"] >= ops["t_bound_s"]).all()
    above = ops["t_expected_s"] > ops["t_bound_s"]
    assert (ops.loc[above, "expected_by"] != "").all() and (
        ops.loc[~above, "expected_by"] == ""
    ).all()
    assert set(ops["expected_by"]) <= {"", *schema.EXPECTED_EFFECTS}
    assert s["step_bound_s"] <= s["step_expected_s"]
    assert s["mfu_expected"] <= s["mfu_upper_bound"]


@pytest.mark.parametrize("name", PROGRAMS)
def test_the_step_bound_is_the_busiest_queue(name):
    """The step's bound is at least each unit's, the HBM's and each link group's work, and is one
    of them: no schedule enters it."""
    report = _judged(name, chips.get(PROGRAMS[name]))
    ops, bound = report.ops, report.summary["step_bound_s"]
    hbm = float(ops["t_memory_s"].sum())
    mxu = float(ops.loc[ops["compute_unit"] == "mxu", "t_compute_s"].sum())
    comm = ops[ops["t_comm_s"] > 0].groupby("replica_group")["t_comm_s"].sum()
    assert bound >= max(mxu, comm.max() if len(comm) else 0.0) * (1 - 1e-12)
    assert bound <= hbm + float(ops["t_compute_s"].sum()) + float(ops["t_comm_s"].sum())
    assert bound < report.summary["step_time_serial_s"] or bound == pytest.approx(
        report.summary["step_time_serial_s"]
    )


@pytest.mark.parametrize("name", PROGRAMS)
def test_every_bound_point_lies_on_the_roof_its_row_names(name):
    """The chart's point (intensity, flops ÷ t_bound_s) lies on min(compute roof, intensity ×
    memory roof) unless its link time sets it; the expectation's point on or under it."""
    ops = _judged(name, chips.get(PROGRAMS[name])).ops
    ops = ops[(ops["flops"] > 0) & (ops["bytes_accessed"] > 0) & (ops["roof_unit"] != "link")]
    ops = ops[ops["roof_unit"] != ""]
    point = ops["flops"] / ops["t_bound_s"]
    roof = np.fmin(ops["roof_flops_per_s"], ops["intensity"] * ops["roof_bytes_per_s"])
    assert np.allclose(point, roof, rtol=1e-9)
    assert (ops["flops"] / ops["t_expected_s"] <= point * (1 + 1e-12)).all()


# -- one time model per backend, chosen once per chip --------------------------------------------


@pytest.mark.parametrize(
    ("chip", "model"),
    [("v5e", "TpuTimeModel"), ("7x", "TpuTimeModel"), ("h100", "GpuTimeModel"),
     ("mi300x", "GpuTimeModel")],
)  # fmt: skip
def test_each_backend_has_its_time_model(chip, model):
    """A chip's kind picks its time model, over one JAX device of it (a 7x chip's half)."""
    found = time_model.for_chip(chips.get(chip))
    assert type(found).__name__ == model
    assert found.chip == chips.get(chip).per_device()


def test_a_host_cpu_has_the_plain_time_model():
    cpu = chips.Chip.custom("a CPU", kind="cpu", peak_flops={"f32": 1e11}, hbm_bandwidth=1e10)
    assert type(time_model.for_chip(cpu)) is time_model.TimeModel
    assert time_model.TimeModel.link_queues(pd.DataFrame({"replica_group": ["0-3 of 4"]})) is None


def test_a_tpu_schedules_each_device_groups_links_apart():
    """On a TPU torus a collective's group names its links (a queue each); elsewhere one queue."""
    ops = pd.DataFrame({"replica_group": ["0-3 of 8", "4-7 of 8"]})
    assert list(time_model.TpuTimeModel.link_queues(ops)) == ["0-3 of 8", "4-7 of 8"]
    assert time_model.GpuTimeModel.link_queues(ops) is None


@pytest.mark.parametrize("name", PROGRAMS)
def test_the_bound_model_reads_no_calibration(name):
    """The bound model's own answer, on a chip whose calibration was perturbed, is the same."""
    chip = chips.get(PROGRAMS[name])
    ops = _plain(name).ops
    bounds = []
    for judged in (chip, _perturbed(chip)):
        bound_model, _ = time_model.models(judged)
        rates = bound_model.model.rates(ops)
        bounds.append(bound_model.judge(ops, rates, None).t_bound)
    np.testing.assert_array_equal(*bounds)
