"""``plot REPORT -o F``: the roofline chart."""

from __future__ import annotations

from pathlib import Path

import click

from hlo_roofline.cli._common import (
    CONTEXT,
    PathOrUrl,
    chip_option,
    image_callback,
    load_report,
    note,
    output_errors,
    trust_option,
)


@click.command("plot", context_settings=CONTEXT, short_help="Draw a report's roofline chart.")
@click.argument("report_path", metavar="REPORT", type=PathOrUrl(exists=True, path_type=Path))
@click.option("-o", "--output", required=True, type=PathOrUrl(dir_okay=False, path_type=Path),
              callback=image_callback, help="The chart: .png or .svg.")  # fmt: skip
@chip_option
@click.option("--title", help="Chart title (default: module and chip).")
@trust_option
def plot_command(report_path, output, chip, title, trust_unsigned):
    """Draw a report's roofline chart: roofs per dtype, one point per op sized by its share.

    \b
    Example:
      $ hlo-roofline plot large.json -o roofline.png
      $ hlo-roofline plot mlp.json -o mlp.svg --chip v5p
    """
    report = load_report(report_path, chip, trust_unsigned)
    if report.chip is None:
        raise click.UsageError("REPORT is not judged against a chip: pass --chip")
    with output_errors(output):
        chart = report.plot(output, title)
    note(f"wrote {chart}")
