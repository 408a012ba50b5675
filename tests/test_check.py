"""Gate rules (hlo_roofline.check) and the pytest helper (hlo_roofline.testing)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from click.testing import CliRunner
from conftest import HAND_WRITTEN_HLO
from test_diff import report, step_hlo

import hlo_roofline as hr
from hlo_roofline import cli
from hlo_roofline.check import (
    KINDS,
    RuleError,
    Rules,
    check,
    format_seconds,
    pyproject_rules,
    read_rules,
    select,
    violation_table,
)
from hlo_roofline.diff import NotClassifiedError
from hlo_roofline.testing import assert_roofline

pytestmark = HAND_WRITTEN_HLO  # hand-written modules: not scheduled, no fusions

# -- rules -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"select": "dot("}, "bad select regex 'dot\\('"),
        ({"require": "fast"}, "require must be one of compute, memory, communication"),
        ({"min_share": 120}, "min-share must be a percent in \\[0, 100\\]"),
        ({"max_memory_share": -1}, "max-memory-share must be a percent"),
        ({"min_coverage": "95"}, "min-coverage must be a number"),
        ({"max_regression": 5}, "max-regression and baseline go together"),
        ({"baseline": "base.json"}, "max-regression and baseline go together"),
        ({"exclude": "("}, "bad exclude regex"),
        ({"kind": "attention"}, "kind: unknown kind 'attention' \\(one of matmul, collective"),
        ({"exclude_kind": ["collective", 3]}, "exclude-kind must be a kind or a list of kinds"),
        ({"max_hbm": 0}, "max-hbm must be a finite percent > 0, not 0"),
        ({"max_hbm": math.inf}, "max-hbm must be a finite percent > 0, not inf"),
        ({"max_regression": math.nan, "baseline": "b"}, "max-regression must be a finite percent"),
        ({"min_coverage": math.nan}, "min-coverage must be a percent in \\[0, 100\\], not nan"),
    ],
)
def test_bad_rules_are_rule_errors(kwargs, message):
    with pytest.raises(RuleError, match=message):
        Rules(**kwargs)


def test_from_mapping_accepts_dashes_and_suggests_close_keys(tmp_path):
    rules = Rules.from_mapping(
        {"require": "compute", "max-memory-share": 40, "baseline": "b.json", "max_regression": 5},
        base_dir=tmp_path,
    )
    assert rules.max_memory_share == 40
    assert rules.baseline == str(tmp_path / "b.json")
    with pytest.raises(RuleError, match=r"unknown rule 'requre' \(did you mean require\?\)"):
        Rules.from_mapping({"requre": "compute"}, origin="x.toml")


def test_merged_flags_override_file_rules():
    base = Rules(select="dot", require="compute", min_coverage=90)
    merged = base.merged(require="memory", select=None, min_share=5.0)
    assert (merged.select, merged.require, merged.min_share) == ("dot", "memory", 5.0)
    assert merged.describe() == "select=dot, min-share=5, require=memory, min-coverage=90"
    assert Rules().empty and not merged.empty


def test_read_rules_top_level_or_tool_table(tmp_path):
    flat = tmp_path / "rules.toml"
    flat.write_text('select = "dot"\nrequire = "compute"\n')
    assert read_rules(flat) == Rules(select="dot", require="compute")
    nested = tmp_path / "nested.toml"
    nested.write_text('[tool.hlo-roofline.check]\nmin-coverage = 99\nbaseline = "base.json"\n'
                      "max-regression = 3\n")  # fmt: skip
    rules = read_rules(nested)
    assert rules.min_coverage == 99 and rules.baseline == str(tmp_path / "base.json")
    broken = tmp_path / "broken.toml"
    broken.write_text("require = \n")
    with pytest.raises(RuleError, match="not valid TOML"):
        read_rules(broken)
    with pytest.raises(RuleError, match=r"cannot read .*missing\.toml"):
        read_rules(tmp_path / "missing.toml")


def test_pyproject_rules_come_from_the_nearest_pyproject(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.hlo-roofline.check]\nrequire = "compute"\n')
    deep = tmp_path / "src" / "pkg"
    deep.mkdir(parents=True)
    rules, path = pyproject_rules(deep)
    assert rules.require == "compute" and path == tmp_path / "pyproject.toml"
    (deep / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    assert pyproject_rules(deep) is None  # the nearest pyproject has no table: no rules


# -- applying rules --------------------------------------------------------------------------------


def test_select_searches_name_opcode_op_name_and_source():
    r = report(64)
    assert list(select(r, Rules(select="dot_general"))["name"]) == ["dot.1"]  # op_name
    assert list(select(r, Rules(select="^tanh$"))["name"]) == ["tanh.2"]  # opcode
    assert list(select(r, Rules(select=r"model\.py:13"))["name"]) == ["tanh.2"]  # source
    assert list(select(r, Rules(select="copy.3"))["name"]) == ["copy.3"]  # name
    assert select(r, Rules(select="^w$")).empty  # parameters take no time: never selected
    assert list(select(r, Rules(min_share=50))["name"]) == ["dot.1"]


def test_require_compute_fails_below_the_ridge_and_passes_above():
    failed = check(report(64), Rules(select="dot_general", require="compute"))
    assert not failed.passed
    (v,) = failed.violations
    assert (v.rule, v.op, v.opcode, v.bound) == ("require compute", "dot.1", "dot", "memory")
    assert "vs ridge 241 FLOP/B" in v.detail and "ridge at M≈" in v.detail
    passed = check(report(1024), Rules(select="dot_general", require="compute"))
    assert passed.passed and len(passed.selected) == 1


def test_require_without_selection_means_every_timed_op():
    result = check(report(1024), Rules(require="compute"))
    assert {v.op for v in result.violations} == {"tanh.2", "copy.3", "out"}


def test_a_select_that_matches_nothing_is_a_violation():
    result = check(report(1024), Rules(select="attention", require="compute"))
    assert [v.rule for v in result.violations] == ["select"]
    assert "select 'attention' leaves no timed op" in result.violations[0].detail
    # so does a selection that an exclusion empties: the gate is not silently off
    (v,) = check(report(1024), Rules(select="dot", exclude="dot", require="compute")).violations
    assert v.rule == "select" and "exclude 'dot'" in v.detail
    # min_share alone may select nothing: no op is big enough, nothing to complain about
    assert check(report(1024), Rules(min_share=99, require="compute")).passed


def test_max_memory_share_over_the_step_or_the_selection():
    small, large = report(64), report(1024)
    assert not check(small, Rules(max_memory_share=50)).passed
    assert check(large, Rules(max_memory_share=50)).passed
    (v,) = check(small, Rules(max_memory_share=50)).violations
    assert v.op == "(step)" and v.share == pytest.approx(1.0)
    assert "largest: dot.1" in v.detail
    # over a selection: only the tanh, a sliver of the step
    assert check(small, Rules(select="tanh", max_memory_share=5)).passed


def test_min_coverage():
    r = report(64)
    assert check(r, Rules(min_coverage=100)).passed
    r.summary.update(coverage=0.8, unknown_ops=["custom-call.7"])
    (v,) = check(r, Rules(min_coverage=95)).violations
    assert v.rule == "min-coverage" and "80.0% of ops priced" in v.detail
    assert "custom-call.7" in v.detail


def test_max_regression_against_a_baseline():
    small, large = report(64), report(1024)
    result = check(large, Rules(max_regression=10, baseline="unused"), baseline=small)
    assert [v.op for v in result.violations][:2] == ["(step)", "dot.1"]
    assert "+28" in result.violations[0].detail  # +28x%: the stream holds the small batch up
    assert "flipped" in result.violations[1].detail
    assert check(small, Rules(max_regression=0, baseline="unused"), baseline=large).passed


def test_max_regression_reads_the_baseline_file_and_rejudges_it(tmp_path):
    path = tmp_path / "base.csv"
    report(64, chip="v6e").to_csv(path)
    result = check(report(1024), Rules(max_regression=10, baseline=str(path)))
    assert "baseline re-judged against v5e (was v6e)" in result.violations[0].detail


def test_rules_on_verdicts_need_a_classified_report():
    with pytest.raises(NotClassifiedError, match="not classified"):
        check(report(64, chip=None), Rules(require="compute"))
    assert check(report(64, chip=None), Rules(min_coverage=90)).passed


def test_violation_table_lists_rule_op_and_why():
    result = check(hr.analyze_hlo(step_hlo(64), chip="v5e"), Rules(require="compute"))
    lines = violation_table(result.violations).splitlines()
    assert lines[0].split() == ["rule", "op", "opcode", "bound", "share", "detail"]
    assert lines[2].startswith("require compute  dot.1")
    assert len(lines) == 2 + len(result.violations)


def test_format_seconds():
    assert format_seconds(1.5e-3) == "1.5 ms"
    assert format_seconds(2.34e-7) == "234 ns"
    assert format_seconds(float("nan")) == "—"


# -- assert_roofline -------------------------------------------------------------------------------


def scaled_tanh(x, y):
    return jnp.tanh(x) * 2 + jnp.sin(y)


X = jax.ShapeDtypeStruct((1024, 1024), jnp.float32)  # 12 B per element: memory-bound on v5e


def test_assert_roofline_passes_and_returns_the_report():
    r = assert_roofline(scaled_tanh, X, X, chip="v5e", require="memory", min_coverage=100)
    assert r.chip == "v5e" and r.summary["compiled_for"] == "v5e:2x2"


def test_assert_roofline_message_is_the_violation_table():
    with pytest.raises(AssertionError) as info:
        assert_roofline(scaled_tanh, X, X, chip="v5e", select="sin|tanh", require="compute")
    message = str(info.value)
    assert message.startswith("roofline check failed on TPU v5e (select=sin|tanh, require=compute)")
    assert "require compute" in message and "memory" in message
    assert "rule" in message.splitlines()[1]


def test_assert_roofline_rejects_unknown_or_missing_rules():
    with pytest.raises(RuleError, match="did you mean require"):
        assert_roofline(scaled_tanh, X, X, chip="v5e", requires="compute")
    with pytest.raises(TypeError, match="at least one rule"):
        assert_roofline(scaled_tanh, X, X, chip="v5e")


# -- selection by kind and exclusion ---------------------------------------------------------------

FSDP = Path(__file__).parent.parent / "fixtures" / "fsdp_train_step" / "tpu_v5p.hlo.txt"


@pytest.fixture(scope="module")
def fsdp():
    """An FSDP train step for v5p: its reduce-scatters are fusions around an all-reduce whose
    op_name ends in dot_general, so `--select dot_general` catches them with the matmuls."""
    return hr.analyze_hlo(FSDP, chip="v5p")


def test_exclude_kind_collective_leaves_the_fsdp_reduce_scatters_out(fsdp):
    every = select(fsdp, Rules(select="dot_general"))
    collectives = every[every["fused_ops"].str.contains("all-reduce|all-gather")
                        | every["opcode"].isin(["all-gather", "all-reduce"])]  # fmt: skip
    assert (collectives["opcode"] == "fusion").sum() >= 2  # the reduce-scatter fusions
    kept = select(fsdp, Rules(select="dot_general", exclude_kind="collective"))
    assert set(kept["name"]) == set(every["name"]) - set(collectives["name"])
    # the gate that flagged them no longer does
    flagged = {v.op for v in check(fsdp, Rules(select="dot_general", require="compute")).violations}
    assert flagged & set(collectives["name"])
    gated = check(fsdp, Rules(select="dot_general", require="compute", exclude_kind="collective"))
    assert not {v.op for v in gated.violations} & set(collectives["name"])
    # a regex excludes by name, opcode, op_name or source: the all-gathers, not the fusions
    no_gathers = select(fsdp, Rules(select="dot_general", exclude="^all-gather"))
    assert set(every["name"]) - set(no_gathers["name"]) == set(
        every.loc[every["opcode"] == "all-gather", "name"]
    )


def test_kind_matmul_is_every_op_around_a_dot_or_convolution(fsdp):
    timed = fsdp.ops[fsdp.ops["t_expected_s"] > 0]
    around = timed["opcode"].isin(["dot", "convolution"]) | timed["fused_ops"].str.contains(
        r"\b(?:convolution|dot)\b"
    )
    assert set(select(fsdp, Rules(kind="matmul"))["name"]) == set(timed.loc[around, "name"])
    both = select(fsdp, Rules(kind=["matmul", "collective"]))
    assert len(both) == len(select(fsdp, Rules(kind="matmul"))) + len(
        select(fsdp, Rules(kind="collective"))
    )  # no op is both
    assert Rules(kind="matmul,collective").kind == ("matmul", "collective")
    assert Rules(kind=["matmul"]).describe() == "kind=matmul"


def test_kinds_read_only_report_columns():
    from hlo_roofline import schema

    for name, (meaning, predicate) in KINDS.items():
        columns = [c for c in meaning.split("`")[1::2] if c.split()[0] in schema.BY_NAME]
        assert columns, f"{name}: its meaning names no report column"
        assert callable(predicate)


def test_rules_file_kinds_and_exclusions(tmp_path, fsdp):
    path = tmp_path / "rules.toml"
    path.write_text('[tool.hlo-roofline.check]\nselect = "dot_general"\nrequire = "compute"\n'
                    'exclude-kind = ["collective"]\nexclude = "^copy"\n')  # fmt: skip
    rules = read_rules(path)
    assert rules.exclude_kind == ("collective",) and rules.exclude == "^copy"
    assert set(select(fsdp, rules)["name"]) == set(
        select(fsdp, Rules(select="dot_general", kind="matmul"))["name"]
    )
    path.write_text('kind = "attention"\n')
    with pytest.raises(RuleError, match="unknown kind 'attention'"):
        read_rules(path)


def invoke(*args: str):
    return CliRunner().invoke(cli.main, list(args), prog_name="hlo-roofline")


def test_cli_exclude_kind_and_exit_codes(tmp_path, fsdp):
    path = tmp_path / "fsdp.json"
    fsdp.to_json(path)
    base = ["check", str(path), "--select", "dot_general", "--require", "compute"]
    failed = invoke(*base)
    assert failed.exit_code == 1 and "all-gather.4" in failed.output
    less = invoke(*base, "--exclude-kind", "collective", "--format", "json")
    assert less.exit_code == 1, less.output
    flagged = {v["op"] for v in json.loads(less.output)["violations"]}
    assert flagged and not any(op.startswith("all-gather") for op in flagged)
    assert "fusion.1" not in flagged  # a reduce-scatter fusion
    matmuls = invoke("check", str(path), "--kind", "matmul", "--exclude", "fusion",
                     "--require", "compute", "--format", "json")  # fmt: skip
    # every matmul of this program is a fusion: the selection is empty, and that fails
    assert matmuls.exit_code == 1
    assert "exclude 'fusion', kind 'matmul' leaves no timed op" in matmuls.output
    bad = invoke(*base, "--kind", "attention")
    assert bad.exit_code == 2 and "unknown kind 'attention'" in bad.output
    for flag, value, message in [
        ("--max-hbm", "inf", "max-hbm must be a finite percent > 0, not inf"),
        ("--max-hbm", "0", "max-hbm must be a finite percent > 0"),
        ("--min-coverage", "nan", "min-coverage must be a percent in [0, 100]"),
        ("--min-coverage", "101", "min-coverage must be a percent in [0, 100]"),
        ("--max-hbm", "lots", "'lots' is not a number of percent"),
    ]:
        result = invoke("check", str(path), flag, value)
        assert result.exit_code == 2 and message in result.output, result.output
    # accepted, a gate: the report's temporaries are unknown (HLO text), so undecided
    gate = invoke("check", str(path), "--max-hbm", "150")
    assert gate.exit_code == 2 and "unknown: the report cannot decide max-hbm" in gate.output


def matmul_and_tanh(x, w, a):
    return x @ w, jnp.tanh(a)


BIG = jax.ShapeDtypeStruct((4096, 4096), jnp.bfloat16)  # 4096 rows: past v5e's ridge


def test_assert_roofline_takes_kind_and_exclusions():
    with pytest.raises(AssertionError, match="require compute"):
        assert_roofline(matmul_and_tanh, BIG, BIG, X, chip="v5e", require="compute")
    r = assert_roofline(matmul_and_tanh, BIG, BIG, X, chip="v5e", kind="matmul", require="compute")
    # the output tuple takes the per-op floor on a TPU: excluded by name
    assert assert_roofline(matmul_and_tanh, BIG, BIG, X, chip="v5e", exclude_kind="elementwise",
                           exclude="^tuple", require="compute") is not None  # fmt: skip
    assert assert_roofline(matmul_and_tanh, BIG, BIG, X, chip="v5e", exclude=r"/tanh$|^tuple",
                           require="compute") is not None  # fmt: skip
    assert len(select(r, Rules(kind="matmul"))) == 1
    with pytest.raises(AssertionError, match="leaves no timed op"):
        assert_roofline(scaled_tanh, X, X, chip="v5e", kind="matmul", require="compute")


@pytest.mark.parametrize("coverage", [None, math.nan, "all"])
def test_min_coverage_the_report_does_not_state_is_a_violation(coverage):
    r = report(64)
    if coverage is None:
        del r.summary["coverage"]
    else:
        r.summary["coverage"] = coverage
    (v,) = check(r, Rules(min_coverage=0)).violations
    assert v.rule == "min-coverage" and "coverage unknown" in v.detail
