"""docs/chips.md's chip table, generated from the registry (``python -m hlo_roofline.chips``)."""

from __future__ import annotations

from hlo_roofline.chips.registry import all_chips, get


def _fmt(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x:.5g}".replace("e+", "e")


def _fmt_bytes(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x / 2**30:g} GiB" if x % 2**30 == 0 else f"{x / 1e9:g} GB"


def markdown_table() -> str:
    """The chip table of docs/chips.md (regenerate with ``python -m hlo_roofline.chips``)."""
    head = (
        "| key | chip | bf16 | fp8 | int8 | fp32 | HBM | HBM B/s | CI vendor | CI book "
        "| ICI link / GPU egress, one-way B/s | sources |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    rows = [head]
    for c in all_chips():
        b = get(c.key, "book")
        link = c.ici.link_oneway if c.ici else (c.scaleup.oneway if c.scaleup else None)
        keys = dict.fromkeys(k for s in [*c.sources.values(), *b.sources.values()] for k in s.keys)
        row = [
            f"`{c.key}`",
            c.name,
            *(_fmt(c.flops.get(r)) for r in ("bf16", "fp8", "int8", "fp32")),
            _fmt_bytes(c.hbm_capacity),
            _fmt(c.hbm_bandwidth),
            f"{c.critical_intensity():.1f}",
            f"{b.critical_intensity():.1f}",
            _fmt(link),
            ", ".join(keys),
        ]
        rows.append("| " + " | ".join(row) + " |")
    return "\n".join(rows) + "\n"
