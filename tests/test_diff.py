"""Run comparison (hlo_roofline.diff): ops matched across compiles by a stable identity."""

from __future__ import annotations

import json

import pytest
from conftest import HAND_WRITTEN_HLO

import hlo_roofline as hr
from hlo_roofline import chips
from hlo_roofline.cli.render import diff_text
from hlo_roofline.diff import NotClassifiedError, compare, shape_key

pytestmark = HAND_WRITTEN_HLO  # hand-written modules: not scheduled, no fusions


def step_hlo(
    batch: int, dot: str = "dot.1", tanh: str = "tanh.2", copy: bool = True, dots: int = 1
) -> str:
    """X[batch, 8192] · W[8192, 8192] (memory-bound at 64, compute-bound at 1024 on v5e) + tanh."""
    b = batch
    row = f"bf16[{b},8192]"
    body = [
        f'  %x = {row}{{1,0}} parameter(0), metadata={{op_name="x"}}',
        '  %w = bf16[8192,8192]{1,0} parameter(1), metadata={op_name="w"}',
    ]
    names = []
    for i in range(dots):
        name = dot if i == 0 else f"{dot}_{i}"
        names.append(name)
        body.append(
            f"  %{name} = {row}{{1,0}} dot(%x, %w), lhs_contracting_dims={{1}}, "
            'rhs_contracting_dims={0}, metadata={op_name="jit(step)/dot_general" '
            'source_file="/src/model.py" source_line=12}'
        )
    wide = f"f32[{b},8192]"  # 8 B per element: the HBM, not a TPU's vector loop, sets its time
    body.append(f'  %a = {wide}{{1,0}} parameter(2), metadata={{op_name="a"}}')
    body.append(
        f'  %{tanh} = {wide}{{1,0}} tanh(%a), metadata={{op_name="jit(step)/tanh" '
        'source_file="/src/model.py" source_line=13}'
    )
    names.append(tanh)
    if copy:
        body.append(f"  %copy.3 = {wide}{{0,1}} copy(%a)")
        names.append("copy.3")
    shapes = [row] * dots + [wide] * (len(names) - dots)
    shape = "(" + ", ".join(shapes) + ")"
    body.append(f"  ROOT %out = {shape} tuple({', '.join('%' + n for n in names)})")
    params = f"(x: {row}, w: bf16[8192,8192], a: {wide})"
    return "HloModule step\nENTRY %main " + params + f" -> {shape} {{\n" + "\n".join(body) + "\n}\n"


def report(batch: int, chip: str | None = "v5e", **kwargs) -> hr.Report:
    return hr.analyze_hlo(step_hlo(batch, **kwargs), chip=chip)


def by_op_name(diff, op_name: str):
    rows = diff.ops[diff.ops["op_name"] == op_name]
    assert len(rows) == 1, rows
    return rows.iloc[0]


def test_identical_reports_change_nothing():
    diff = compare(report(64), report(64))
    assert set(diff.ops["change"]) == {"same"}
    assert diff.step_change == 0
    assert diff.flipped.empty and diff.added.empty and diff.removed.empty


def test_batch_size_across_the_ridge_flips_the_matmul():
    diff = compare(report(64), report(1024))
    dot = by_op_name(diff, "jit(step)/dot_general")
    assert dot["change"] == "flipped"
    assert (dot["bound_a"], dot["bound_b"]) == ("memory", "compute")
    assert (dot["shape_a"], dot["shape_b"]) == ("bf16[64,8192]", "bf16[1024,8192]")
    assert dot["delta_s"] > 0
    assert by_op_name(diff, "jit(step)/tanh")["change"] == "changed"
    assert diff.added.empty and diff.removed.empty  # the copy matched by opcode
    assert diff.step_change > 1
    assert list(diff.flipped["name_a"]) == ["dot.1"]


def test_renamed_fusions_still_match():
    diff = compare(report(64), report(64, dot="fusion.77", tanh="tanh_fusion"))
    assert set(diff.ops["change"]) == {"same"}
    dot = by_op_name(diff, "jit(step)/dot_general")
    assert (dot["name_a"], dot["name_b"]) == ("dot.1", "fusion.77")


def test_added_and_removed_ops():
    diff = compare(report(64, copy=True), report(64, copy=False))
    assert list(diff.removed["opcode"]) == ["copy"]
    assert diff.added.empty
    back = compare(report(64, copy=False), report(64, copy=True))
    assert list(back.added["name_b"]) == ["copy.3"]
    assert back.added["t_expected_s_a"].isna().all()


def test_duplicates_of_one_identity_pair_in_program_order():
    diff = compare(report(64, dots=3), report(64, dots=2, dot="fusion"))
    dots = diff.ops[diff.ops["opcode"] == "dot"]
    matched = dots[dots["change"] == "same"]
    assert list(matched["name_a"]) == ["dot.1", "dot.1_1"]
    assert list(matched["name_b"]) == ["fusion", "fusion_1"]
    assert list(diff.removed["name_a"]) == ["dot.1_2"]


