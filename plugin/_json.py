"""Strict JSON for the routes: the browser's ``JSON.parse`` rejects NaN and Infinity tokens."""

from __future__ import annotations

import json
import math


def dumps(value) -> str:
    """``value`` as compact JSON, NaN and ±inf written as null."""
    try:
        return json.dumps(value, allow_nan=False, separators=(",", ":"))
    except ValueError:
        return json.dumps(_json_safe(value), allow_nan=False, separators=(",", ":"))


def _json_safe(value):
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value
