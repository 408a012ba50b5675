"""Strict JSON for the routes: the browser's ``JSON.parse`` rejects NaN and Infinity tokens."""

from __future__ import annotations

import json

from hlo_roofline._json import json_safe

_COMPACT = (",", ":")


def dumps(value) -> str:
    """``value`` as compact JSON, NaN and ±inf written as null (``hlo_roofline._json`` owns how)."""
    try:  # most payloads hold no NaN: skip the walk over every cell
        return json.dumps(value, allow_nan=False, separators=_COMPACT)
    except (ValueError, TypeError):
        return json.dumps(json_safe(value), allow_nan=False, separators=_COMPACT)
