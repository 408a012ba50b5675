"""Real traces from an NVIDIA H100 and an H200 (fixtures/measured_gpu, one step each): the join,
the efficiency column and the model's error per op class, offline.

The traces were captured by ``fixtures/measured_gpu/measure_on_gpu.py`` on lent machines (jax
0.11.2, CUDA 13) and trimmed by ``trim.py``; ``records.json`` beside them holds what the run
measured apart from this project's code (wall-clock medians, XLA:GPU's own ``cost_analysis()`` of
the compiled program, PyTorch's cuBLAS and copy rates). The bands below are what the hardware did,
read once from these traces (docs/validation.md, "Measured on H100 and H200").
"""

from __future__ import annotations

import dataclasses
import gzip
import itertools
import json
import math
import statistics
import warnings
from collections import defaultdict
from pathlib import Path

import pytest

from hlo_roofline import calibrate, chips, measured, read_trace, xplane

HERE = Path(__file__).resolve().parent
TRACES = HERE.parent / "fixtures" / "measured_gpu"
CARDS = {"h100": "h100-sxm", "h200": "h200"}
CASES = (
    "gpt_step", "gpt_step_graphs", "matmul_sweep", "matmul_8192", "fp8_matmul", "f32_add",
    "layernorm", "softmax", "attention_block", "attention_cudnn", "kv_decode", "convnet_step",
    "nnx_lm_step",
)  # fmt: skip
PER_OP = tuple(c for c in CASES if c != "gpt_step_graphs")  # profiled without CUDA graphs

# What the hardware reached against the datasheet roofs, on both cards, by the op's roofline time
# per run (docs/validation.md): cuBLAS/Triton gemms of ≥ 50 µs a run at 0.69–0.90 of the dense
# bf16 peak (the datasheet's boost-clock figure; PyTorch's cuBLAS 8192³ reaches 0.76–0.80 in
# records.json); memory-bound ops of ≥ 50 µs a run at a median 0.87–0.89 of HBM bandwidth, with
# slower kernels XLA emits among them (a causal softmax over [8, 16, 2048, 2048] at 0.27–0.37, a
# max-pool's backward scatter at 0.20–0.25). cuDNN's convolutions are a class of their own.
LARGE_RUN_S = 50e-6
LARGE_S = 100e-6  # an op's time per step large enough to compare two runs of it
GEMM_BAND = (0.65, 0.95)
STREAM_BAND = (0.15, 1.0)
STREAM_MEDIAN_MIN = 0.8


def _unpack(card: str, case: str, root: Path) -> Path:
    path = root / card / case / f"{case}.xplane.pb"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.decompress((TRACES / card / f"{case}.xplane.pb.gz").read_bytes()))
    return path


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[tuple[str, str], Path]:
    root = tmp_path_factory.mktemp("measured_gpu")
    return {(card, case): _unpack(card, case, root) for card in CARDS for case in CASES}


@pytest.fixture(scope="module")
def reports(traces):
    found, caught = {}, {}
    for key, path in traces.items():
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            found[key] = read_trace(path)
        caught[key] = [w.category for w in seen]
    return found, caught


def _kernel_seconds(path: Path) -> dict[str, float]:
    """Σ duration of the device events naming each op, read straight from the protobuf (not
    through the join): the oracle for the join's per-op time on a one-step trace."""
    space = xplane.messages["XSpace"]()
    space.ParseFromString(path.read_bytes())
    total: dict[str, float] = defaultdict(float)
    for plane in space.planes:
        if not plane.name.startswith("/device:"):
            continue
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        for line in plane.lines:
            for event in line.events:
                for stat in event.stats:
                    if names.get(stat.metadata_id) == "hlo_op":
                        op = stat.str_value or names.get(stat.ref_value, "")
                        total[op] += event.duration_ps * 1e-12
    return total


@pytest.mark.parametrize("card", CARDS)
def test_the_chip_is_the_one_the_trace_names(reports, card):
    found, _ = reports
    for case in CASES:
        assert found[card, case].summary["chip"] == CARDS[card], case


