"""``demo``: the GPT step compiled for TPU v5e and H100 and compared (what ``make demo`` runs).

The command is :func:`hlo_roofline.demo.command` itself, so ``python -m hlo_roofline.demo`` and
``hlo-roofline demo`` take the same options.
"""

from __future__ import annotations

from hlo_roofline.demo import command as demo_command

__all__ = ["demo_command"]