def test_b_is_judged_against_a_chip():
    diff = compare(report(1024), report(1024, chip="v6e"))
    assert diff.chip == "v5e"
    assert "re-judged against v5e (was v6e)" in diff.note
    assert set(diff.ops["change"]) == {"same"}
    unclassified = compare(report(1024), report(1024, chip=None))
    assert unclassified.note == "re-judged against v5e"


def test_a_must_be_classified():
    with pytest.raises(NotClassifiedError, match="not classified"):
        compare(report(64, chip=None), report(64))


def test_profiles_count_as_different_judgements():
    book = report(64).classify(chips.get("v5e", profile="book"))
    diff = compare(book, report(64))
    assert "re-judged" in diff.note


def test_shape_key_drops_layouts_and_tiling():
    assert shape_key("bf16[8,128]{1,0:T(8,128)(2,1)}") == "bf16[8,128]"
    assert shape_key("(f32[2]{0}, u32[]{:S(2)})") == "(f32[2], u32[])"


def test_to_dict_is_json():
    data = compare(report(64), report(1024)).to_dict()
    text = json.dumps(data, allow_nan=False)
    assert json.loads(text)["flipped"] == 1
    assert data["step_change"] > 1


def _tiny_add(dtype: str) -> str:
    return f"""HloModule tiny
ENTRY %main (x: {dtype}[1024], y: {dtype}[1024]) -> {dtype}[1024] {{
  %x = {dtype}[1024]{{0}} parameter(0)
  %y = {dtype}[1024]{{0}} parameter(1)
  ROOT %add.1 = {dtype}[1024]{{0}} add(%x, %y), metadata={{op_name="jit(step)/add"}}
}}
"""


def test_ops_held_at_the_per_op_floor_do_not_flip():
    """A 1024-element add is expected at v5e's per-op floor in f32 and in bf16 (a calibration),
    far above either bound (its bytes at HBM speed): no bound sets its time, so no flip."""
    a, b = (hr.analyze_hlo(_tiny_add(dtype), chip="v5e") for dtype in ("f32", "bf16"))
    row_a, row_b = (r.ops.set_index("name").loc["add.1"] for r in (a, b))
    floor = chips.get("v5e").calibration.op_floor_s
    assert row_a.t_expected_s == row_b.t_expected_s == floor
    assert max(row_a.t_bound_s, row_b.t_bound_s) < floor / 10 and row_a.expected_by == "floor"
    assert compare(a, b).flipped.empty


def with_unknown_kernel(batch: int) -> str:
    """step_hlo plus a custom call no rule prices: its FLOPs are unknown."""
    row = f"f32[{batch},8192]"
    text = step_hlo(batch).replace(
        "  ROOT %out",
        f'  %my_kernel.9 = {row}{{1,0}} custom-call(%a), custom_call_target="my_kernel"\n'
        "  ROOT %out",
    )
    text = text.replace("tuple(%dot.1", "tuple(%my_kernel.9, %dot.1")
    return text.replace("-> (", f"-> ({row}, ").replace("ROOT %out = (", f"ROOT %out = ({row}, ")


def test_an_unpriced_op_on_either_side_is_said(tmp_path):
    from click.testing import CliRunner

    from hlo_roofline import cli

    priced, unpriced = report(64), hr.analyze_hlo(with_unknown_kernel(64), chip="v5e")
    n_ops = int((unpriced.ops["t_expected_s"] > 0).sum()) - 1  # the root tuple is not counted
    assert unpriced.summary["coverage"] == pytest.approx((n_ops - 1) / n_ops)  # analytic: 3/4
    diff = compare(priced, unpriced)
    assert diff.coverage_a == 1.0 and diff.unknown_a == ()
    assert diff.coverage_b == pytest.approx(0.75) and diff.unknown_b == ("my_kernel.9",)
    text = diff_text(diff, 10)
    assert "coverage B: 75.0% of ops priced (1 unknown: my_kernel.9)" in text
    assert "coverage A" not in text  # all priced: nothing to say
    assert "coverage A: 75.0%" in diff_text(compare(unpriced, priced), 10)
    assert json.loads(json.dumps(diff.to_dict(), default=float))["unknown_b"] == ["my_kernel.9"]
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    priced.to_json(a)
    unpriced.to_json(b)

    def run(*args):
        return CliRunner().invoke(cli.main, ["diff", str(a), str(b), *args])

    assert run("--min-coverage", "70").exit_code == 0
    low = run("--min-coverage", "80")
    assert low.exit_code == 1 and "(B)" in low.output and "75.0% of ops priced" in low.output
    assert "failed: coverage below 80%" in low.output
    nan = run("--fail-on-regression", "nan")
    assert nan.exit_code == 2 and "max-regression must be a finite percent" in nan.output
    assert run("--fail-on-regression", "inf").exit_code == 2
    # a coverage the report does not state fails the gate, it does not pass it: read from a
    # file, the report is refused (a summary lacks none of its keys); given as a Report, the
    # comparison says so
    unstated = hr.analyze_hlo(step_hlo(64), chip="v5e")
    del unstated.summary["coverage"]
    unstated.to_json(b)
    gone = run("--min-coverage", "0")
    assert gone.exit_code == 2 and "lacks coverage" in gone.output
    assert compare(priced, unstated).coverage_b is None
