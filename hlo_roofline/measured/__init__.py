"""Join measured per-op times from a ``jax.profiler`` trace with the static per-op report.

``measure(step, *args)`` profiles a few steps, reads the trace and returns the step's report with
measured columns; ``read_trace(logdir)`` does the same for a trace written earlier, on any backend
(docs/measure.md). One job a module, in the order the data flows:

* :mod:`~hlo_roofline.xplane` decodes the ``*.xplane.pb`` protobuf;
* :mod:`.trace` reads what the trace holds: the capture's files, the programs whose optimized HLO
  it embeds, every op execution, the step windows, the chip a device trace names;
* :mod:`.renames` gives events XLA:GPU names after ops the embedded HLO lacks (async copies
  emitted under fresh names, kernels inside CUDA graphs) to the ops they ran for;
* :mod:`.attribution` gives each event's time to its HLO op (self time of control flow, the
  nearest enclosing op with a row) and sums it per step;
* :mod:`.join` sets those times against the rows of the report computed from the embedded HLO,
  with each op's efficiency (``read_trace``);
* :mod:`.profile` compiles and runs a step under the profiler (``measure``).

``hlo_roofline.measure`` and ``hlo_roofline.read_trace`` are the two entry points; the names below
are this package's public surface.
"""

from __future__ import annotations

from hlo_roofline.judge.efficiency import (
    HOST_ROOF_LOW,
    SHORTEST_TIMED_S,
    add_efficiency,
    problem,
    problem_count,
)
from hlo_roofline.measured.join import (
    CONTAINER_NOTE,
    MEASURED_COLUMNS,
    CommandBufferWarning,
    OverlapWarning,
    read_trace,
)
from hlo_roofline.measured.profile import measure
from hlo_roofline.xplane import TraceError

__all__ = [
    "CONTAINER_NOTE",
    "HOST_ROOF_LOW",
    "MEASURED_COLUMNS",
    "SHORTEST_TIMED_S",
    "CommandBufferWarning",
    "OverlapWarning",
    "TraceError",
    "add_efficiency",
    "measure",
    "problem",
    "problem_count",
    "read_trace",
]
