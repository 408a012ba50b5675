"""JSON that every reader takes: NaN and ±inf as null, NumPy scalars as Python numbers.

One owner for what a report, a summary or a route writes as JSON: ``json.dumps`` writes NaN as a
bare ``NaN`` token, which the browser's ``JSON.parse`` (and strict parsers) reject. Only the
standard library: the TensorBoard plugin's start-up imports it.
"""

from __future__ import annotations

import json
import math


def json_safe(value):
    """``value`` with every non-finite float as None, tuples as lists, NumPy scalars as Python's."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, bool | int | str) or value is None:
        return value
    if isinstance(value, float):  # np.float64 too
        return float(value) if math.isfinite(value) else None
    if getattr(value, "shape", None) == () and hasattr(value, "item"):  # a NumPy scalar
        return json_safe(value.item())
    return value


def dumps(value, **kwargs) -> str:
    """``json.dumps`` of :func:`json_safe` ``(value)``, never a NaN token (``allow_nan=False``)."""
    return json.dumps(json_safe(value), allow_nan=False, **kwargs)
