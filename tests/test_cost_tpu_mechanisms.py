"""The counts of two expected-model mechanisms (tpu.units), from hand-written HLO whose answer is
arithmetic on its shapes: a copy that moves its lanes counts each side in HBM as its tiles store
it (``relaid_elements``), and a matmul fusion that folds its own product counts the product's
elements (``folded_product_elements``). tests/test_tpu_heldout.py checks their rates against
XLA:TPU's estimates on programs they were not fitted on."""

from __future__ import annotations

import warnings

import pytest

from hlo_roofline import analyze_hlo


def _row(text: str, opcode: str) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ops = analyze_hlo(text).model_frame()
    return ops.loc[ops["opcode"] == opcode].iloc[0].to_dict()


def _copy(dims: str, source: str, result: str, dtype: str = "f32") -> str:
    return f"""HloModule m

ENTRY e {{
  p = {dtype}[{dims}]{{{source}}} parameter(0)
  ROOT c = {dtype}[{dims}]{{{result}}} copy(p)
}}
"""


@pytest.mark.parametrize(
    ("source", "result", "sides"),
    [("1,0:T(8,128)", "0,1:T(8,128)", 2),  # both in HBM
     ("1,0:T(8,128)", "0,1:T(8,128)S(1)", 1),  # the result in VMEM is not charged
     ("1,0:T(8,128)S(1)", "0,1:T(8,128)S(1)", 0),  # VMEM to VMEM: nothing
     ("1,0:T(8,128)", "1,0:T(2,128)", 0)],  # the lanes stay: a plain relayout, the loop's
)  # fmt: skip
def test_a_lane_moving_copy_counts_each_side_in_hbm(source, result, sides):
    assert _row(_copy("512,1024", source, result), "copy")["relaid_elements"] == sides * 512 * 1024


def test_padded_lanes_count_and_sixteen_row_tiles_do_not():
    """A 40-wide minor dimension fills 128 lanes: the side counts its tiles' elements (the rows
    pad to 8 too); a bf16 side in 16-row tiles (7x's) is not counted at all."""
    padded = _row(_copy("64,40", "1,0:T(8,128)", "0,1:T(8,128)S(1)"), "copy")
    assert padded["relaid_elements"] == 64 * 128
    narrow = _row(_copy("64,40", "0,1:T(8,128)S(1)", "1,0:T(8,128)"), "copy")
    assert narrow["relaid_elements"] == 64 * 128
    sixteen = _copy("512,1024", "1,0:T(16,128)(2,1)", "0,1:T(16,128)(2,1)", "bf16")
    assert _row(sixteen, "copy")["relaid_elements"] == 0


_SCORES = """HloModule m

max {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}}

fused {{
  q = bf16[8,256,64]{{2,1,0}} parameter(0)
  k = bf16[8,512,64]{{2,1,0}} parameter(1)
  s = bf16[8,256,512]{{2,1,0}} dot(q, k), lhs_batch_dims={{0}}, lhs_contracting_dims={{2}}, rhs_batch_dims={{0}}, rhs_contracting_dims={{2}}
  f = f32[8,256,512]{{2,1,0}} convert({folded})
  i = f32[] constant(-inf)
  r = f32[8,256]{{1,0}} reduce(f, i), dimensions={{2}}, to_apply=max
  ROOT t = (f32[8,256]{{1,0}}, bf16[8,256,512]{{2,1,0}}) tuple(r, s)
}}

ENTRY e {{
  q = bf16[8,256,64]{{2,1,0}} parameter(0)
  k = bf16[8,512,64]{{2,1,0}} parameter(1)
  ROOT f = (f32[8,256]{{1,0}}, bf16[8,256,512]{{2,1,0}}) fusion(q, k), kind=kOutput, calls=fused
}}
"""


def test_a_product_its_fusion_folds_counts_its_elements():
    """The row max of ``q·kᵀ`` computed in the fusion that writes it: B·M·N product elements.
    A reduce that reads no product (here: of a parameter converted) counts nothing."""
    folded = _row(_SCORES.format(folded="s"), "fusion")
    assert folded["folded_product_elements"] == 8 * 256 * 512
    unrelated = _SCORES.format(folded="q").replace(
        "f = f32[8,256,512]{2,1,0} convert(q)", "f = f32[8,256,64]{2,1,0} convert(q)"
    )
    assert _row(unrelated, "fusion")["folded_product_elements"] == 0


def test_a_chip_without_the_fold_rate_charges_the_folded_product_its_loop():
    """The fold's rate takes the place of the loop's charge on a folded product's row; a chip
    calibrated with a loop rate and no fold rate (a user's chips.toml) keeps the loop's charge
    there, as on any other row, rather than charging nothing for it."""
    import dataclasses

    from hlo_roofline import chips

    report = analyze_hlo(_SCORES.format(folded="s"))
    chip = chips.get("v5e")
    assert chip.calibration.folded_product_rate and chip.calibration.vector_elements_rate
    calibration = dataclasses.replace(chip.calibration, folded_product_rate=None)
    ops = report.classify(dataclasses.replace(chip, calibration=calibration)).ops
    fused = ops.loc[ops["opcode"] == "fusion"].iloc[0]
    assert fused["expected_by"] == "loop"
    assert fused["t_expected_s"] > fused["t_bound_s"]
