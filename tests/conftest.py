"""Shared test setup: compile-only targets need JAX to start on the CPU backend."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"

# The suite makes UnoptimizedHloWarning an error (pyproject.toml): the project's own warning that a
# module looks like XLA's input is for users. A test module of hand-written HLO (no fusions, not
# scheduled) says so with ``pytestmark = HAND_WRITTEN_HLO``.
HAND_WRITTEN_HLO = pytest.mark.filterwarnings("ignore::hlo_roofline.api.UnoptimizedHloWarning")
# Compiles real programs, or sweeps every fixture on every chip: run once, in the newest
# environment (``make test-oldest`` deselects these).
SLOW = pytest.mark.slow


def fixture_files() -> list[Path]:
    """Every committed XLA oracle file (``fixtures/<program>/<target>.xla.json``)."""
    return sorted(FIXTURES.glob("*/*.xla.json"))


def load_fixture(path: Path) -> tuple[str, dict]:
    """(optimized HLO text, XLA's numbers) of one fixture."""
    text = path.with_name(path.name.replace(".xla.json", ".hlo.txt")).read_text()
    return text, json.loads(path.read_text())


def fixture_id(path: Path) -> str:
    return f"{path.parent.name}/{path.name.removesuffix('.xla.json')}"


def shared_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The optimized-HLO cache of the examples: ``make demo``'s by default, or one per test session
    (shared by the xdist workers) with ``HLO_ROOFLINE_TEST_HLO_CACHE=session``."""
    from hlo_roofline.examples import default_cache_dir

    setting = os.environ.get("HLO_ROOFLINE_TEST_HLO_CACHE", "")
    if setting not in ("", "session"):
        return Path(setting)
    if not setting:
        return default_cache_dir()
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's directory, above each worker's own
    return base / "hlo-cache"
