"""XLA:TPU's SparseCore offloads, from MaxText's real step (fixtures/maxtext): the embedding
lookup runs on the SparseCore as a ``custom-call-start`` whose operands arrive through its
``custom-call-update`` and whose program is in ``called_computations``. It is priced as the gather
that program runs (rows read, rows written, indices), once, at the start; its update and done are
bookkeeping, with no TensorCore vector loop."""

from __future__ import annotations

import gzip
import math
import re
from pathlib import Path

import pytest

from hlo_roofline import analyze_hlo

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "maxtext"
_ARRAY = re.compile(r"(bf16|f32|s32)\[([\d,]*)\]")
_BYTES = {"bf16": 2, "f32": 4, "s32": 4}


@pytest.fixture(scope="module")
def default_step():
    with gzip.open(FIXTURES / "default_v5p8.hlo.txt.gz", "rt") as f:
        text = f.read()
    return text, analyze_hlo(text, chip="v5p")


def test_a_sparsecore_gather_is_priced_from_the_rows_it_moves(default_step):
    text, report = default_step
    # The update names the gather's (table, indices) and its result: the first three arrays.
    line = next(x for x in text.splitlines() if "%gather_offload_async_start.update =" in x)
    (table_t, table), (index_t, indices), (out_t, out) = _ARRAY.findall(line)[:3]
    rows, width = (int(d) for d in out.split(","))
    assert int(indices) == rows and int(table.split(",")[1]) == width
    expected = 2 * rows * width * _BYTES[out_t] + rows * _BYTES[index_t]  # read + write + indices
    ops = report.model_frame().set_index("name")
    start = ops.loc["gather_offload_async_start"]
    assert not start["unknown"]
    assert math.isclose(start["bytes_accessed"], expected, rel_tol=1e-6)
    whole_table = math.prod(int(d) for d in table.split(",")) * _BYTES[table_t]
    assert start["bytes_accessed"] != pytest.approx(whole_table)
    for half in ("gather_offload_async_start.update", "gather_offload_async_done"):
        assert ops.loc[half, "bytes_accessed"] == 0 and ops.loc[half, "vector_elements"] == 0
        assert ops.loc[half, "t_expected_s"] == 0


def test_every_op_of_the_default_step_is_priced(default_step):
    _, report = default_step
    assert report.summary["coverage"] == 1.0 and report.summary["unknown_ops"] == []
