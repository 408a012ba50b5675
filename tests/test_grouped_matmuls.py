"""Grouped matmuls (a mixture-of-experts layer's expert products) priced from their shapes on the
matrix unit: XLA's ``ragged-dot`` and megablox's ``gmm`` / ``tgmm``, compiled for real
(fixtures/grouped_matmuls/generate.py; MaxText's Mixtral step, fixtures/maxtext), held to the
analytic count of the shapes each case was built with (cases.json): 2·m·k·n a product, m rows in
groups contracted over k into n (the weights' gradient: over the m rows into each group's k × n),
and to the kernels' own ``cost_estimate``, written by their authors."""

from __future__ import annotations

import gzip
import json
import re
import warnings

import pytest
from conftest import FIXTURES

import hlo_roofline as hr
from hlo_roofline.cost import walk
from hlo_roofline.cost.grouped_matmuls import is_grouped_matmul
from hlo_roofline.hlo import parse

HERE = FIXTURES / "grouped_matmuls"
CASES = json.loads((HERE / "cases.json").read_text())
MIXTRAL = FIXTURES / "maxtext" / "mixtral_8x7b_v5p8.hlo.txt.gz"
BYTES = {"bf16": 2, "f32": 4, "s32": 4}


def text(path) -> str:
    with gzip.open(path, "rt") as f:
        return f.read()


def load(path):
    return parse(text(path))


def grouped(module) -> list:
    """(instruction, cost) of each grouped matmul, in program order."""
    return [
        (op.instr, op.cost)
        for op in walk(module, "roofline")
        if op.instr.opcode == "custom-call"
        and is_grouped_matmul(op.instr, op.instr.attrs.get("custom_call_target", "").strip('"'))
    ]


def declared(instr) -> float | None:
    found = re.search(r'"cost_estimate":\{"flops":"(\d+)"', instr.attrs.get("backend_config", ""))
    return float(found.group(1)) if found else None


def array_bytes(dims, dtype: str) -> int:
    n = 1
    for d in dims:
        n *= d
    return n * BYTES[dtype]


@pytest.mark.parametrize("case", sorted(CASES))
def test_grouped_matmul_flops_are_the_analytic_count_on_the_matrix_unit(case):
    c = CASES[case]
    m, k, n, g = c["m"], c["k"], c["n"], c["g"]
    found = grouped(load(HERE / f"{case}.hlo.txt.gz"))
    assert len(found) == (2 if c["backward"] else 1), [i.name for i, _ in found]
    # the operands a product reads and writes: the rows, the groups' weights, the result
    # (the weights' gradient reads the rows and the result's gradient and writes the weights')
    shapes = {(m, k), (g, k, n), (m, n)}
    for instr, cost in found:
        assert not cost.unknown
        assert cost.flops == 2 * m * k * n, instr.name
        assert cost.mxu_flops == cost.flops, "every FLOP on the matrix unit"
        assert cost.upper_bound, "group sizes are runtime values"
        assert cost.flops == declared(instr), "the kernel's own count"
        floats = [op.shape for op in instr.operands if op.shape.dtype == "bf16"]
        assert {tuple(sorted(s.dims)) for s in [*floats, instr.shape]} == {
            tuple(sorted(s)) for s in shapes
        }
        data = sum(array_bytes(s.dims, "bf16") for s in [*floats, instr.shape])
        assert data <= cost.bytes_accessed <= data + 4096  # plus the group metadata's few ints


def test_ragged_dot_metadata_is_not_a_matmul():
    """XLA's ``ragged-dot-metadata`` kernel (group sizes to tile offsets) is not priced as one."""
    module = load(HERE / "ragged_fwd_m1024k512n768g4.hlo.txt.gz")
    calls = [i for i in module.instructions() if i.opcode == "custom-call"]
    names = {i.name: is_grouped_matmul(i, "tpu_custom_call") for i in calls}
    assert names == {"ragged-dot-metadata": False, "ragged-dot-none": True}


def test_mixtral_experts_run_on_the_matrix_unit():
    """MaxText's Mixtral step (megablox gmm and tgmm under shard_map, expert-parallel): every
    grouped matmul is 2·m·k·n of its shapes, the kernel's own estimate, and runs on the MXU."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = hr.analyze_hlo(text(MIXTRAL), chip="v5p")
    ops = report.model_frame()
    kernels = ops[ops["name"].str.fullmatch(r"t?gmm(\.\d+)?")]
    assert len(kernels) == 12  # 3 forward gmm, their 3 rematerialized, 3 gmm + 3 tgmm backward
    module = load(MIXTRAL)
    for instr, cost in grouped(module):
        rows, inner = instr.operands[5].shape.dims
        if instr.name.startswith("tgmm"):  # [m, k] and [m, n] into [groups, k, n]
            assert instr.shape.dims[1:] == (inner, instr.operands[6].shape.dims[1])
            flops = 2 * rows * inner * instr.operands[6].shape.dims[1]
        else:  # [m, k] by [groups, k, n] (or [groups, n, k]) into [m, n]
            flops = 2 * rows * inner * instr.shape.dims[1]
        assert cost.flops == flops == declared(instr)
    assert set(kernels["compute_unit"]) == {"mxu"}
    assert (kernels["kernel_mxu_flops"] == kernels["flops"]).all()
    # the report says which counts may be high: the kernels' (group sizes are runtime values),
    # and no plain matmul's
    assert kernels["upper_bound"].all()
    plain = ops[(ops["mm_k"] > 0) & ~ops.index.isin(kernels.index)]
    assert len(plain) and not plain["upper_bound"].any()
