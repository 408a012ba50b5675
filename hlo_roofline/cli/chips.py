"""``chips [NAME]``: the chip database, or one chip with every number and its source."""

from __future__ import annotations

import click

from hlo_roofline import chips
from hlo_roofline._json import dumps
from hlo_roofline.cli._common import CONTEXT, format_option, one_line
from hlo_roofline.text import format_table


@click.command(
    "chips", context_settings=CONTEXT, short_help="List chips, or show one with sources."
)
@click.argument("name", required=False)
@format_option("table", "json")
def chips_command(name, fmt):
    """List the chip database, or show one chip with every number and its source.

    \b
    Example:
      $ hlo-roofline chips
      $ hlo-roofline chips v5e
      $ hlo-roofline chips "TPU v5 lite" --format json
    """
    if name is None:
        rows = [
            {
                "key": c.key,
                "name": c.name,
                "bf16 FLOP/s": f"{c.peak_flops('bf16'):.4g}",
                "HBM B/s": f"{c.hbm_bandwidth:.4g}",
                "ridge FLOP/B": f"{c.critical_intensity('bf16'):.0f}",
            }
            for c in chips.all_chips()
        ]
        if fmt == "json":
            click.echo(dumps(rows))
        else:
            click.echo(format_table(rows, right=("bf16 FLOP/s", "HBM B/s", "ridge FLOP/B")))
        return
    try:
        chip = chips.get(name)
    except chips.UnknownChipError as exc:
        raise click.BadParameter(one_line(exc), param_hint="NAME") from None
    rows = [
        {
            "field": path,
            "value": _value(sourced.value),
            "sources": ", ".join(sourced.keys),
            "note": sourced.note,
        }
        for path, sourced in sorted(chip.sources.items())
    ]
    cited = dict.fromkeys(k for s in chip.sources.values() for k in s.keys)
    table = chips.source_table()
    legend = {k: table[k] for k in cited if k in table}
    if fmt == "json":
        references = {k: {"title": s.title, "url": s.url} for k, s in legend.items()}
        click.echo(dumps({"key": chip.key, "name": chip.name, "numbers": rows,
                               "sources": references}))  # fmt: skip
        return
    ridges = ", ".join(
        f"{d} {chip.critical_intensity(d):.0f}" for d in ("bf16", "fp8", "int8") if chip.has_rate(d)
    )
    click.echo(f"{chip.name} ({chip.key}; aliases: {', '.join(chip.aliases) or '—'})")
    click.echo(f"ridge (FLOP per HBM byte): {ridges}\n")
    click.echo(format_table(rows))
    click.echo("\nsources:")
    for key, source in legend.items():
        click.echo(f"  {key}: {source.title}" + (f" <{source.url}>" if source.url else ""))


def _value(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)
