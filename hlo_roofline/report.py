"""The result users hold: a per-op DataFrame and a summary dict."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd


@dataclass
class Report:
    """Per-op costs of one compiled module (``ops``: one row per executed op, values per step)."""

    ops: pd.DataFrame
    summary: dict = field(default_factory=dict)
    module: str = ""

    @classmethod
    def from_columns(cls, columns: dict[str, list], summary: dict, module: str = "") -> Report:
        return cls(pd.DataFrame(columns), summary, module)

    def top(self, n: int = 10, by: str = "bytes_accessed") -> pd.DataFrame:
        """The ``n`` ops with the largest ``by``."""
        return self.ops.nlargest(n, by)

    def __repr__(self) -> str:
        s = self.summary
        return (
            f"<Report {self.module}: {len(self.ops)} ops, {s.get('flops', 0):.4g} FLOPs, "
            f"{s.get('bytes_accessed', 0):.4g} bytes, coverage {s.get('coverage', 1):.1%}>"
        )