@pytest.mark.parametrize("card", CARDS)
def test_every_device_event_is_given_to_a_row(reports, card):
    found, _ = reports
    for case in PER_OP:
        summary = found[card, case].summary
        assert summary["measured_unmatched_ops"] == [], case
        assert summary["measured_steps"] == 1


@pytest.mark.parametrize("card", CARDS)
def test_each_ops_time_is_the_sum_of_its_kernels(reports, traces, card):
    found, _ = reports
    for case in PER_OP:
        report = found[card, case]
        kernels = _kernel_seconds(traces[card, case])
        owner = {**{op: op for op in kernels}, **report.summary["measured_renamed_ops"]}
        expected: dict[str, float] = defaultdict(float)
        for op, seconds in kernels.items():
            expected[owner[op]] += seconds
        timed = report.ops.dropna(subset=["measured_s"]).set_index("name")["measured_s"]
        assert set(timed.index) == set(expected), case
        for op, seconds in expected.items():
            assert timed[op] == pytest.approx(seconds, rel=1e-9), (case, op)


@pytest.mark.parametrize("card", CARDS)
def test_async_copies_renamed_by_xla_run_once_per_layer(reports, card):
    """XLA:GPU emits a scanned layer's weight slices and activation writes (async fusions) under
    fresh names; each is given to a fusion-start, which then runs once per loop iteration."""
    report = reports[0][card, "gpt_step"]
    renamed = report.summary["measured_renamed_ops"]
    starts = report.ops[report.ops["opcode"] == "fusion-start"].set_index("name")
    assert len(renamed) == len(starts) > 30
    assert sorted(renamed.values()) == sorted(starts.index)
    assert (starts["measured_count"] == starts["count"]).all()  # the layer loop's trip count
    assert (starts["count"] == 4).all()


@pytest.mark.parametrize("card", CARDS)
def test_a_cuda_graph_trace_warns_and_matches_fusions_by_kernel_name(reports, card):
    found, caught = reports
    graphs, plain = found[card, "gpt_step_graphs"], found[card, "gpt_step"]
    assert measured.CommandBufferWarning in caught[card, "gpt_step_graphs"]
    assert measured.CommandBufferWarning not in caught[card, "gpt_step"]
    unmatched = graphs.summary["measured_unmatched_ops"]
    assert unmatched and all(n.startswith("command_buffer") for n in unmatched)
    # the same fusions, timed inside graphs and alone, agree
    both = graphs.ops.dropna(subset=["measured_s"]).set_index("name")["measured_s"]
    alone = plain.ops.set_index("name")["measured_s"]
    large = [op for op in both.index if alone.get(op, 0) > LARGE_S]
    assert len(large) > 10
    ratios = [both[op] / alone[op] for op in large]
    assert 0.9 < statistics.median(ratios) < 1.1
    assert all(0.6 < r < 1.4 for r in ratios), ratios
    # what the graphs hide is the library calls: the step itself is measured the same
    assert graphs.summary["measured_step_s"] == pytest.approx(
        plain.summary["measured_step_s"], rel=0.05
    )


@pytest.mark.parametrize("card", CARDS)
def test_the_bound_is_below_every_program(reports, card):
    """No run beats the bound: the step's (every unit, memory and link busy for its ops at the
    datasheet's rates) and the ops' own, over the ops the trace timed."""
    found, _ = reports
    for case in CASES:
        summary = found[card, case].summary
        assert summary["step_bound_s"] < summary["measured_step_s"], case
    for case in PER_OP:
        ops = found[card, case].ops
        timed = ops[ops["measured_s"] > 0]
        assert timed["t_bound_s"].sum() < timed["measured_s"].sum(), case


