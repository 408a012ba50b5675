"""XLA:TPU's own cost analysis (libtpu, compile-only) as an oracle for TPU programs."""

from __future__ import annotations

import pytest
from conftest import fixture_files, fixture_id, load_fixture

from hlo_roofline.cost import summarize, walk
from hlo_roofline.hlo import parse

TPU = [p for p in fixture_files() if p.name.startswith("tpu_")]


def _has(module, *opcodes: str) -> bool:
    return any(i.opcode in opcodes for i in module.instructions())


def _opcodes(path) -> set[str]:
    return {i.opcode for i in parse(load_fixture(path)[0]).instructions()}


# Chosen when the tests are collected, not skipped when they run: libtpu prices custom calls its
# own way (0, a Pallas estimate, or a TopK count), and gathers and scatters differently.
WITHOUT_CUSTOM_CALLS = [p for p in TPU if "custom-call" not in _opcodes(p)]
WITHOUT_CUSTOM_PRICING = [
    p for p in WITHOUT_CUSTOM_CALLS
    if not {"gather", "scatter"} & _opcodes(p) and "async-collective" not in load_fixture(p)[0]
]  # fmt: skip


def test_the_oracle_covers_programs_of_both_kinds():
    """Each test below has fixtures to run on (an empty selection would pass by running nothing)."""
    assert len(WITHOUT_CUSTOM_CALLS) >= 10 and len(WITHOUT_CUSTOM_PRICING) >= 10


@pytest.mark.parametrize("path", WITHOUT_CUSTOM_CALLS, ids=fixture_id)
def test_flops_equal_libtpu_on_programs_without_custom_calls(path):
    text, oracle = load_fixture(path)
    module = parse(text)
    assert not _has(module, "custom-call")
    ours = summarize(walk(module, "xla"), "xla")
    libtpu = oracle["backend_cost_analysis"]
    assert ours["flops"] == pytest.approx(libtpu["flops"], rel=1e-6)
    assert ours["transcendentals"] == pytest.approx(libtpu["transcendentals"], rel=1e-6)


@pytest.mark.parametrize("path", WITHOUT_CUSTOM_PRICING, ids=fixture_id)
def test_tile_padded_bytes_approach_libtpu(path):
    """libtpu sizes arrays padded to their tiles; so does our roofline model."""
    text, oracle = load_fixture(path)
    module = parse(text)
    assert not _has(module, "custom-call", "gather", "scatter")
    libtpu = oracle["backend_cost_analysis"]["bytes accessed"]
    plain = summarize(walk(module, "xla"), "xla")["bytes_accessed"]
    padded = summarize(walk(module, "xla", pad_to_tiles=True), "xla")["bytes_accessed"]
    assert abs(padded - libtpu) <= abs(plain - libtpu)
    assert padded == pytest.approx(libtpu, rel=0.07)
