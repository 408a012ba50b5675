"""The Python entry points: HLO text (or a file) in, :class:`Report` out."""

from __future__ import annotations

from pathlib import Path

from hlo_roofline import cost
from hlo_roofline._gc import gc_paused
from hlo_roofline.hlo import Module, parse
from hlo_roofline.report import Report


def analyze_hlo(path_or_text: str | Path | Module, cost_model: str = "roofline") -> Report:
    """Price every executed op of an optimized HLO module.

    ``cost_model="xla"`` reproduces XLA's HloCostAnalysis op by op (its module totals, except that a
    custom call is "unknown" rather than −1); ``"roofline"`` (default) corrects it: loop bodies ×
    trip count, async pairs once, library calls priced from their shapes, and bytes on the wire for
    collectives. Raises :class:`~hlo_roofline.HloParseError` for malformed text.
    """
    if cost_model not in cost.COST_MODELS:
        raise ValueError(f"cost_model must be one of {cost.COST_MODELS}, not {cost_model!r}")
    module = path_or_text if isinstance(path_or_text, Module) else parse(path_or_text)
    with gc_paused():
        ops = cost.walk(module, cost_model)
        columns = cost.rows(module, ops)
        return Report.from_columns(columns, cost.summarize(ops, cost_model), module.name)
