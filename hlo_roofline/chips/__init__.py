"""Chip database: the peaks a roofline compares each op against.

The numbers live in ``data/chips.toml``; every one carries a source key (see ``docs/chips.md``).
This package turns them into frozen :class:`Chip` objects::

    from hlo_roofline import chips
    v5e = chips.get("TPU v5 lite")         # jax's device_kind works as a name
    v5e.peak_flops("bf16")                 # 1.97e14 dense FLOP/s; HLO dtypes work too ("s8")
    v5e.critical_intensity("bf16")         # FLOP per HBM byte at which compute time = memory time
    chips.get("v5e", profile="book")       # the book's rounded numbers (240 instead of 240.5)

Profiles: ``"vendor"`` (the default) holds vendor primary numbers; ``"book"`` swaps in the values
*How to Scale Your Model* rounds to, so its answers can be reproduced exactly. A chip the book does
not round differently is the same in both.

Your own chips: ``load_file("my_chips.toml")`` (same schema as the built-in file, TOML or JSON) or
``register(Chip.custom("my-chip", peak_flops={"bf16": 1e15}, hbm_bandwidth=2e12))``.

The package keeps one job per module: :mod:`~hlo_roofline.chips.model` (the dataclasses),
:mod:`~hlo_roofline.chips.loader` (the data file, validated), :mod:`~hlo_roofline.chips.registry`
(look-up by name, close matches, your own chips) and :mod:`~hlo_roofline.chips.table`
(docs/chips.md's table); the peak an op runs at is ``Chip.matmul_peak`` or ``Chip.vector_peak``.
"""

from __future__ import annotations

from hlo_roofline.chips.loader import DATA_FILE
from hlo_roofline.chips.model import (
    KINDS,
    PROFILES,
    RATE_CLASSES,
    Calibration,
    Chip,
    Ici,
    MemorySpace,
    Rate,
    RateFallbackWarning,
    ScaleUp,
    Source,
    Sourced,
    UnknownChipError,
    rate_class,
)
from hlo_roofline.chips.registry import (
    HOST,
    all_chips,
    get,
    load_file,
    names,
    provide,
    register,
    reset,
    resolve,
    source_table,
)
from hlo_roofline.chips.table import markdown_table

__all__ = [
    "DATA_FILE",
    "HOST",
    "KINDS",
    "PROFILES",
    "RATE_CLASSES",
    "Calibration",
    "Chip",
    "Ici",
    "MemorySpace",
    "Rate",
    "RateFallbackWarning",
    "ScaleUp",
    "Source",
    "Sourced",
    "UnknownChipError",
    "all_chips",
    "get",
    "load_file",
    "markdown_table",
    "names",
    "provide",
    "rate_class",
    "register",
    "reset",
    "resolve",
    "source_table",
]
