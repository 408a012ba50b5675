"""MaxText's published layouts against the explorer's best (no compile: the committed
explorations of ``fixtures/explore/maxtext_published``, made by ``explore --maxtext`` from MaxText's
own train step with each config script's flags).

For each config, among the layouts that compile and fit, the layout and remat policy MaxText
published must rank within 5% of the best by tokens per second per chip. A config where it does
not is listed in :data:`MISSES` with the docs section that says why (and then must still miss:
a model change that closes the gap shows here)."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

from hlo_roofline import explorer

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "fixtures" / "explore" / "maxtext_published"
EXPLORATIONS = sorted(HERE.glob("*.json"))
WITHIN = 0.05

# config -> the words docs/maxtext.md explains its miss under (none yet)
MISSES: dict[str, str] = {}


# MaxText 0.2.5's base.yml (max_target_length: 2048), for a script that leaves it (v4 22B)
BASE_MAX_TARGET_LENGTH = 2048


def _published_configs() -> dict:
    spec = importlib.util.spec_from_file_location(
        "published_generate", ROOT / "fixtures" / "published" / "generate.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CONFIGS


def _published_row(path: Path):
    doc = json.loads(path.read_text())
    table = explorer.read_table(path)
    published = doc["published"]
    match = table["remat_policy"] == published["remat_policy"]
    for axis in doc["axes"]:
        match &= table[axis] == published.get(axis, 1)
    rows = table[match]
    assert len(rows) == 1, f"{path.name}: the published layout {published} is not one candidate"
    return doc, table, rows.iloc[0]


def test_there_are_explorations():
    assert EXPLORATIONS, "fixtures/explore/maxtext_published holds no exploration"


@pytest.mark.parametrize("path", EXPLORATIONS, ids=lambda p: p.stem)
def test_the_exploration_is_complete_and_ranked_by_throughput(path):
    doc, table, _ = _published_row(path)
    assert doc["complete"] and not doc["failed"], doc["failed"]
    assert doc["rank_by"] == "tokens_per_s_per_chip"
    statuses = table["status"].map(explorer.status_of)
    assert set(statuses) <= explorer.RESULTS
    ok = table[statuses == explorer.STATUS_OK]
    assert len(ok) >= 2, "fewer than two layouts fit: nothing is compared"
    # every candidate does the config's work: the script's batch × devices × sequence
    overrides = _published_configs()[doc.get("config", path.stem)]["overrides"]
    for _, row in table.iterrows():
        devices = math.prod(int(row[axis]) for axis in doc["axes"])
        batch = float(overrides["per_device_batch_size"]) * devices
        length = float(overrides.get("max_target_length", BASE_MAX_TARGET_LENGTH))
        assert row["tokens_per_step"] == batch * length


@pytest.mark.parametrize("path", EXPLORATIONS, ids=lambda p: p.stem)
def test_the_exploration_ran_under_the_scripts_flags(path):
    doc = json.loads(path.read_text())
    words = _published_configs()[doc.get("config", path.stem)]["libtpu"].split()
    script = [w for w in words if w.startswith("--")]  # TPU_MEGACORE=...: the environment's
    assert doc["flags"]["libtpu"][: len(script)] == script


@pytest.mark.parametrize("path", EXPLORATIONS, ids=lambda p: p.stem)
def test_the_published_layout_is_within_5_percent_of_the_best(path):
    _, table, row = _published_row(path)
    assert explorer.status_of(row["status"]) == explorer.STATUS_OK, (
        f"the published layout {row['candidate']}: {row['status']}"
    )
    gap = float(row["gap_to_best"])
    best = table.iloc[0]["candidate"]
    if path.stem in MISSES:
        assert gap > WITHIN, f"{path.stem} now ranks within {WITHIN:.0%}: drop it from MISSES"
        assert MISSES[path.stem] in (ROOT / "docs" / "maxtext.md").read_text()
        return
    assert gap <= WITHIN, f"{row['candidate']} is {gap:.1%} behind {best}"


@pytest.mark.parametrize("path", EXPLORATIONS, ids=lambda p: p.stem)
def test_the_gate_passes_the_published_layout(path):
    """``check --explore`` on the committed exploration, as a CI gate on MaxText's layout reads."""
    from click.testing import CliRunner

    from hlo_roofline.cli import main

    doc = json.loads(path.read_text())
    published = doc["published"]
    layout = ",".join(
        [f"{axis}={published.get(axis, 1)}" for axis in doc["axes"]]
        + [f"remat_policy={published['remat_policy']}"]
    )
    result = CliRunner().invoke(
        main, ["check", "--explore", str(path), "--layout", layout, "--max-gap-to-best", "5"]
    )
    assert result.exit_code == (1 if path.stem in MISSES else 0), result.output


ON_DASK = [p for p in EXPLORATIONS if "dask" in json.loads(p.read_text())]


def test_a_published_config_was_explored_on_dask_too():
    assert ON_DASK, "no published config explored on Dask too (generate.py --dask NAME)"


@pytest.mark.parametrize("path", ON_DASK, ids=lambda p: p.stem)
def test_dask_gives_the_default_pools_table(path):
    """The same exploration on a Dask LocalCluster (``generate.py --dask``): every candidate with
    the pool's status, rank, step and HBM figure (the pool's table to the written digit)."""
    doc = json.loads(path.read_text())
    pool = explorer.read_table(path).set_index("candidate")
    dask = doc["dask"]["rows"]
    assert sorted(r["candidate"] for r in dask) == sorted(pool.index)
    for row in dask:
        mine = pool.loc[row["candidate"]]
        assert row["status"] == mine["status"], row["candidate"]
        for column in ("rank", "step_s", "tokens_per_s_per_chip", "hbm_per_device"):
            theirs = mine[column]
            if row[column] is None:
                assert theirs is None or math.isnan(float(theirs)), (row["candidate"], column)
            else:
                said = (row["candidate"], column)
                assert row[column] == pytest.approx(float(theirs), rel=1e-9), said
