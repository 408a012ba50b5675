"""``demo``: the GPT step compiled for TPU v5e and H100 and compared (what ``make demo`` runs)."""

from __future__ import annotations

from pathlib import Path

import click

from hlo_roofline import demo
from hlo_roofline.cli._common import CONTEXT


@click.command(
    "demo", context_settings=CONTEXT, short_help="Analyze the GPT example for v5e and H100."
)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=demo.DEFAULT_OUT,
              show_default=True, help="Output directory: CSV, JSON, charts, TensorBoard.")  # fmt: skip
@click.option("--no-cache", is_flag=True, help="Compile even if the optimized HLO is cached.")
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True,
              help="Ops listed per chip.")  # fmt: skip
def demo_command(out: Path, no_cache: bool, top: int) -> None:
    """Compile the GPT training step of hlo_roofline/examples/gpt.py compile-only for TPU v5e and
    H100, print both roofline tables side by side, and write CSV, JSON, charts and a TensorBoard
    logdir under --out.

    \b
    Example:
      $ hlo-roofline demo --out out/demo
    """
    argv = ["--out", str(out), "--top", str(top)] + (["--no-cache"] if no_cache else [])
    raise SystemExit(demo.main(argv))
