"""The element-type tables, held to XLA's own list and to each other.

The owner is ``hlo.ir.DTYPE_BYTES`` (bytes per element of every XLA ``PrimitiveType``, sub-byte types
as fractions). Derived from it: the byte size XLA's shape-size function uses (``cost.base``: a
sub-byte element takes a whole byte unless its layout packs it). Its twins: the rate classes of the chip
database (``chips.rate_class``) and the bytes the API counts for an argument
(``placement.element_bytes``). The oracles are jaxlib's ``PrimitiveType`` enum and the bit widths NumPy
and ml_dtypes give each type.
"""

from __future__ import annotations

import re

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax._src.lib import xla_client

from hlo_roofline import chips, placement
from hlo_roofline.cost import base
from hlo_roofline.hlo.ir import DTYPE_BYTES, NON_ARRAY_TYPES

NOT_ARRAYS = {"TUPLE", "TOKEN", "OPAQUE_TYPE", "PRIMITIVE_TYPE_INVALID"}
PRIMITIVE_TYPES = sorted(
    name.lower()
    for name in dir(xla_client.PrimitiveType)
    if name.isupper() and name not in NOT_ARRAYS
)


def numpy_dtype(hlo: str) -> np.dtype:
    """The NumPy / ml_dtypes type of an HLO element type name (``f8e4m3fn`` → float8_e4m3fn)."""
    if hlo == "pred":
        return np.dtype(bool)
    if hlo == "bf16":
        return np.dtype(ml_dtypes.bfloat16)
    if found := re.fullmatch(r"f(\d)(e\d+m\d+\w*)", hlo):
        return np.dtype(getattr(ml_dtypes, f"float{found[1]}_{found[2]}"))
    kind, bits = hlo[0], int(hlo[1:])
    name = {"s": "int", "u": "uint", "f": "float", "c": "complex"}[kind] + str(bits)
    return np.dtype(getattr(ml_dtypes, name, None) or getattr(np, name))


def bits(dtype: np.dtype) -> int:
    """Bits of one element as XLA stores it unpacked-at-most (NumPy's bool is a byte, as XLA's)."""
    if (dtype.kind == "f" and dtype.itemsize == 1) or dtype.name.startswith(("float4", "float6")):
        return ml_dtypes.finfo(dtype).bits
    if dtype.name in ("int1", "int2", "int4", "uint1", "uint2", "uint4"):
        return ml_dtypes.iinfo(dtype).bits
    return dtype.itemsize * 8


def test_every_primitive_type_has_its_size():
    missing = [t for t in PRIMITIVE_TYPES if t not in DTYPE_BYTES]
    assert not missing, f"DTYPE_BYTES lacks XLA's {missing}"
    assert {"token", "opaque"} == set(NON_ARRAY_TYPES)


@pytest.mark.parametrize("hlo", sorted(DTYPE_BYTES))
def test_the_owner_gives_each_types_bit_width(hlo):
    assert DTYPE_BYTES[hlo] * 8 == bits(numpy_dtype(hlo)), hlo


def test_the_owners_types_are_xlas_or_ml_dtypes():
    """Names beyond this jaxlib's enum (s1, s2, u1, u2, and before jax 0.12 the 6-bit floats:
    newer XLA's) are real types: ml_dtypes has them."""
    newer = ("int1", "int2", "uint1", "uint2", "float6_e2m3fn", "float6_e3m2fn")
    for hlo in set(DTYPE_BYTES) - set(PRIMITIVE_TYPES):
        assert numpy_dtype(hlo).name in newer, hlo


@pytest.mark.parametrize("hlo", sorted(DTYPE_BYTES))
def test_xlas_shape_size_twin_rounds_sub_byte_types_up(hlo):
    """Unpacked, a sub-byte element takes a whole byte, as NumPy and ml_dtypes store it."""
    assert base._ELEMENT_BYTES[hlo] == numpy_dtype(hlo).itemsize
    assert set(base._ELEMENT_BYTES) == set(DTYPE_BYTES)


# chips.rate_class has no class for the 6-bit floats (Blackwell runs them at its FP8 rate): a gap
# its owner closes; strict, so the test says so once it is closed.
NO_RATE_CLASS_YET = pytest.mark.xfail(strict=True, raises=ValueError, reason="no 6-bit rate class")


@pytest.mark.parametrize(
    "hlo",
    [
        pytest.param(t, marks=NO_RATE_CLASS_YET) if t.startswith("f6e") else t
        for t in sorted(DTYPE_BYTES)
    ],
)
def test_every_numeric_type_has_a_rate_class(hlo):
    if hlo in ("s1", "s2", "u1", "u2"):  # no unit computes in them: XLA widens them first
        return
    assert chips.rate_class(hlo) in chips.RATE_CLASSES
    dtype = numpy_dtype(hlo)
    if dtype.kind in "biufc" and dtype.name in chips.model._DTYPE_CLASS:  # the NumPy spelling agrees
        assert chips.rate_class(dtype.name) == chips.rate_class(hlo)


@pytest.mark.parametrize("hlo", [t for t in sorted(DTYPE_BYTES) if DTYPE_BYTES[t] >= 1])
def test_the_apis_argument_bytes_agree(hlo):
    assert placement.element_bytes(jnp.dtype(numpy_dtype(hlo))) == DTYPE_BYTES[hlo]
