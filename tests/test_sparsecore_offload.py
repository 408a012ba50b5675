"""XLA:TPU's SparseCore offloads: an all-gather the SparseCore runs for the TensorCore is a
collective over its device group's links, and it queues on the SparseCore, not behind the
TensorCore's copies and collectives.

The oracles: the HLO text itself (the offload's called computation and its root all-gather, read
with this file's regexes, not the package's parser), the same all-gather written standalone and
priced by the tool, and the walk of hand-made rows.
"""

from __future__ import annotations

import gzip
import re
from functools import cache

import numpy as np
import pytest
from conftest import FIXTURES

from hlo_roofline import Report, analyze_hlo
from hlo_roofline.judge import schedule
from hlo_roofline.report import lane_title

# MaxText programs XLA:TPU compiled with its SparseCore all-gather offload, and their chip
PROGRAMS = {
    "published/v5p_32b.hlo.txt.gz": "v5p",
    "tpu_programs/maxtext_llama3_8b.7x.hlo.txt.gz": "7x",
}
OFFLOAD = re.compile(
    r"^\s*%(\S+) = .* custom-call-start\(.*async_execution_thread=\"sparsecore\".*"
    r"called_computations=\{%([\w.\-]+)\}.*OFFLOAD_COLLECTIVE",
    re.M,
)


@cache
def hlo_text(path: str) -> str:
    return gzip.decompress((FIXTURES / path).read_bytes()).decode()


@cache
def report(path: str) -> Report:
    return analyze_hlo(hlo_text(path), chip=PROGRAMS[path])


def root_of(hlo: str, computation: str) -> str:
    start = hlo.index(f"\n%{computation} (") + 1
    body = hlo[start : hlo.index("\n}", start)]
    return re.search(r"^\s*ROOT %\S+ = .*$", body, re.M).group(0)


@pytest.mark.parametrize("path", PROGRAMS)
def test_an_offloaded_all_gather_is_a_collective_of_its_group(path):
    hlo = hlo_text(path)
    offloads = OFFLOAD.findall(hlo)
    assert offloads, path
    ops = report(path).ops.set_index("name")
    for name, called in offloads:
        root = root_of(hlo, called)
        assert " all-gather(" in root, root
        row = ops.loc[name]
        assert row["collective"] == "all-gather" and row["offload"] == "sparsecore"
        assert row["group_size"] > 1 and row["replica_group"] != ""
        assert row["comm_bytes"] > 0 and row["bound"] == "communication"
    # the TensorCore's own rows are not offloaded
    assert set(ops["offload"]) == {"", "sparsecore"}
    assert (ops.loc[ops["opcode"] == "copy-start", "offload"] == "").all()


def test_the_offload_moves_what_the_same_all_gather_standalone_moves():
    path = "published/v5p_32b.hlo.txt.gz"
    hlo = hlo_text(path)
    name, called = OFFLOAD.findall(hlo)[0]
    root = root_of(hlo, called)
    result = re.search(r"= (\S+) all-gather", root).group(1)
    operand = re.search(
        r"^\s*%\S+ = (\S+) parameter\(0\)", hlo[hlo.index(f"\n%{called} (") :], re.M
    )
    groups = re.search(r"replica_groups=(.*?), dimensions=\{(\d+)\}", root)
    standalone = (
        "HloModule standalone, is_scheduled=true, num_partitions=64\n\n"
        f"ENTRY %main (p: {operand.group(1).split('{')[0]}) -> {result.split('{')[0]} {{\n"
        f"  %p = {operand.group(1)} parameter(0)\n"
        f"  ROOT %ag = {result} all-gather(%p), channel_id=1, replica_groups={groups.group(1)}, "
        f"dimensions={{{groups.group(2)}}}, use_global_device_ids=true\n}}\n"
    )
    alone = analyze_hlo(standalone, chip="v5p").ops.set_index("name").loc["ag"]
    row = report(path).ops.set_index("name").loc[name]
    assert row["comm_bytes"] == pytest.approx(alone["comm_bytes"] * row["count"])
    assert row["replica_group"] == alone["replica_group"]


def walk_rows(rows: list[tuple]) -> schedule.Scheduled:
    """rows: (name, opcode, waits_for, is_collective, seconds, links, offload)."""
    names, codes, waits, coll, secs, links, cores = (np.array(c) for c in zip(*rows, strict=True))
    return schedule.walk(names, codes, waits, coll.astype(bool), secs.astype(float), links, cores)


def test_the_sparsecore_queue_runs_beside_the_tensorcores_transfers():
    rows = [
        ("sc", "custom-call-start", "", True, 10.0, "0-3 of 8", "sparsecore"),  # until t = 10
        ("cp", "copy-start", "", False, 1.0, "", ""),  # the DMA engine: free at once
        ("cp-done", "copy-done", "cp", False, 0.0, "", ""),
        ("ar", "all-reduce", "", True, 2.0, "0-3 of 8", ""),  # the TensorCore's own collective
        ("mm", "fusion", "", False, 8.0, "", ""),
        ("sc-done", "custom-call-done", "sc", False, 0.0, "", ""),
    ]
    result = walk_rows(rows)
    # the copy and the all-reduce wait for nothing; the offload ends under the matmul
    assert result.exposed_s.tolist() == [0.0, 1.0, 0.0, 2.0, 0.0, 0.0]
    assert result.step_s == 11.0
    assert result.lane.tolist()[:4] == [
        "sparsecore:0-3 of 8",
        "dma",
        "compute",
        "interconnect:0-3 of 8",
    ]
    # on the TensorCore's queue, the same gather holds the copy and the all-reduce up
    same = walk_rows([(*r[:6], "") for r in rows])
    assert same.step_s > result.step_s
    # two offloads share the SparseCore's queue
    two = walk_rows([rows[0], ("sc2", "custom-call-start", "", True, 5.0, "0-3 of 8", "sparsecore"),
                ("mm", "fusion", "", False, 1.0, "", ""),
                ("d1", "custom-call-done", "sc", False, 0.0, "", ""),
                ("d2", "custom-call-done", "sc2", False, 0.0, "", "")])  # fmt: skip
    assert two.step_s == 15.0


def test_a_copy_no_longer_waits_behind_an_offloaded_gather():
    """v5p_32b: a prefetch of the layer's weights into VMEM (copy-start) waited 87 ms per step
    behind the SparseCore's all-gathers when both were queued on one DMA engine."""
    ops = report("published/v5p_32b.hlo.txt.gz").ops
    copies = ops[ops["opcode"] == "copy-start"]
    assert copies["t_exposed_s"].sum() < 1e-4
    assert lane_title("sparsecore:0-3 of 64", "tpu") == "sparsecore (ICI 0-3 of 64)"
    assert lane_title("sparsecore", "tpu") == "sparsecore"


@pytest.mark.parametrize("chip", ["v5p", "v6e", "7x"])
def test_a_sparsecore_gather_started_by_call_start_is_offloaded(chip):
    """Sampling's ``take_along_axis`` runs on the SparseCore, started by a ``call-start`` on its
    thread: its row is offloaded (the SparseCore's queue), and no collective."""
    hlo = hlo_text(f"tpu_programs/sampling.{chip}.hlo.txt.gz")
    started = re.findall(r"^\s*%(\S+) = .* call-start\(.*async_execution_thread=\"sparsecore\"", hlo, re.M)
    assert started
    ops = analyze_hlo(hlo, chip=chip).ops.set_index("name")
    present = [name for name in started if name in ops.index]
    assert present
    assert (ops.loc[present, "offload"] == "sparsecore").all()
    assert (ops.loc[present, "collective"] == "").all()
