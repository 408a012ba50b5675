"""HLO from a file (the parser itself reads text only; ``hlo.parse`` keeps text and paths apart)."""

from __future__ import annotations

from pathlib import Path

from hlo_roofline.hlo.errors import HloParseError
from hlo_roofline.hlo.ir import Module
from hlo_roofline.hlo.parser import parse_module


def parse_file(path: str | Path) -> Module:
    """Parse an HLO text file; a parse error names the file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        shown = (
            str(path)
            if len(str(path)) <= 200
            else f"{str(path)[:200]}… ({len(str(path))} characters)"
        )
        raise HloParseError(f"cannot read {shown}: {exc.strerror or exc}") from None
    try:
        return parse_module(text)
    except HloParseError as exc:
        exc.message = f"{path}: {exc.message}"
        raise exc from None

