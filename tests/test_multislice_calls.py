"""The custom calls XLA:TPU's multislice (megascale) rewrite adds, priced from what they do
(fixtures/multislice/dcn_custom_calls.hlo.txt.gz: a 2-slice psum over DCN of a bf16[100,333]
shard, scaled by ``axis_index`` of the slices' axis).

``ZeroCrop`` zeroes the DCN payload's tile padding in place: its bytes are the padding's, from
the shapes alone (the operand's elements against its result's, the same array padded to whole
T(8,128) tiles); ``SliceId`` is the device's slice index, as ``partition-id``: no work.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from hlo_roofline import analyze_hlo
from hlo_roofline.cost.custom_call import NO_WORK_TARGETS, target
from hlo_roofline.cost.custom_targets import TARGET_RULES
from hlo_roofline.hlo import parse

PROGRAM = Path(__file__).resolve().parent.parent / "fixtures/multislice/dcn_custom_calls.hlo.txt.gz"


@pytest.fixture(scope="module")
def program() -> str:
    with gzip.open(PROGRAM, "rt") as f:
        return f.read()


@pytest.fixture(scope="module")
def report(program):
    return analyze_hlo(program, chip="v5e")


def calls(report, program: str, target_name: str):
    """The report's rows of the custom calls to ``target_name``."""
    names = {i.name for i in parse(program).instructions() if target(i) == target_name}
    return report.ops[report.ops["name"].isin(names)]


def test_the_program_is_priced_whole(report, program):
    assert report.summary["coverage"] == 1.0, report.summary["unknown_ops"]
    custom = {target(i) for i in parse(program).instructions() if i.opcode == "custom-call"}
    assert custom == {"SliceId", "ZeroCrop"}


def test_zero_crop_writes_the_payloads_tile_padding(report, program):
    zero_crop = calls(report, program, "ZeroCrop")
    (written,) = zero_crop["bytes_accessed"]
    assert written == (104 * 384 - 100 * 333) * 2  # bf16[100,333] in T(8,128) tiles, zeroed
    assert zero_crop["flops"].sum() == 0


def test_slice_id_costs_nothing(report, program):
    slice_id = calls(report, program, "SliceId")
    assert len(slice_id) == 1 and slice_id[["flops", "bytes_accessed"]].to_numpy().sum() == 0


def test_a_target_is_priced_in_one_place():
    assert not set(TARGET_RULES) & set(NO_WORK_TARGETS)
