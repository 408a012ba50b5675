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


# -- the TensorBoard tab end to end: one Chromium per session, one TensorBoard per module ---------
# A module that drives the tab defines ``logdir`` (module scope: the runs it serves) and takes
# ``server`` (the base URL of a real ``tensorboard --logdir`` on it) and ``page``; it marks itself
# ``tb_helpers.NEEDS_BROWSER`` (skipped where Chromium is missing, unless CI requires it).
BROWSER_TIMEOUT_MS = 60_000  # a bound for a loaded 2-core machine, not a speed check


@pytest.fixture(scope="session")
def browser():
    from tb_helpers import BROWSER_MISSING, NEEDS_BROWSER, chromium

    if BROWSER_MISSING:
        pytest.skip(NEEDS_BROWSER.kwargs["reason"])
    with chromium() as b:
        yield b


@pytest.fixture(scope="module")
def server(logdir):
    from tb_helpers import tensorboard

    with tensorboard(logdir) as url:
        yield url


@pytest.fixture
def page(browser):
    """A fresh browser context's page; the test fails on any JavaScript error or dialog (a dialog
    is what an injected script would open)."""
    context = browser.new_context(viewport={"width": 1500, "height": 1200})
    context.set_default_timeout(BROWSER_TIMEOUT_MS)
    page = context.new_page()
    errors: list[str] = []
    dialogs: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    yield page
    context.close()
    assert not errors, f"JavaScript errors: {errors}"
    assert not dialogs, f"a dialog opened (script injection?): {dialogs}"
