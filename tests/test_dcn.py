"""Multi-slice TPU programs: the cross-slice all-reduce libtpu compiles as megascale ``send`` /
``recv`` host transfers, priced on the data-centre network (DCN) at the chip's DCN egress, not on
the slice's ICI links (the bound), and in the expected model at the calibrated share of that
egress plus a calibrated time per step of the ring over the slices. Programs compiled for 2 and 4
TPU v5e slices (fixtures/multislice); the oracles are the slice count each was compiled for and
the gradient's shape (cases.json)."""

from __future__ import annotations

import gzip
import json
import math

import pytest
from conftest import FIXTURES

from hlo_roofline import analyze_hlo, chips
from hlo_roofline.cost import walk
from hlo_roofline.cost.collectives import DCN_GROUP, dcn_slices, group_text, megascale_slices
from hlo_roofline.hlo import parse
from hlo_roofline.judge import interconnect

HERE = FIXTURES / "multislice"
CASES = json.loads((HERE / "cases.json").read_text())
DTYPE_BYTES = {"f32": 4, "bf16": 2}


def text(case: str) -> str:
    with gzip.open(HERE / f"{case}.hlo.txt.gz", "rt") as f:
        return f.read()


def gradient_bytes(c: dict) -> int:
    return math.prod(c["gradient"]) * DTYPE_BYTES[c["dtype"]]


@pytest.mark.parametrize("case", sorted(CASES))
def test_megascale_transfers_name_their_slices(case):
    c = CASES[case]
    module = parse(text(case))
    transfers = [i for i in module.instructions() if i.opcode in ("send", "recv")]
    assert {i.opcode for i in transfers} == {"send", "recv"}
    for instr in transfers:
        assert megascale_slices(instr) == c["slices"]
        assert group_text(instr, module) == DCN_GROUP.format(c["slices"])
        assert dcn_slices(group_text(instr, module)) == c["slices"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_send_carries_a_ring_all_reduce_over_the_slices(case):
    """Each chip's gradient shard, all-reduced over n slices as a ring: 2·(n−1)/n of it sent."""
    c = CASES[case]
    n = c["slices"]
    sends = [op for op in walk(parse(text(case)), "roofline") if op.instr.opcode == "send"]
    assert len(sends) == 1
    assert sends[0].cost.comm_bytes == gradient_bytes(c) * 2 * (n - 1) / n


@pytest.mark.parametrize("case", sorted(CASES))
def test_priced_at_the_chips_dcn_egress(case):
    c = CASES[case]
    ops = analyze_hlo(text(case), chip=c["chip"]).ops
    send = ops[ops["opcode"] == "send"].iloc[0]
    recv = ops[ops["opcode"] == "recv"].iloc[0]
    chip = chips.get(c["chip"])
    assert send["replica_group"] == DCN_GROUP.format(c["slices"])
    assert send["t_comm_s"] == pytest.approx(send["comm_bytes"] / chip.dcn_per_chip, rel=1e-12)
    assert recv["t_comm_s"] == 0  # its bytes are the sender's
    ici = interconnect.collective_time(chip, "send", send["comm_bytes"], 2, None)
    assert send["t_comm_s"] > 10 * ici  # DCN is an order of magnitude slower than a chip's ICI


def test_dcn_per_chip_is_one_host_figure_over_its_chips():
    """The book's per-chip DCN egress of v5e and v5p and the one derived for v4 are the same
    per-host figure (B-old: ~2.5e10 bytes/s per host) over the chips of each host."""
    per_host = set()
    for key in ("v4", "v5e", "v5p"):
        chip = chips.get(key)
        host = math.prod(chip.ici.host_dims)
        per_host.add(round(chip.dcn_per_chip * host))
    assert per_host == {25_000_000_000}


def test_a_two_device_chip_shares_its_dcn():
    chip = chips.get("7x")
    assert chip.per_device().dcn_per_chip == chip.dcn_per_chip / 2


def test_a_chip_without_dcn_prices_it_as_ici():
    chip = chips.get("v3")
    assert chip.dcn_per_chip is None
    assert interconnect.dcn_time(chip, "send", 1e9) == interconnect.collective_time(
        chip, "send", 1e9, 2, None
    )


# -- the expected model: what a multi-slice transfer takes beyond the egress ----------------------


def _send(case: str, chip):
    ops = analyze_hlo(text(case), chip=chip).ops
    return ops[ops["opcode"] == "send"].iloc[0]


@pytest.mark.parametrize("case", sorted(CASES))
def test_expected_is_the_calibrated_ring_over_the_slices(case):
    """The send's expected time: its ring all-reduce's bytes (2·(n−1)/n of the gradient) at the
    calibrated share of the DCN egress, and 2·(n−1) ring steps at the calibrated time each; its
    bound stays the bytes at the egress (a fact)."""
    c = CASES[case]
    n, chip = c["slices"], chips.get(c["chip"])
    cal = chip.calibration
    assert cal.dcn_efficiency and cal.dcn_step_s, "v5e has a DCN calibration"
    sent = gradient_bytes(c) * 2 * (n - 1) / n
    send = _send(case, c["chip"])
    expected = sent / (chip.dcn_per_chip * cal.dcn_efficiency) + 2 * (n - 1) * cal.dcn_step_s
    assert send["t_expected_s"] == pytest.approx(expected, rel=1e-9)
    assert send["expected_by"] == "dcn"
    assert send["t_bound_s"] == pytest.approx(sent / chip.dcn_per_chip, rel=1e-12)


def test_more_slices_take_longer_than_their_bytes_say():
    """Four slices send 1.5× the bytes of two (2·3/4 against 2·1/2 of the same gradient) and make
    three times the ring steps (6 against 2): the expected time grows by more than the bytes."""
    two, four = (_send(f"v5e_2x2_x{n}_grad", "v5e") for n in (2, 4))
    assert four["comm_bytes"] == pytest.approx(1.5 * two["comm_bytes"])
    assert four["t_bound_s"] == pytest.approx(1.5 * two["t_bound_s"])
    assert four["t_expected_s"] > 1.5 * two["t_expected_s"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_book_profile_prices_dcn_at_its_egress_alone(case):
    send = _send(case, chips.get(CASES[case]["chip"], "book"))
    assert send["t_expected_s"] == send["t_bound_s"] and send["expected_by"] == ""


def test_ring_steps_of_a_multi_slice_all_reduce():
    """Each step carries 1/n of the buffer: a ring all-reduce's 2·(n−1)/n of it is 2·(n−1) steps."""
    for n in (2, 3, 4, 32):
        buffer = 1e6
        assert interconnect.dcn_ring_steps(buffer * 2 * (n - 1) / n, buffer, n) == pytest.approx(
            2 * (n - 1)
        )
    assert interconnect.dcn_ring_steps(1e6, 0.0, 8) == 14  # no buffer known: an all-reduce


def test_a_chip_without_a_dcn_calibration_expects_the_egress():
    chip = chips.get("v3")
    assert interconnect.dcn_expected_time(chip, 1e9, 1e9, 2) == 0.0
