"""A rollup group's bound comes from the ops that have a verdict: an unpriced op (a Pallas kernel
without a cost estimate) has bytes, and so a memory time, but is no evidence of a memory bound."""

from __future__ import annotations

import warnings

import pandas as pd
from conftest import FIXTURES

from hlo_roofline import analyze_hlo
from hlo_roofline.report import Report


def _report(program: str) -> Report:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return analyze_hlo(FIXTURES / program / "tpu_v5e.hlo.txt", chip="v5e")


def test_a_group_of_unknown_ops_is_unknown():
    report = _report("pallas_tpu")  # one opaque tpu_custom_call and its parameters
    kernel = report.ops[report.ops["opcode"] == "custom-call"].iloc[0]
    assert kernel.bound == "unknown" and kernel.t_memory_s > 0  # timed by its bytes alone
    for key in ("opcode", "op_name", "computation", "pass"):
        rolled = report.rollup(key)
        top = rolled.iloc[0]  # the kernel's group: the only time in the report
        assert top["t_expected_s"] == kernel.t_expected_s
        assert top["bound"] == "unknown", (key, rolled)


def test_a_mixed_group_takes_the_bound_of_its_known_ops():
    """The kernel run a million times (count, bytes and times scaled alike) in the entry of a
    compute-bound program: that group's bound is the priced ops' (as if the kernel were not
    there), however much memory time the kernel's bytes add."""
    kernel, priced = _report("pallas_tpu"), _report("mlp_bf16")
    entry = priced.ops["computation"].iloc[-1]
    alone = priced.rollup("computation").loc[entry, "bound"]
    row = kernel.ops[kernel.ops["opcode"] == "custom-call"].copy()
    scaled = ["count", "flops", "bytes_accessed", "t_memory_s", "t_expected_s"]
    row[scaled] = row[scaled] * 1e6
    row["computation"] = entry
    both = Report(pd.concat([priced.ops, row], ignore_index=True), dict(priced.summary), "both")
    group = both.rollup("computation").loc[entry]
    assert group["t_memory_s"] > group["t_compute_s"]  # the kernel's bytes dominate the sums
    assert group["bound"] == alone != "unknown"
