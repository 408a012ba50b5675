"""How XLA's HloCostAnalysis sizes a shape: a fact of the jaxlib installed beside us, which changed.

Asked of ``hlo_module_cost_analysis`` on a probe module (an array with a padded tiled layout,
negated, and a tuple of two; ``tests/test_xla_sizes.py`` asks the installed XLA again): jaxlib
0.10.2, 0.11.0 and 0.11.1 size an array by its elements and a tuple as a table of 8-byte pointers;
0.11.2, 0.12.0.1 and 0.12.1 size an array with a tiled layout as stored (its minor dimensions
rounded up to the first tile, as libtpu and the roofline model do) and a tuple at 4 bytes an
element. The base model (``cost_model="xla"``) sizes shapes as the installed XLA does; the
roofline model always as stored, with 8-byte pointers.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import metadata


@dataclass(frozen=True)
class ShapeSizes:
    """How shapes are sized: a tiled array padded to its tiles or not, and a tuple's pointers."""

    tiled: bool
    tuple_pointer_bytes: int


BY_ELEMENTS = ShapeSizes(tiled=False, tuple_pointer_bytes=8)  # jaxlib up to 0.11.1
AS_STORED = ShapeSizes(tiled=True, tuple_pointer_bytes=4)  # jaxlib 0.11.2 on
FIRST_AS_STORED = (0, 11, 2)


def of_jaxlib(version: str) -> ShapeSizes:
    """The sizes XLA's cost analysis used in jaxlib ``version`` ("0.12.0.1", "0.11.2.dev20260101");
    a version past those measured is taken to size as the newest did."""
    numbers = tuple(int(m.group()) for p in version.split(".")[:3] if (m := re.match(r"\d+", p)))
    return AS_STORED if numbers >= FIRST_AS_STORED else BY_ELEMENTS


@functools.cache
def installed() -> ShapeSizes:
    """The sizes of the jaxlib installed (from its version: nothing is imported)."""
    try:
        return of_jaxlib(metadata.version("jaxlib"))
    except metadata.PackageNotFoundError:  # jaxlib is a dependency: only a broken install
        return AS_STORED
