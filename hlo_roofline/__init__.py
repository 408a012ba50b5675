"""hlo_roofline: per-op roofline analysis of XLA's optimized HLO.

``analyze(fn, *args, chip=...)`` compiles a JAX step (locally or compile-only for a TPU/GPU target)
and returns a :class:`Report`; ``analyze_hlo(text_or_path)`` does the same from HLO text;
``roofline(...)`` wraps a training step so its first call writes the report; ``measure(fn, *args)``
runs the step under the profiler and joins measured per-op times to the report.
"""

# First: environment defaults JAX reads when it starts its backends (see the module).
import hlo_roofline._jax_env  # noqa: F401  # isort: skip
from hlo_roofline import chips
from hlo_roofline.api import analyze, analyze_dump, analyze_hlo, roofline
from hlo_roofline.hlo import HloParseError
from hlo_roofline.measured import measure, read_trace
from hlo_roofline.report import Report, ReportError

__all__ = [
    "HloParseError",
    "Report",
    "ReportError",
    "analyze",
    "analyze_dump",
    "analyze_hlo",
    "chips",
    "measure",
    "read_trace",
    "roofline",
]
