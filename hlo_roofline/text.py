"""Numbers, tables and errors as text, for every face that prints (the CLI, check's violation
table, the explorer's rows)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def one_line(exc: BaseException) -> str:
    """An error as one line: its message's first line (libtpu's go on with advice and traces), or
    its type's name when it has no message."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def format_seconds(seconds: float) -> str:
    """``1.23 ms``, ``45.6 µs``: three significant digits in the nearest unit."""
    if seconds is None or not math.isfinite(seconds):
        return "—"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def format_table(rows: Sequence[Mapping[str, object]], right: Sequence[str] = ()) -> str:
    """A plain-text table; columns named in ``right`` are right-aligned (numbers)."""
    if not rows:
        return ""
    headers = list(rows[0])
    cells = [[str(row.get(h, "")) for h in headers] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if h in right else v.ljust(w)
            for h, v, w in zip(headers, values, widths, strict=True)
        ]
        return "  ".join(parts).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, cells)])