# The expectation within ±15% of the measured step on the programs no calibration read (each
# card's calibration is fitted on its traces of hlo_roofline.calibrate.GPU_FITTING: the
# micro-benchmarks, attention_cudnn, convnet_step, kv_decode). Where it is not yet, and why (xfail:
# fails once it holds).
EXPECTED_BAND = (0.85, 1.15)
EXPECTED_GAPS = {
    ("h200", "attention_block"): "the host's dispatch of this step (0.99 ms before its first "
    "kernel and after its last, its 11 kernels at 0.90 of their measured time) is 2.1x the fitted "
    "line's 0.47 ms for 5 arguments, whose fitting samples spread 0.54-1.85x it: no mechanism of "
    "the host's side is modelled beyond that line",
}  # fmt: skip


@pytest.mark.parametrize(
    ("card", "case"),
    [pytest.param(card, case, marks=pytest.mark.xfail(reason=EXPECTED_GAPS[card, case], strict=True))
     if (card, case) in EXPECTED_GAPS else (card, case)
     for card in CARDS for case in calibrate.GPU_HELD_OUT],
)  # fmt: skip
def test_the_expectation_is_within_15_percent_where_no_calibration_saw(reports, card, case):
    report = reports[0][card, case]
    ratio = calibrate.step_as_measured(report) / report.summary["measured_step_s"]
    assert EXPECTED_BAND[0] <= ratio <= EXPECTED_BAND[1], f"{card} {case}: {ratio:.3f}"


@pytest.mark.parametrize("card", CARDS)
def test_async_copies_hide_nothing_on_a_gpu(reports, card):
    """The GPT step's async copies (fusion-start: its layers' weight slices) ran beside its
    kernels, yet the kernels' times, the copies' included, add up to the step (the copies share
    the HBM those kernels stream from): the expectation walks them on the stream."""
    report = reports[0][card, "gpt_step"]
    ops, s = report.ops, report.summary
    copies = ops["opcode"] == "fusion-start"
    assert copies.sum() > 30 and ops.loc[copies, "measured_s"].sum() > 0.1 * s["measured_step_s"]
    assert ops["measured_s"].sum() > 0.9 * s["measured_step_s"]
    assert s["step_expected_s"] == pytest.approx(ops["t_expected_s"].sum(), rel=1e-9)


@pytest.mark.parametrize("card", CARDS)
def test_the_launch_gaps_are_the_streams_idle_time_between_kernels(reports, card):
    """The decode loop's stream idles between its hundreds of kernel runs (the host's launch of
    each); the expectation adds the fitted gap once per kernel run, and what the fit read is the
    trace's own: its idle time between kernels (an oracle read straight from the protobuf)."""
    path = TRACES / card / "kv_decode.xplane.pb.gz"
    space = xplane.messages["XSpace"]()
    space.ParseFromString(gzip.decompress(path.read_bytes()))
    spans = sorted(  # the trimmed trace: one step, its one stream
        (e.offset_ps, e.offset_ps + e.duration_ps)
        for plane in space.planes
        if plane.name.startswith("/device:")
        for line in plane.lines
        for e in line.events
    )
    idle = sum(max(b[0] - a[1], 0) for a, b in itertools.pairwise(spans)) * 1e-12
    ops = reports[0][card, "kv_decode"].ops
    chip = chips.get(CARDS[card]).calibration
    kernels = ops[(ops["t_bound_s"] > 0) & (ops["count"] > 0) & (ops["collective"] == "")]
    assert kernels["count"].sum() > 500
    gaps = chip.launch_gap_s * kernels["count"].sum()
    assert gaps == pytest.approx(idle, rel=0.05)
    assert 0.3e-6 < chip.launch_gap_s < 3e-6  # a kernel launch: about a microsecond
    assert (kernels["expected_by"] != "").all()  # each kernel is above its bound: its launch
    above = kernels["t_expected_s"] - kernels["t_bound_s"]
    assert above.sum() >= gaps * (1 - 1e-9)


