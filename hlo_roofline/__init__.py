"""hlo_roofline: per-op roofline analysis of XLA's optimized HLO.

``analyze(fn, *args, chip=..., target=..., jit_kwargs=None, **fn_kwargs)`` compiles a JAX step
(locally or compile-only for a TPU/GPU target) and returns a :class:`Report`; ``analyze_hlo(text)``
does the same from HLO text, ``analyze_file(path)`` from a file, ``analyze_dump(directory)`` from an
``--xla_dump_to`` directory (one report per module); ``wrap_step(step, ...)`` wraps a training
step so its first call writes the report; ``measure(fn, *args)``
runs the step under the profiler and joins measured per-op times to the report;
``explore(make_step, target=...)`` compiles every sharding layout of a step and ranks them.

The names are loaded on first use (PEP 562), so ``import hlo_roofline.hlo`` or the TensorBoard
plugin's start-up pay for neither JAX nor pandas.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# First: environment defaults JAX reads when it starts its backends (see the module).
import hlo_roofline._jax_env  # noqa: F401  # isort: skip

if TYPE_CHECKING:
    from hlo_roofline import chips
    from hlo_roofline.api import (
        analyze,
        analyze_dump,
        analyze_file,
        analyze_hlo,
        roofline,
        wrap_step,
    )
    from hlo_roofline.explorer import explore
    from hlo_roofline.hlo import HloParseError
    from hlo_roofline.measured import measure, read_trace
    from hlo_roofline.report import Report, ReportError

# public name -> the module that defines it
_EXPORTS = {
    "HloParseError": "hlo_roofline.hlo",
    "Report": "hlo_roofline.report",
    "ReportError": "hlo_roofline.report",
    "analyze": "hlo_roofline.api",
    "analyze_dump": "hlo_roofline.api",
    "analyze_file": "hlo_roofline.api",
    "analyze_hlo": "hlo_roofline.api",
    "chips": "hlo_roofline.chips",
    "explore": "hlo_roofline.explorer",
    "measure": "hlo_roofline.measured",
    "read_trace": "hlo_roofline.measured",
    "roofline": "hlo_roofline.api",
    "wrap_step": "hlo_roofline.api",
}

__all__ = [  # the names of _EXPORTS, spelled out for readers and type checkers
    "HloParseError",
    "Report",
    "ReportError",
    "analyze",
    "analyze_dump",
    "analyze_file",
    "analyze_hlo",
    "chips",
    "explore",
    "measure",
    "read_trace",
    "roofline",
    "wrap_step",
]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'hlo_roofline' has no attribute {name!r}")
    value = importlib.import_module(module)
    if name == "chips":  # its "host" chip is measured by hlo_roofline.host, which provides it
        importlib.import_module("hlo_roofline.host")
    if name != module.rpartition(".")[2]:
        value = getattr(value, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
