"""The base model sizes shapes as the installed XLA's cost analysis does (``cost.xla_sizes``).

XLA's HloCostAnalysis changed how it sizes a shape in jaxlib 0.11.2 (measured on 0.10.2, 0.11.0,
0.11.1, 0.11.2, 0.12.0.1 and 0.12.1 with the probe below): a tiled array as stored and a tuple at
4 bytes an element, where it had counted elements and 8-byte pointers. Each supported environment
asks its own XLA here: the CI's oldest (0.10.2) and newest (0.12) hold both sides.
"""

from __future__ import annotations

import itertools

import jax
import jaxlib
import pytest

from hlo_roofline import analyze_hlo, cost
from hlo_roofline.cost import xla_sizes
from hlo_roofline.hlo import parse

# A negate of an f32[3,5] laid out in (8,128) tiles, and a tuple of two: XLA's bytes are the
# negate's operand and result, and the tuple's pointer table.
PROBE = """HloModule probe, is_scheduled=true

ENTRY %e (p: f32[3,5]) -> (f32[3,5], f32[3,5]) {
  %p = f32[3,5]{1,0:T(8,128)} parameter(0)
  %n = f32[3,5]{1,0:T(8,128)} negate(%p)
  ROOT %t = (f32[3,5]{1,0:T(8,128)}, f32[3,5]{1,0:T(8,128)}) tuple(%n, %p)
}
"""
ELEMENTS, STORED = 3 * 5 * 4, 8 * 128 * 4  # f32[3,5]'s bytes, by its elements and as tiled


def xla_bytes(text: str) -> float:
    from jaxlib import _hlo, _jax

    client = jax.devices("cpu")[0].client
    return _jax.hlo_module_cost_analysis(client, _hlo.hlo_module_from_text(text))["bytes accessed"]


def test_the_installed_xla_sizes_shapes_as_its_version_says():
    sizes = xla_sizes.installed()
    array = STORED if sizes.tiled else ELEMENTS
    assert xla_bytes(PROBE) == 2 * array + 2 * sizes.tuple_pointer_bytes, jaxlib.__version__


def test_the_base_model_prices_the_probe_as_the_installed_xla():
    assert analyze_hlo(PROBE, cost_model="xla").summary["bytes_accessed"] == xla_bytes(PROBE)


@pytest.mark.parametrize(
    ("version", "sizes"),
    [("0.10.2", xla_sizes.BY_ELEMENTS), ("0.11.1", xla_sizes.BY_ELEMENTS),
     ("0.11.2", xla_sizes.AS_STORED), ("0.12.0.1", xla_sizes.AS_STORED),
     ("0.12.1", xla_sizes.AS_STORED), ("0.13.0.dev20270101", xla_sizes.AS_STORED)],
)  # fmt: skip
def test_sizes_by_jaxlib_version(version, sizes):
    assert xla_sizes.of_jaxlib(version) == sizes


def test_the_roofline_model_sizes_as_stored_with_8_byte_pointers_whatever_xla_does():
    assert cost.shape_sizes("roofline") == xla_sizes.ShapeSizes(True, 8)
    assert analyze_hlo(PROBE).summary["bytes_accessed"] == 2 * STORED + 2 * 8


def test_a_tuple_is_sized_by_each_context_not_by_the_first():
    """Shapes keep their array sizes for the next op; a tuple's pointers are the context's, so
    one module priced under two ways of sizing, in either order, prices each as a fresh module
    (the roofline's and jaxlib 0.12's both pad to tiles: one kept size, two pointer sizes)."""
    roofline = cost.shape_sizes("roofline")

    def bytes_of(module, sizes) -> float:
        ops = cost.priced(module, "xla", sizes.tiled, sizes.tuple_pointer_bytes)
        return cost.summarize(ops, "xla")["bytes_accessed"]

    every = (xla_sizes.BY_ELEMENTS, xla_sizes.AS_STORED, roofline)
    fresh = {sizes: bytes_of(parse(PROBE), sizes) for sizes in every}
    assert list(fresh.values()) == [2 * ELEMENTS + 16, 2 * STORED + 8, 2 * STORED + 16]
    for first, then in itertools.permutations(every, 2):
        module = parse(PROBE)
        assert [bytes_of(module, first), bytes_of(module, then)] == [fresh[first], fresh[then]]