@pytest.mark.parametrize("card", CARDS)
def test_the_dispatch_is_the_steps_time_before_its_first_kernel_and_after_its_last(reports, card):
    """The step's time outside its kernels (its start to the first kernel, the last kernel to its
    end: the host's dispatch and wait) grows with the buffers the host passes in: a few hundred
    microseconds for a program of one to five arguments, more for a training step's dozens. The
    fitted line over the arguments is, on the held-out steps, within a factor of 2.5 of what
    their traces show (the H200's wait after the written-out attention's last kernel ran 3.6
    times the H100's: the host's, not the program's). The expected step leaves it out."""
    one, many = calibrate.timeline(card, "f32_add"), calibrate.timeline(card, "convnet_step")
    assert 50e-6 < one.dispatch_s < 1e-3 and many.dispatch_s > 2 * one.dispatch_s
    assert (one.arguments, many.arguments) == (2, 76)
    # the decode loop's 9 (kv, tokens and 7 weights), not its loop bodies' parameters
    assert calibrate.timeline(card, "kv_decode").arguments == 9
    # each held-out program's arguments, as its ENTRY computation's signature lists them: the GPT
    # step's 39 (its state's leaves and the batch), the NNX step's 93, block(x, wq, wk, wv, wo)
    for case, arguments in (("gpt_step", 39), ("nnx_lm_step", 93), ("attention_block", 5)):
        seen = calibrate.timeline(card, case)
        report = reports[0][card, case]
        assert seen.arguments == arguments, case
        dispatch = calibrate.step_as_measured(report) - report.summary["step_expected_s"]
        assert 0.4 < dispatch / seen.dispatch_s < 2.5, case
        # the expected step without it: the chip with no dispatch calibrated expects the same step
        chip = chips.get(CARDS[card])
        bare = dataclasses.replace(chip, calibration=dataclasses.replace(
            chip.calibration, dispatch_s=None, dispatch_per_argument_s=None))  # fmt: skip
        rejudged = report.classify(bare).summary
        assert rejudged["host_dispatch_s"] == 0 < report.summary["host_dispatch_s"], case
        assert rejudged["step_expected_s"] == report.summary["step_expected_s"], case


@pytest.mark.parametrize("card", CARDS)
def test_large_kernels_are_expected_within_15_percent_where_no_calibration_saw(reports, card):
    """Op by op on the held-out steps, the large GEMMs and the large memory-bound ops took,
    together, within ±15% of their expected times (the written-out attention's softmax at the
    rate its occupancy allows)."""
    took: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for case in calibrate.GPU_HELD_OUT:
        if case == "gpt_step_graphs":  # the same kernels as gpt_step
            continue
        ops = reports[0][card, case].ops
        for _, row in ops[(ops["measured_s"] > 0) & (ops["t_bound_s"] > 0)].iterrows():
            kind = _op_class(row)
            if kind in ("gemm ≥ 50 µs a run", "memory-bound ≥ 50 µs a run"):
                took[kind][0] += row["measured_s"]
                took[kind][1] += row["t_expected_s"]
    assert len(took) == 2
    for kind, (measured_s, expected_s) in took.items():
        ratio = measured_s / expected_s
        assert EXPECTED_BAND[0] <= ratio <= EXPECTED_BAND[1], f"{card} {kind}: {ratio:.3f}"


# What NVIDIA documents for compute capability 9.0 (H100 and H200: the CUDA C++ Programming
# Guide's table of technical specifications, the occupancy calculator's allocation rules): 64K
# registers an SM in 4 sub-partitions, allocated 256 a warp; 64 warps and 32 blocks an SM; 228 KB
# of shared memory an SM, allocated in 128-byte units, 1 KB of it reserved a block.
SM90 = {"registers": 65536, "warps": 64, "blocks": 32, "shared": 228 * 1024}


