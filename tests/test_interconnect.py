"""Topology-aware collectives (hlo_roofline.judge.interconnect) and the step as scheduled (schedule).

The book's worked answers, through real compile-only programs, are doctests in docs/collectives.md;
these tests pin the pieces: replica groups in every HLO form, where devices sit, which axes wrap,
and the schedule walk on hand-made rows whose answer is worked out by hand.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import FIXTURES

import hlo_roofline as hr
from hlo_roofline import chips
from hlo_roofline.check import RuleError, Rules, check
from hlo_roofline.cost.collectives import parse_group_text
from hlo_roofline.hlo import attrs, parse
from hlo_roofline.judge import interconnect, schedule

GROUPS_HLO = """HloModule groups, is_scheduled=true, num_partitions=8

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  p = f32[64] parameter(0)
  iota = f32[64] all-reduce(p), channel_id=1, replica_groups=[2,4]<=[8], use_global_device_ids=true, to_apply=add
  transposed = f32[64] all-reduce(p), channel_id=2, replica_groups=[4,2]<=[2,4]T(1,0), use_global_device_ids=true, to_apply=add
  mesh = f32[64] all-reduce(p), channel_id=3, replica_groups=mesh['a'=4,'b'=2] {'a'}, use_global_device_ids=true, to_apply=add
  listed = f32[64] all-reduce(p), channel_id=4, replica_groups={{0,2,4,6},{1,3,5,7}}, use_global_device_ids=true, to_apply=add
  everyone = f32[64] all-reduce(p), channel_id=5, replica_groups={}, use_global_device_ids=true, to_apply=add
  ROOT t = (f32[64], f32[64], f32[64], f32[64], f32[64]) tuple(iota, transposed, mesh, listed, everyone)
}
"""


@pytest.mark.parametrize(
    ("name", "groups"),
    [
        ("iota", [[0, 1, 2, 3], [4, 5, 6, 7]]),
        ("transposed", [[0, 4], [1, 5], [2, 6], [3, 7]]),
        ("mesh", [[0, 2, 4, 6], [1, 3, 5, 7]]),
        ("listed", [[0, 2, 4, 6], [1, 3, 5, 7]]),
        ("everyone", [list(range(8))]),
    ],
)
def test_replica_groups_in_every_form(name, groups):
    module = parse(GROUPS_HLO)
    instr = next(i for i in module.entry.instructions if i.name == name)
    assert attrs.replica_groups(instr, module) == groups
    assert attrs.replica_group_size(instr, module) == len(groups[0])


def test_rows_keep_the_group_and_read_it_back():
    report = hr.analyze_hlo(GROUPS_HLO)
    text = dict(zip(report.ops["name"], report.ops["replica_group"], strict=True))
    assert text["iota"] == "0-3 of 8" and text["mesh"] == "0-6:2 of 8"
    assert text["transposed"] == "0,4 of 8"
    for name, ids in [("iota", [0, 1, 2, 3]), ("mesh", [0, 2, 4, 6]), ("transposed", [0, 4])]:
        assert parse_group_text(text[name]) == (ids, None, 8)
    assert parse_group_text("0>1,1>2,2>3,3>0 of 4") == (None, [(0, 1), (1, 2), (2, 3), (3, 0)], 4)


# -- where devices sit, which axes wrap --------------------------------------------------------------


@pytest.mark.parametrize(
    ("chips_", "ndim", "shape"),
    [(4, 2, (2, 2)), (8, 2, (2, 4)), (32, 2, (4, 8)), (256, 2, (16, 16)),
     (4, 3, (2, 2, 1)), (16, 3, (2, 2, 4)), (32, 3, (2, 4, 4)), (64, 3, (4, 4, 4)),
     (128, 3, (4, 4, 8)), (12, 2, (3, 4))],
)  # fmt: skip
def test_usual_slice_shapes(chips_, ndim, shape):
    assert interconnect.slice_shape(chips_, ndim) == shape


@pytest.mark.parametrize(
    ("chip", "devices", "dims", "wraps"),
    [
        ("v5e", 32, (4, 8), (False, False)),  # v5e wraps only axes of 16
        ("v5e", 256, (16, 16), (True, True)),
        ("v5p", 16, (2, 2, 4), (False, False, False)),  # not made of whole 4x4x4 cubes
        ("v5p", 64, (4, 4, 4), (True, True, True)),
        ("v5p", 128, (4, 4, 8), (True, True, True)),
    ],
)
def test_wraparound_only_where_the_hardware_has_it(chip, devices, dims, wraps):
    topology = interconnect.infer(chips.get(chip), devices)
    assert topology.dims == dims and topology.wraps == wraps


def test_inference_lays_the_axes_so_groups_are_whole_axes():
    v5e = chips.get("v5e")
    minor_four = interconnect.infer(v5e, 32, [[0, 1, 2, 3]])  # a mesh (8, 4), gathering over 4
    assert minor_four.dims == (8, 4)
    span = minor_four.span([0, 1, 2, 3])
    assert span.axes == (interconnect.Axis(4, False, 1, True),)
    minor_eight = interconnect.infer(v5e, 32, [list(range(8))])
    assert minor_eight.dims == (4, 8)


def test_a_strided_group_and_a_permute_on_a_torus():
    v5p = interconnect.infer(chips.get("v5p"), 64)  # 4x4x4, every axis wraps
    # {0, 2} on the minor axis: two of four chips, 2 apart; the ring closes through the
    # wraparound, 2 hops a step, and shares its links with the group {1, 3}
    (axis,) = v5p.span([0, 2]).axes
    assert axis == interconnect.Axis(2, True, 2, True) and axis.hops == 2
    assert v5p.span([0, 1, 2]).axes == (interconnect.Axis(3, False, 1, False),)
    # the neighbour shift 0→1→2→3→0 along one wrapping axis: 1 hop for each pair
    assert v5p.pair_span([(0, 1), (1, 2), (2, 3), (3, 0)]).hops == 1
    assert v5p.pair_span([(0, 2)]).hops == 2  # two hops either way round
    broken = interconnect.infer(chips.get("v5e"), 32, [[0, 1, 2, 3]])
    assert broken.pair_span([(3, 0)]).hops == 3  # no wraparound on v5e's axis of 4


def test_gpu_nodes_and_the_groups_sharing_them():
    h100 = chips.get("h100")
    topology = interconnect.infer(h100, 64)
    assert topology.dims == (8, 8)
    inside = topology.span(range(8))
    assert (inside.nodes, inside.per_node, inside.concurrent) == (1, 8, 1)
    outer = topology.span(range(0, 64, 8))
    assert (outer.nodes, outer.per_node, outer.concurrent) == (8, 1, 8)
    v = 2**25  # 8 outer groups share each node's 400 GB/s: the book's B/W_node for B = 8 V
    t = interconnect.collective_time(h100, "all-gather", v * 7 / 8, 8, outer)
    assert t == pytest.approx(8 * v * 7 / 8 / h100.scaleout_per_node)
    assert interconnect.collective_time(h100, "all-gather", v * 7 / 8, 8, inside) == (
        pytest.approx(v * 7 / 8 / h100.scaleup.oneway)
    )


def test_an_unknown_topology_is_one_closed_ring():
    v5e = chips.get("v5e")
    t = interconnect.collective_time(v5e, "all-gather", 3e6, 4, None)
    assert t == pytest.approx(3e6 / v5e.ici.link_bidirectional)


def test_loop_collectives_are_timed_per_execution():
    """A collective run 10 times takes 10 × its latency-bound time, not the time of 10× bytes."""
    report = hr.analyze_hlo(FIXTURES / "ppermute" / "tpu_v5e.hlo.txt", chip="v5e")
    row = report.ops[report.ops["collective"] != ""].iloc[0]
    once = row.t_comm_s
    looped = report.ops.copy()
    looped.loc[row.name, ["count", "comm_bytes"]] = [10.0, row.comm_bytes * 10]
    again = hr.Report(looped, dict(report.summary)).classify("v5e")
    assert again.ops.loc[row.name, "t_comm_s"] == pytest.approx(10 * once)


# -- the schedule walk -------------------------------------------------------------------------------


def walk(rows):
    """rows: (name, opcode, waits_for, is_collective, seconds)."""
    names, codes, waits, coll, secs = (np.array(c) for c in zip(*rows, strict=True))
    return schedule.walk(names, codes, waits, coll.astype(bool), secs.astype(float))


def test_a_transfer_hides_behind_what_runs_before_its_done():
    hidden = walk([
        ("ag", "all-gather-start", "", True, 10.0),
        ("mm", "fusion", "", False, 15.0),
        ("done", "all-gather-done", "ag", False, 0.0),
    ])  # fmt: skip
    assert hidden.step_s == 15.0 and hidden.exposed_s.tolist() == [0.0, 0.0, 0.0]
    exposed = walk([
        ("ag", "all-gather-start", "", True, 10.0),
        ("mm", "fusion", "", False, 4.0),
        ("done", "all-gather-done", "ag", False, 0.0),
    ])  # fmt: skip
    assert exposed.step_s == 10.0 and exposed.exposed_s.tolist() == [6.0, 0.0, 0.0]


def test_a_synchronous_collective_blocks_and_waits_for_the_interconnect():
    result = walk([
        ("ag", "all-gather-start", "", True, 10.0),  # on the interconnect until t = 10
        ("ar", "all-reduce", "", True, 5.0),  # synchronous: waits for the link, then 5 more
        ("mm", "fusion", "", False, 1.0),
        ("done", "all-gather-done", "ag", False, 0.0),
    ])  # fmt: skip
    assert result.step_s == 16.0
    assert result.exposed_s.tolist() == [0.0, 15.0, 0.0, 0.0]


def test_copies_and_collectives_use_separate_engines_and_a_start_never_waited_for_ends_the_step():
    result = walk([
        ("cp", "copy-start", "", False, 8.0),  # the DMA engine
        ("ag", "fusion", "", True, 8.0),  # a TPU async-collective start: the interconnect
        ("mm", "fusion", "", False, 2.0),
        ("cp-done", "copy-done", "cp", False, 0.0),
        ("ag-done", "fusion", "ag", False, 0.0),
        ("late", "collective-permute-start", "", True, 3.0),  # its done is in the next iteration
        ("add", "add", "", False, 1.0),
    ])  # fmt: skip
    assert result.step_s == 11.0
    assert result.exposed_s.tolist() == [6.0, 0.0, 0.0, 0.0, 0.0, 2.0, 0.0]


def test_a_tpu_async_collective_pairs_its_fusions_and_prices_the_continuation_once():
    report = hr.analyze_hlo(FIXTURES / "fsdp_train_step" / "tpu_v5e.hlo.txt", chip="v5e")
    ops = report.ops.set_index("name")
    assert ops.loc["async-collective-done", "waits_for"] == "async-collective-start"
    assert ops.loc["async-collective-start", "collective"] == "all-gather"
    # fusion.55 runs a matmul while the all-gather continues: not a collective of its own
    assert ops.loc["fusion.55", "collective"] == "" and ops.loc["fusion.55", "comm_bytes"] == 0


def test_the_summary_splits_communication_into_hidden_and_exposed():
    report = hr.analyze_hlo(FIXTURES / "fsdp_train_step" / "h100.hlo.txt", chip="h100")
    s, ops = report.summary, report.ops
    collective = ops["collective"] != ""
    assert s["comm_time_s"] == pytest.approx(ops.loc[collective, "t_expected_s"].sum())
    assert s["exposed_comm_s"] == pytest.approx(ops.loc[collective, "t_exposed_s"].sum())
    assert 0 < s["exposed_comm_s"] <= s["comm_time_s"]
    assert s["step_expected_s"] <= s["step_time_upper_s"]
    # every all-gather's done comes right after its start: nothing to hide behind
    starts = ops[ops["opcode"] == "all-gather-start"]
    assert starts["t_exposed_s"].tolist() == pytest.approx(starts["t_expected_s"].tolist())


def test_the_topology_survives_a_round_trip_and_a_new_chip(tmp_path):
    report = hr.analyze_hlo(FIXTURES / "fsdp_train_step" / "tpu_v5p.hlo.txt", chip="v5p")
    report.to_json(tmp_path / "r.json")
    read = hr.Report.read(tmp_path / "r.json")
    assert read.summary["topology"] == report.summary["topology"]
    assert read.classify("v5p").summary["exposed_comm_s"] == pytest.approx(
        report.summary["exposed_comm_s"]
    )
    on_gpu = read.classify("h100")  # judged on another fabric: placed again
    assert on_gpu.summary["topology"]["kind"] == "nodes"


# -- the gate ----------------------------------------------------------------------------------------


def test_max_exposed_comm_rule():
    report = hr.analyze_hlo(FIXTURES / "fsdp_train_step" / "h100.hlo.txt", chip="h100")
    share = report.summary["exposed_comm_share"] * 100
    assert check(report, Rules(max_exposed_comm=share + 1)).passed
    failed = check(report, Rules.from_mapping({"max-exposed-comm": share - 1}))
    (violation,) = failed.violations
    assert violation.rule == "max-exposed-comm" and "all-gather-start.2" in violation.detail
    with pytest.raises(RuleError, match="max-exposed-comm must be a percent"):
        Rules(max_exposed_comm=150)
    old = hr.Report(report.ops.drop(columns="t_exposed_s"), dict(report.summary))
    with pytest.raises(RuleError, match="no scheduled step"):
        check(old, Rules(max_exposed_comm=50))


def test_analyze_places_devices_by_the_arguments_mesh():
    """A step sharded on a target mesh is judged with that mesh's devices (their torus
    coordinates), not a layout inferred from the replica groups."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from hlo_roofline.targets import make_mesh

    mesh = make_mesh("v5e:2x4", (8,), ("data",))
    x = jax.ShapeDtypeStruct((8 * 128, 256), jnp.bfloat16, sharding=NamedSharding(mesh, P("data")))
    report = hr.analyze(lambda x: jnp.sum(x, axis=0), x, target="v5e:2x4")
    assert report.summary["topology"]["source"] == "devices"
    unsharded = hr.analyze(
        lambda x: x * 2, jax.ShapeDtypeStruct((8, 8), jnp.float32), target="v5e:2x2"
    )
    assert (unsharded.summary.get("topology") or {}).get("source") != "devices"
