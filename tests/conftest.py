"""Shared test setup: compile-only targets need JAX to start on the CPU backend."""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def fixture_files() -> list[Path]:
    """Every committed XLA oracle file (``fixtures/<program>/<target>.xla.json``)."""
    return sorted(FIXTURES.glob("*/*.xla.json"))


def load_fixture(path: Path) -> tuple[str, dict]:
    """(optimized HLO text, XLA's numbers) of one fixture."""
    text = path.with_name(path.name.replace(".xla.json", ".hlo.txt")).read_text()
    return text, json.loads(path.read_text())


def fixture_id(path: Path) -> str:
    return f"{path.parent.name}/{path.name.removesuffix('.xla.json')}"