def _occupancy(registers: int, threads: int, shared: int) -> float:
    """The resident warps ÷ the SM's of a kernel of ``registers`` a thread, ``threads`` a block
    and ``shared`` bytes of shared memory a block: what each of the SM's limits allows."""
    warps = -(-threads // 32)
    blocks = [SM90["warps"] // warps, SM90["blocks"]]
    if registers:
        per_warp = -(-registers * 32 // 256) * 256
        blocks.append(4 * (SM90["registers"] // 4 // per_warp) // warps)
    blocks.append(SM90["shared"] // (-(-shared // 128) * 128 + 1024))
    return min(blocks) * warps / SM90["warps"]


@pytest.mark.parametrize("card", CARDS)
def test_occupancy_is_each_kernels_from_its_registers_block_and_shared_memory(
    reports, traces, card
):
    """The ``occupancy`` column is a compile fact: what a kernel's registers a thread, block and
    shared memory allow on the SM (the trace's ``kernel_details``), not a timing."""
    checked = 0
    for case in ("attention_block", "layernorm", "softmax"):
        space = xplane.parse_space(traces[card, case].read_bytes())
        details: dict[str, set[str]] = defaultdict(set)
        for plane in space:
            for _, event in plane.events():
                if (op := event.stats.get("hlo_op")) and event.stats.get("kernel_details"):
                    details[op].add(event.stats["kernel_details"])
        ops = reports[0][card, case].ops.set_index("name")
        for op, kinds in details.items():
            if len(kinds) != 1:  # an op of several kernels: their time-weighted mean
                continue
            fields = dict(item.split(":", 1) for item in next(iter(kinds)).split())
            threads = math.prod(int(n) for n in fields["block"].split(","))
            shared = int(fields["static_shared"]) + int(fields["dynamic_shared"])
            expected = _occupancy(int(fields["regs"]), threads, shared)
            assert ops.loc[op, "occupancy"] == pytest.approx(expected), (case, op, fields)
            checked += 1
    assert checked >= 15
    assert reports[0][card, "attention_block"].ops.set_index("name").loc[
        "fusion.16", "occupancy"
    ] == 0.125  # fmt: skip


def test_kernel_occupancy_weighs_an_ops_kernels_by_time_and_skips_damaged_stats():
    """Two kernels of one op: their occupancy weighted by their time; the figure from
    ``kernel_details`` where the stat is absent; a damaged or impossible figure, a host plane and
    an event of another program are no evidence."""
    from hlo_roofline.measured import trace

    def kernel(start: int, duration: int, **stats) -> xplane.Event:
        return xplane.Event("k", start, duration, {"hlo_op": "fusion.1", "program_id": 7, **stats})

    events = [
        kernel(0, 300, theoretical_occupancy_pct=25.0),
        kernel(300, 100, kernel_details="regs:64 block:256,1,1 occ_pct:100"),
        kernel(400, 50, theoretical_occupancy_pct="n/a"),
        kernel(450, 50, theoretical_occupancy_pct=250.0),
        kernel(500, 50, theoretical_occupancy_pct=50.0, program_id=8),
        xplane.Event("k", 0, 10, {"hlo_op": "copy.2", "program_id": 7, "kernel_details": None}),
    ]
    device = xplane.Plane(1, "/device:GPU:0", [xplane.Line(1, "Stream #1", events)], {}, {})
    host = xplane.Plane(2, "/host:CPU", [xplane.Line(1, "t", [kernel(0, 1, occ_pct=10.0)])], {}, {})
    found = trace.kernel_occupancy([device, host], {7: None, 8: None})
    assert found == {
        7: {"fusion.1": pytest.approx((300 * 0.25 + 100 * 1.0) / 400)},
        8: {"fusion.1": 0.5},
    }


@pytest.mark.parametrize("card", CARDS)
def test_a_kernel_its_occupancy_holds_back_is_expected_at_its_rate(reports, card):
    """Held out: the written-out attention's causal softmax (175 registers a thread: an eighth of
    the SM's warps) is expected at the bandwidth its resident warps keep in flight
    (``calibrated.occupancy_bandwidth``, fitted on layernorm's kernel at a quarter), within ±15%
    of its measured time; a GEMM's kernel at that occupancy pipelines its loads and is not held
    to it, and a report without the trace's occupancy is judged as before."""
    report = reports[0][card, "attention_block"]
    ops = report.ops.set_index("name")
    softmax = ops.loc["fusion.16"]
    assert softmax["expected_by"] == "occupancy"
    assert 0.85 <= softmax["t_expected_s"] / softmax["measured_s"] <= 1.15
    gemm = ops.loc["gemm_fusion_dot.5"]
    assert gemm["occupancy"] <= 0.125 and gemm["expected_by"] != "occupancy"
    unjudged = report.ops.drop(columns=["occupancy"])
    again = type(report)(unjudged, dict(report.summary), report.module, report.internals)
    again = again.classify(CARDS[card]).ops.set_index("name")
    assert "occupancy" not in set(again["expected_by"])
    assert again.loc["fusion.16", "t_expected_s"] < softmax["t_expected_s"] / 2


def test_the_fitting_half_and_the_held_out_half_are_every_program():
    assert set(calibrate.GPU_FITTING) | set(calibrate.GPU_HELD_OUT) == set(CASES)
    assert not set(calibrate.GPU_FITTING) & set(calibrate.GPU_HELD_OUT)


@pytest.mark.parametrize("card", CARDS)
def test_efficiency_per_op_class(reports, card):
    found, _ = reports
    gemm, stream = [], []
    for case in PER_OP:
        ops = found[card, case].ops
        per_run = ops["t_bound_s"] / ops["count"]
        large = ops[(per_run >= LARGE_RUN_S) & ops["efficiency"].notna()]
        conv = large["name"].str.startswith("cudnn-conv")  # a class of their own (below)
        library = large["name"].str.contains("gemm|custom-call|matmul") & ~conv
        gemm += list(large.loc[library & large["bound"].eq("compute"), "efficiency"])
        stream += list(large.loc[large["bound"].eq("memory") & ~conv, "efficiency"])
    assert len(gemm) >= 20 and len(stream) >= 40
    assert all(GEMM_BAND[0] <= e <= GEMM_BAND[1] for e in gemm), sorted(gemm)
    assert all(STREAM_BAND[0] <= e <= STREAM_BAND[1] for e in stream), sorted(stream)
    assert statistics.median(stream) >= STREAM_MEDIAN_MIN


@pytest.mark.parametrize("card", CARDS)
def test_ops_faster_than_their_roof_say_why(reports, card):
    """Where an op beat its roof the row says why, and none is put down to the chip's figures or
    its cost: every one held data its producer had just written in the L2."""
    found, _ = reports
    causes = defaultdict(int)
    for case in PER_OP:
        ops = found[card, case].ops
        faster = ops[ops["measurement_problem"].fillna("") != ""]
        assert faster["efficiency"].isna().all()
        for cause in faster["measurement_cause"]:
            causes[cause] += 1
    assert set(causes) <= {"in_cache"}, dict(causes)


@pytest.mark.parametrize("card", CARDS)
def test_an_fp8_gemm_is_priced_at_the_fp8_rate(reports, card):
    ops = reports[0][card, "fp8_matmul"].ops.set_index("name")
    gemm = ops.loc["cublas-gemm.1"]
    assert gemm["dtype"] == "f8e4m3fn"
    assert 0.7 <= gemm["efficiency"] <= 0.95  # at the bf16 rate it was 1.6x faster than its roof


@pytest.mark.parametrize("card", CARDS)
def test_an_embedding_lookup_reads_its_rows_not_the_table(reports, card):
    ops = reports[0][card, "kv_decode"].ops.set_index("name")
    lookup = ops.loc["loop_gather_fusion"]
    tokens, d_model, steps = 8, 4096, 8
    row_bytes = tokens * d_model * 2  # bf16 rows read and written
    assert lookup["bytes_accessed"] == pytest.approx(steps * (2 * row_bytes + tokens * 4))
    assert lookup["measurement_problem"] in ("", None) or lookup["measurement_cause"] == "in_cache"


@pytest.mark.parametrize("card", CARDS)
def test_programs_without_library_calls_or_loops_match_xla_gpus_own_count(reports, card):
    """XLA:GPU's ``cost_analysis()`` of the program that ran (records.json): it prices library
    calls at −1 and a loop body once, so only the programs with neither compare whole."""
    records = json.loads((TRACES / card / "records.json").read_text())["cases"]
    for case in ("f32_add", "layernorm", "softmax"):
        xla = records[case]["xla_cost_analysis"]
        summary = reports[0][card, case].summary
        assert summary["flops"] == pytest.approx(xla["flops"], rel=1e-9), case
        assert summary["bytes_accessed"] == pytest.approx(xla["bytes accessed"], rel=1e-9), case


# -- docs/validation.md's tables, rebuilt from the traces ---------------------------------------

VALIDATION = HERE.parent / "docs" / "validation.md"
PROGRAM_ROWS = ("gpt_step", "gpt_step_graphs", "nnx_lm_step", "convnet_step", "kv_decode",
                "attention_block", "attention_cudnn", "matmul_sweep", "matmul_8192", "fp8_matmul",
                "f32_add", "layernorm", "softmax")  # fmt: skip


def _op_class(row) -> str:
    per_run = row["t_bound_s"] / row["count"]
    if row["opcode"] == "fusion-start":
        return "async copies (fusion-start)"
    if str(row["name"]).startswith("dot_product_attention") or "fmha" in str(row["name"]):
        return "cuDNN flash attention"
    if str(row["name"]).startswith("cudnn-conv"):
        return "cuDNN convolutions"
    if (row["bound"] == "compute" and "gemm" in row["name"]) or row["opcode"] == "custom-call":
        return "gemm ≥ 50 µs a run" if per_run >= LARGE_RUN_S else "gemm < 50 µs a run"
    if per_run < 10e-6:
        return "other ops < 10 µs a run"
    return "memory-bound ≥ 50 µs a run" if per_run >= LARGE_RUN_S else "other ops 10–50 µs a run"


def validation_tables(found) -> tuple[list[str], list[str]]:
    """(per-program rows, per-class rows) of docs/validation.md's measured-GPU section: per
    program its half (fitted on or held out), per class Σ measured ÷ Σ bound and ÷ Σ expected
    (the expected times hold each kernel's launch gap, which no kernel's measured time does)."""
    programs = []
    for case in PROGRAM_ROWS:
        cells = [f"`{case}`", "fit" if case in calibrate.GPU_FITTING else "held out"]
        for card in CARDS:
            report = found[card, case]
            s = report.summary
            timed = report.ops[report.ops["measured_s"] > 0]
            on_device = timed["t_bound_s"].sum() / timed["measured_s"].sum()
            cells.append(f"{s['measured_step_s'] * 1e3:.2f}")
            cells.append(f"{s['step_bound_s'] / s['measured_step_s']:.2f}")
            cells.append(f"{calibrate.step_as_measured(report) / s['measured_step_s']:.2f}")
            cells.append("–" if s["measured_unmatched_ops"] else f"{on_device:.2f}")
        programs.append("| " + " | ".join(cells) + " |")
    classes: dict[tuple[str, str], list] = defaultdict(list)
    for card in CARDS:
        for case in PER_OP:
            ops = found[card, case].ops
            timed = ops[(ops["measured_s"] > 0) & (ops["t_bound_s"] > 0)]
            for _, row in timed.iterrows():
                classes[_op_class(row), card].append(row)
    rows = []
    for name in sorted({k[0] for k in classes}):
        cells = [name]
        for card in CARDS:
            members = classes.get((name, card), [])
            roof = sum(r["t_bound_s"] for r in members)
            expected = sum(r["t_expected_s"] for r in members)
            took = sum(r["measured_s"] for r in members)
            cells += [str(len(members)), f"{took / roof:.2f}" if roof else "–"]
            cells.append(f"{took / expected:.2f}" if expected else "–")
        rows.append("| " + " | ".join(cells) + " |")
    return programs, rows


def test_validation_md_holds_the_tables_these_traces_give(reports):
    text = VALIDATION.read_text()
    programs, classes = validation_tables(reports[0])
    missing = [row for row in programs + classes if row not in text]
    assert not missing, "docs/validation.md is stale; rows now:\n" + "\n".join(missing)
