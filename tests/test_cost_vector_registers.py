"""The TPU vector loop counts whole registers of 8 sublanes: a result whose layout tile has r < 8
rows fills r of them, so its loop passes 8/r times its elements (:func:`tpu.units.register_elements`).
Counted from the shapes alone here; test_tpu_programs.py checks the rule against XLA:TPU's
estimates on the report set."""

from __future__ import annotations

import warnings

import pytest

from hlo_roofline import analyze_hlo
from hlo_roofline.hlo import HloParseError

ROWS, COLS = 1024, 14336


def _copy(dtype: str, tile: str, source_tile: str = "T(8,128)") -> str:
    """A relayout copy of a [1, ROWS, COLS] array whose minor dimension is COLS and whose
    second-minor one is the size-1 dimension (as MaxText's layer slices are laid out)."""
    return f"""HloModule m

ENTRY e {{
  p = {dtype}[1,{ROWS},{COLS}]{{2,1,0:{source_tile}}} parameter(0)
  ROOT c = {dtype}[1,{ROWS},{COLS}]{{2,0,1:{tile}}} copy(p)
}}
"""


def _vector_elements(text: str) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ops = analyze_hlo(text).model_frame()
    return float(ops.loc[ops["opcode"] == "copy", "vector_elements"].iloc[0])


@pytest.mark.parametrize(
    ("dtype", "tile", "rows"),
    [("f32", "T(1,128)", 1), ("f32", "T(2,128)", 2), ("f32", "T(4,128)", 4),
     ("bf16", "T(2,128)(2,1)", 2), ("bf16", "T(4,128)(2,1)", 4), ("f32", "T(8,128)", 8),
     ("bf16", "T(8,128)(2,1)", 8), ("bf16", "T(16,128)(2,1)", 16)],
)  # fmt: skip
def test_a_result_tiled_with_fewer_than_8_rows_passes_whole_registers(dtype, tile, rows):
    """8/r times the elements for r < 8, packed or not; the elements for 8 rows or more."""
    elements = ROWS * COLS
    assert _vector_elements(_copy(dtype, tile)) == elements * max(8 / rows, 1)


def test_a_relayout_is_counted_by_what_it_writes():
    """A copy from a 2-row tile into an 8-row one passes its elements: XLA:TPU charges a relayout
    by the tile it writes (MaxText's weight copies out of ``T(2,128)(2,1)``)."""
    text = _copy("bf16", "T(8,128)(2,1)", source_tile="T(2,128)(2,1)")
    assert _vector_elements(text) == ROWS * COLS


def _reduce(tile: str) -> str:
    """A sum over the lanes of an f32 [ROWS/8, 8, COLS] array tiled ``tile`` (a softmax's sum of
    exponentials over a decode step's ``T(4,128)`` scores)."""
    return f"""HloModule m

add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}

ENTRY e {{
  p = f32[{ROWS // 8},8,{COLS}]{{2,1,0:{tile}}} parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[{ROWS // 8},8]{{1,0:T(8,128)}} reduce(p, z), dimensions={{2}}, to_apply=add
}}
"""


@pytest.mark.parametrize(("tile", "rows"), [("T(4,128)", 4), ("T(2,128)", 2), ("T(8,128)", 8)])
def test_a_reduction_folds_its_operand_in_whole_registers(tile, rows):
    """A reduce computes on its operand where it lies: an operand tiled with r < 8 rows passes
    8/r times its elements (its result is smaller, so there is no written tile to count by)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ops = analyze_hlo(_reduce(tile)).model_frame()
    elements = float(ops.loc[ops["opcode"] == "reduce", "vector_elements"].iloc[0])
    assert elements == ROWS * COLS * max(8 / rows, 1)


def test_a_sort_over_a_dimension_its_keys_lack_is_refused_on_its_line_not_a_traceback():
    """Malformed text a fuzzer made (``dimensions={7}`` on rank-2 keys): once an IndexError out of
    analyze_hlo, then priced as one pass over its keys; XLA refuses it, and so does the shape
    verifier now, on its line."""
    text = """HloModule m

cmp {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT lt = pred[] compare(a, b), direction=LT
}

ENTRY e {
  p = f32[4,8] parameter(0)
  ROOT s = f32[4,8] sort(p), dimensions={7}, to_apply=cmp
}
"""
    with pytest.raises(HloParseError, match="7 is not a dimension") as refused:
        analyze_hlo(text, chip="v5e")
    assert refused.value.line == 11


def test_a_top_k_given_no_keys_passes_its_results_not_a_traceback():
    """A fuzzer's mutant (tests/test_fuzz.py, kind ``operands``): a ``TopK`` custom call whose
    operand was dropped has no keys to compare, so no comparison passes: its loop passes its
    largest array, the 64×64 results, instead of an IndexError out of analyze_hlo."""
    text = """HloModule m, is_scheduled=true

cmp {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  ROOT gt = pred[] compare(a, b), direction=GT
}

ENTRY e {
  ROOT t = (f32[64,64]{1,0:T(8,128)}, s32[64,64]{1,0:T(8,128)}) custom-call(), custom_call_target="TopK", called_computations={cmp}
}
"""
    ops = analyze_hlo(text, chip="v5e").model_frame().set_index("name")
    assert ops.loc["t", "vector_elements"] == 64 * 64
