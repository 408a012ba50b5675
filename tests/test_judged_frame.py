"""The judged report's frame, built from its columns at once (``verdict._judged_frame``), and the
step's grouped sums without pandas' groupby (``step.grouped_sums``).

Oracles: pandas itself. The frame is the one pandas' public ``DataFrame.assign`` makes from the
same columns (values, dtypes, order); the sums are ``Series.groupby(keys).sum()``'s, bit for bit.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import FIXTURES

import hlo_roofline as hr
from hlo_roofline import _frame
from hlo_roofline.judge import step

MODULES = [FIXTURES / "gpt_tiny" / "tpu_v5e.hlo.txt", FIXTURES / "fori_loop" / "tpu_v5e.hlo.txt"]


def _module(path):
    return path if path.exists() else path.with_name(path.name + ".gz")


def _reports(tmp_path):
    """The reports a judging starts from: fresh, some rows of one (its index no longer 0..n-1),
    and one read back from its CSV."""
    for path in MODULES:
        report = hr.analyze_file(_module(path))
        yield f"{path.parent.name}", report
        rows = report.ops[report.ops["flops"] > 0]
        yield f"{path.parent.name}-rows", hr.Report(rows, report.summary, report.module)
        csv = tmp_path / f"{path.parent.name}.csv"
        report.to_csv(csv)
        yield f"{path.parent.name}-csv", hr.Report.read(csv)


def test_the_judged_frame_is_the_one_pandas_assign_makes(tmp_path, monkeypatch):
    from hlo_roofline.judge import verdict

    for name, report in _reports(tmp_path):
        judged = report.classify("v5e").ops
        with monkeypatch.context() as public_way:
            public_way.setattr(verdict, "column_arrays", lambda frame, names=None: None)
            public = report.classify("v5e").ops
        assert list(judged.columns) == list(public.columns), name
        assert judged.dtypes.equals(public.dtypes), name
        pd.testing.assert_frame_equal(judged, public, check_exact=True, obj=name)


def test_judging_again_replaces_the_verdicts_and_shares_no_memory():
    report = hr.analyze_file(_module(MODULES[0]))
    judged = report.classify("v5e")
    again = judged.classify("v5e")
    pd.testing.assert_frame_equal(again.ops, judged.ops, check_exact=True)
    before = report.ops.copy()
    judged.ops.loc[judged.ops.index[0], "flops"] = -1.0  # a user's edit of the judged frame
    judged.ops.loc[judged.ops.index[0], "opcode"] = "edited"
    pd.testing.assert_frame_equal(report.ops, before, check_exact=True)


def test_a_frame_with_repeated_names_is_judged_the_public_way():
    report = hr.analyze_file(_module(MODULES[0]))
    assert _frame.column_arrays(report.ops.rename(columns={"source": "note"})) is None


@pytest.mark.parametrize("rows", [0, 1, 7, 300, 5000])
def test_grouped_sums_add_as_pandas_groupby_does(rows):
    rng = np.random.default_rng(rows)
    # magnitudes 1e-12 .. 1e6 in one group: the order and compensation of the adding show
    values = rng.random(rows) * 10.0 ** rng.integers(-12, 7, rows)
    values[rng.random(rows) < 0.05] = np.nan
    keys = rng.choice(np.array(["compute", "memory", "none", "unknown"], dtype=object), rows)
    expected = pd.Series(values).groupby(keys).sum()
    got = step.grouped_sums(keys, values)
    assert set(got) == set(expected.index)
    for key, total in expected.items():
        assert got[key] == total  # bit for bit


@pytest.mark.parametrize("rows", [5, 2000])
def test_grouped_sums_of_pairs_and_their_first_largest(rows):
    rng = np.random.default_rng(rows)
    values = rng.random(rows) * 1e12
    dtypes = rng.choice(np.array(["bf16", "f32", "s8"], dtype=object), rows)
    precisions = rng.choice(np.array(["", "highest"], dtype=object), rows)
    expected = pd.Series(values).groupby([dtypes, precisions]).sum()
    got = step.grouped_sums(list(zip(dtypes, precisions, strict=True)), values)
    assert got == {key: float(total) for key, total in expected.items()}
    assert max(sorted(got), key=got.__getitem__) == expected.idxmax()
