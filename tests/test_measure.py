"""The measured join: real CPU runs profiled on one core, traces read back without recompiling,
corrupt traces, and synthetic GPU/TPU device planes built with the runtime XSpace schema."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

from hlo_roofline import chips, host, measured, xplane
from hlo_roofline import measure as hr_measure
from hlo_roofline.hlo import parse
from hlo_roofline.report import Report

# Band for the large f32 dot: t_roofline / measured on the host chip. The host f32 peak is XLA's
# best 1024³ matmul on this core, timed in CPU time so other processes do not lower it; an
# undisturbed step therefore reaches ≈0.9–1.0 and cannot beat it by much. Time other processes take
# from the core lands in the step's wall time and only lowers efficiency, so the band is tight above
# and loose below, and applies to the dot's fastest steps (p10 of 7); the median only has to be sane.
# Measured on 2 shared cores at load average 6–11: p10 0.56–0.86, median 0.50–0.72, coverage
# 0.93–0.995; once 1.35, when the peak's benchmark shared its (virtual) core's pipeline with the
# other test worker and the dot did not: CPU time does not shield a sibling hyperthread. The band
# still catches a unit error or time given to the wrong op (factors of 2 and more).
DOT_EFFICIENCY_BAND = (0.3, 1.6)
MIN_MEDIAN_DOT_EFFICIENCY = 0.2
MIN_COVERAGE_ONE_CORE = 0.90
TEST_CHIP = chips.Chip.custom("measure-test-cpu", peak_flops={"f32": 1e11}, hbm_bandwidth=1e10)

# Runs in a fresh interpreter pinned to one core: affinity must be set before jax starts threads.
ONE_CORE_RUN = textwrap.dedent(
    """
    import json, os, sys, warnings
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    import jax, jax.numpy as jnp
    from hlo_roofline import host, measured

    out = sys.argv[1]
    def step(a, b, c):
        d = a @ b                                   # the large dot: 2.1 GFLOP
        e = jnp.tanh(d) * 2.0 + c
        f = jax.lax.fori_loop(0, 3, lambda i, h: jnp.tanh(h) + 1.0, e[:64])
        return e.sum() + f.sum()

    n = 1024
    a = jnp.full((n, n), 0.01, jnp.float32)
    b = jnp.full((n, n), 0.02, jnp.float32)
    c = jnp.ones((n, n), jnp.float32)
    chip = host.host_chip()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = measured.measure(step, a, b, c, steps=7, warmup=2, chip=chip, logdir=out + "/logs")
    report.to_json(out + "/report.json")
    report.to_csv(out + "/report.csv")
    json.dump({"warnings": [str(w.message) for w in caught], "chip": dict(chip.flops),
               "bandwidth": chip.hbm_bandwidth}, open(out + "/run.json", "w"))
    """
)


@pytest.fixture(scope="module")
def one_core_run(tmp_path_factory) -> Path:
    """The one-core run's outputs, made once per session even when xdist workers share the tests."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # shared by the workers of this session
    out = root / "measure_one_core"
    with open(root / "measure_one_core.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the other worker waits and reuses the result
        if not (out / "run.json").exists():
            out.mkdir(exist_ok=True)
            env = {**os.environ, "JAX_PLATFORMS": "cpu", "XDG_CACHE_HOME": str(out / "cache")}
            done = subprocess.run(
                [sys.executable, "-c", ONE_CORE_RUN, str(out)],
                env=env,
                capture_output=True,
                text=True,
                timeout=240,
            )
            assert done.returncode == 0, done.stderr[-4000:]
    return out


def by_name(report: Report):
    return report.ops.set_index("name")


# -- real runs on one core ---------------------------------------------------------------------


def test_large_dot_runs_near_its_roofline_on_the_host_chip(one_core_run):
    report = Report.read(one_core_run / "report.json")
    ops = by_name(report)
    dot = ops[ops["mm_k"] == 1024]
    assert len(dot) == 1, ops[["opcode", "mm_k"]]
    dot = dot.iloc[0]
    assert dot["bound"] == "compute"
    low, high = DOT_EFFICIENCY_BAND
    fastest = dot["t_expected_s"] / dot["measured_p10_s"]
    assert low <= fastest <= high, dot[["t_expected_s", "measured_p10_s", "measured_s"]]
    if dot["measurement_problem"]:  # it beat the host's roof even after a second measurement
        assert np.isnan(dot["efficiency"]) and "host's compute roof" in dot["measurement_problem"]
    else:
        assert MIN_MEDIAN_DOT_EFFICIENCY <= dot["efficiency"] <= 1
        assert dot["efficiency"] == pytest.approx(dot["t_expected_s"] / dot["measured_s"])
    assert dot["achieved_flops_per_s"] == pytest.approx(dot["flops"] / dot["measured_s"])
    assert report.summary["chip"] == "host"
    run = json.loads((one_core_run / "run.json").read_text())
    assert not [w for w in run["warnings"] if "overlapping" in w], run["warnings"]


def test_no_op_claims_more_than_its_roof(one_core_run):
    """Efficiencies are at most 1; an op that ran faster than its roof has none, and says why."""
    ops = Report.read(one_core_run / "report.json").ops
    assert (ops["efficiency"].dropna() <= 1).all()
    beyond = ops["t_expected_s"] / ops["measured_s"] > 1
    assert (ops.loc[beyond, "measurement_problem"] != "").all()
    assert ops.loc[beyond, "efficiency"].isna().all()
    assert (ops.loc[~beyond, "measurement_problem"] == "").all()
    summary = Report.read(one_core_run / "report.json").summary
    assert summary["measured_problems"] == int(beyond.sum())


def test_per_op_times_cover_the_step_on_one_core(one_core_run):
    report = Report.read(one_core_run / "report.json")
    summary = report.summary
    assert summary["measured_steps"] == 7
    assert summary["measured_overlap"] is False
    assert MIN_COVERAGE_ONE_CORE <= summary["measured_coverage"] <= 1.0
    assert summary["measured_op_s"] == pytest.approx(np.nansum(report.ops["measured_s"]))


def test_loop_body_ops_are_summed_per_step_and_the_loop_keeps_its_self_time(one_core_run):
    """The 3-trip loop: jaxlib 0.10 runs it op by op (the while keeps its self time, each body op
    its 3 runs); jaxlib 0.12's CPU compiler wraps it in a small call that runs as one thunk, so
    the trace times only that call. Both: one container row, with measured time, carries it."""
    ops = Report.read(one_core_run / "report.json").ops
    containers = ops[ops["note"] == measured.CONTAINER_NOTE]
    assert len(containers) == 1, ops[["name", "opcode", "note"]]
    container = containers.iloc[0]
    assert container["opcode"] in ("while", "call") and container["measured_s"] > 0
    body = ops[(ops["count"] == 3) & ops["measured_s"].notna()]
    if container["opcode"] == "while":
        assert len(body) >= 1 and (body["measured_count"] == 3).all()
    else:
        assert body.empty
    timed = ops[ops["measured_s"].notna()]
    assert (timed["measured_p10_s"] <= timed["measured_s"]).all()
    assert (timed["measured_s"] <= timed["measured_p90_s"]).all()


def test_csv_and_json_keep_the_measured_columns(one_core_run):
    from_json = Report.read(one_core_run / "report.json")
    from_csv = Report.read(one_core_run / "report.csv")
    for column in measured.MEASURED_COLUMNS:
        assert from_csv.ops[column].dtype == float
        np.testing.assert_allclose(from_csv.ops[column], from_json.ops[column], rtol=1e-12)
    assert from_csv.summary["measured_step_s"] == from_json.summary["measured_step_s"]


def test_a_trace_from_another_run_is_read_without_recompiling(one_core_run):
    compiles: list[str] = []

    def count(event: str, *_args, **_kwargs) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(event)

    jax.monitoring.register_event_duration_secs_listener(count)
    try:
        report = measured.read_trace(one_core_run / "logs", chip=TEST_CHIP)
    finally:
        jax.monitoring.unregister_event_duration_listener(count)
    assert compiles == []
    original = Report.read(one_core_run / "report.json")
    assert list(report.ops["name"]) == list(original.ops["name"])
    np.testing.assert_allclose(report.ops["measured_s"], original.ops["measured_s"])
    assert report.summary["chip"] == TEST_CHIP.key
    assert report.summary["measured_program"].startswith("jit_step(")


def test_a_cpu_trace_without_a_chip_is_measured_but_not_judged(one_core_run):
    report = measured.read_trace(one_core_run / "logs")
    assert "bound" not in report.ops and report.ops["efficiency"].isna().all()
    assert report.ops["measured_s"].notna().any()


# -- unreadable traces -------------------------------------------------------------------------


@pytest.mark.parametrize("cut", [0.01, 0.3, 0.5, 0.9, 0.999])
def test_a_truncated_trace_raises_a_trace_error(one_core_run, tmp_path, cut):
    (original,) = (one_core_run / "logs").rglob("*.xplane.pb")
    data = original.read_bytes()
    broken = tmp_path / "plugins" / "profile" / "run" / "host.xplane.pb"
    broken.parent.mkdir(parents=True)
    broken.write_bytes(data[: int(len(data) * cut)])
    with pytest.raises(measured.TraceError, match=r"host\.xplane\.pb"):
        measured.read_trace(tmp_path)


@pytest.mark.parametrize(
    "content", [b"", b"\xff" * 64, b"not a trace at all\n", bytes(range(256)) * 8]
)
def test_a_corrupt_trace_raises_a_trace_error(tmp_path, content):
    path = tmp_path / "x.xplane.pb"
    path.write_bytes(content)
    with pytest.raises(measured.TraceError):
        measured.read_trace(path)


def test_a_directory_without_a_trace_raises_a_trace_error(tmp_path):
    with pytest.raises(measured.TraceError, match=r"no '\*\.xplane\.pb'"):
        measured.read_trace(tmp_path)
    with pytest.raises(measured.TraceError, match="no trace"):
        measured.read_trace(tmp_path / "missing")


def test_trace_error_is_a_value_error():
    assert issubclass(measured.TraceError, ValueError)


# -- synthetic device planes -------------------------------------------------------------------

PROGRAM_ID = 7
TRIPS = 3
US = 1_000_000  # picoseconds per microsecond


def _looped(a, b):
    return jax.lax.fori_loop(0, TRIPS, lambda i, h: jnp.tanh(h @ b), a).sum() + a.sum()


@pytest.fixture(scope="module")
def compiled_module():
    """(serialized HloModuleProto, parsed module) of a small step with a loop."""
    x = jnp.ones((64, 64), jnp.float32)
    compiled = jax.jit(_looped).lower(x, x).compile()
    proto = compiled.runtime_executable().hlo_modules()[0].as_serialized_hlo_module_proto()
    return proto, parse(compiled.as_text())


class SpaceBuilder:
    """Builds an XSpace with the runtime schema: interned names, stats typed by Python type."""

    def __init__(self):
        self.space = xplane.messages["XSpace"]()

    def plane(self, name: str, stats: dict | None = None):
        plane = self.space.planes.add(id=len(self.space.planes), name=name)
        plane.stats.extend(self.stats(plane, stats or {}))
        return plane

    @staticmethod
    def stat_id(plane, name: str) -> int:
        for key, meta in plane.stat_metadata.items():
            if meta.name == name:
                return key
        key = len(plane.stat_metadata) + 1
        plane.stat_metadata[key].id, plane.stat_metadata[key].name = key, name
        return key

    def stats(self, plane, values: dict):
        made = []
        for name, value in values.items():
            stat = xplane.messages["XStat"](metadata_id=self.stat_id(plane, name))
            if isinstance(value, bytes):
                stat.bytes_value = value
            elif isinstance(value, str):
                stat.str_value = value
            elif isinstance(value, float):
                stat.double_value = value
            else:
                stat.int64_value = value
            made.append(stat)
        return made

    def metadata(self, plane, name: str, stats: dict | None = None) -> int:
        for key, meta in plane.event_metadata.items():
            if meta.name == name:
                return key
        key = len(plane.event_metadata) + 1
        meta = plane.event_metadata[key]
        meta.id, meta.name = key, name
        meta.stats.extend(self.stats(plane, stats or {}))
        return key

    def event(self, plane, line, name: str, start_ps: int, duration_ps: int, **stats):
        line.events.add(
            metadata_id=self.metadata(plane, name),
            offset_ps=start_ps - line.timestamp_ns * 1000,
            duration_ps=duration_ps,
            stats=self.stats(plane, stats),
        )

    def hlo(self, module_proto: bytes, name: str, program_id: int):
        plane = self.plane("/host:metadata")
        wrapper = xplane.messages["HloProto"](hlo_module=module_proto).SerializeToString()
        self.metadata(plane, name, {"Hlo Proto": wrapper, "program_id": program_id})

    def write(self, directory: Path) -> Path:
        path = directory / "plugins" / "profile" / "2030_01_01_00_00_00" / "host.xplane.pb"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(self.space.SerializeToString())
        return path


def _schedule(module, start_ps: int):
    """One execution's events (op, start, duration) in program order; loop bodies TRIPS times.

    Every op takes 10 µs + 1 µs per position; the while spans its body plus 2 µs of its own.
    """
    skip = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast"}
    events, t = [], start_ps
    for instr in module.entry.instructions:
        if instr.opcode in skip:
            continue
        if instr.opcode == "while":
            loop_start = t
            body = [i for i in _body(module, instr).instructions if i.opcode not in skip]
            inner = []
            for _ in range(TRIPS):
                for b in body:
                    duration = (10 + len(inner)) * US
                    inner.append((b.name, t + US, duration))
                    t += duration
            t += 2 * US
            events.append((instr.name, loop_start, t - loop_start))
            events.extend(inner)
        else:
            duration = (10 + len(events)) * US
            events.append((instr.name, t, duration))
            t += duration
    return events, t


def _body(module, loop):
    return module.computations[loop.attrs["body"].lstrip("%")]


def _expected(events) -> dict[str, float]:
    per_op: dict[str, float] = {}
    for op, _, duration in events:
        per_op[op] = per_op.get(op, 0.0) + duration * 1e-12
    return per_op


def test_a_synthetic_gpu_trace_is_read_and_joined(compiled_module, tmp_path):
    proto, module = compiled_module
    builder = SpaceBuilder()
    builder.hlo(proto, f"jit__looped({PROGRAM_ID})", PROGRAM_ID)
    host = builder.plane("/host:CPU")
    python = host.lines.add(id=1, name="python", timestamp_ns=1_000)
    gpu = builder.plane("/device:GPU:0", {"clock_rate": 1_000_000})
    stream = gpu.lines.add(id=2, name="Stream #1(Compute)", timestamp_ns=1_000)
    step_start = 2_000 * US
    for step in range(2):
        events, end = _schedule(module, step_start + 5 * US)
        builder.event(host, python, "train", step_start, end + 20 * US - step_start, step_num=step)
        for op, start, duration in events:
            builder.event(
                gpu, stream, op, start, duration,
                hlo_op=op, hlo_module="jit__looped", program_id=PROGRAM_ID,
            )  # fmt: skip
        step_wall = (end + 20 * US - step_start) * 1e-12
        step_start = end + 100 * US
    builder.write(tmp_path)
    chip = chips.get("h100")
    with warnings.catch_warnings():
        warnings.simplefilter("error", measured.OverlapWarning)
        report = measured.read_trace(tmp_path, chip=chip)

    ops = by_name(report)
    expected = _expected(events)
    (loop,) = [i.name for i in module.entry.instructions if i.opcode == "while"]
    body_total = sum(d for op, _, d in events if op != loop and module_has_body(module, op)) * 1e-12
    expected[loop] -= body_total  # the loop keeps only its own 2 µs
    assert expected[loop] == pytest.approx(2e-6)
    for op, seconds in expected.items():
        assert ops.loc[op, "measured_s"] == pytest.approx(seconds), op
    assert report.summary["measured_step_s"] == pytest.approx(step_wall)
    assert report.summary["measured_coverage"] == pytest.approx(sum(expected.values()) / step_wall)
    assert report.summary["measured_devices"] == ["/device:GPU:0"]
    assert report.summary["measured_steps_from"] == "step annotations"
    timed = ops[ops["measured_s"].notna() & (ops["t_bound_s"] > 0)]
    np.testing.assert_allclose(timed["efficiency"], timed["t_bound_s"] / timed["measured_s"])


def module_has_body(module, op: str) -> bool:
    (loop,) = [i for i in module.entry.instructions if i.opcode == "while"]
    return any(op == i.name for i in _body(module, loop).instructions)


def test_a_synthetic_tpu_trace_uses_module_events_and_metadata_stats(compiled_module, tmp_path):
    """TPU layout: ``XLA Modules``/``XLA Ops`` lines, program id in the event metadata, two cores."""
    proto, module = compiled_module
    builder = SpaceBuilder()
    builder.hlo(proto, f"jit__looped({PROGRAM_ID})", PROGRAM_ID)
    per_device = {}
    for core, scale in ((0, 1), (1, 3)):
        plane = builder.plane(f"/device:TPU:{core}", {"device_type_string": "TPU v5 lite"})
        modules = plane.lines.add(id=1, name="XLA Modules", timestamp_ns=0)
        xla_ops = plane.lines.add(id=2, name="XLA Ops", timestamp_ns=0)
        start = 1_000 * US
        for _ in range(3):  # three executions, no step annotations: each one is a step
            events, end = _schedule(module, start)
            builder.event(plane, modules, f"jit__looped({PROGRAM_ID})", start, end - start)
            for op, op_start, duration in events:
                builder.metadata(plane, op, {"program_id": PROGRAM_ID, "flops": 1.0})
                builder.event(plane, xla_ops, op, op_start, duration * scale)
            start = end + 50 * US
        per_device[core] = events
    builder.write(tmp_path)
    report = measured.read_trace(tmp_path)  # the chip named by the planes: TPU v5e
    assert report.summary["chip"] == chips.get("TPU v5 lite").key
    assert report.summary["measured_steps"] == 3
    assert report.summary["measured_steps_from"] == "executions"
    assert report.summary["measured_devices"] == ["/device:TPU:0", "/device:TPU:1"]
    ops = by_name(report)
    for op, seconds in _expected(per_device[0]).items():
        if not module_has_body(module, op) and ops.loc[op, "opcode"] != "while":
            assert ops.loc[op, "measured_s"] == pytest.approx(seconds * 2), op  # mean of ×1, ×3


def test_ops_on_several_streams_warn_of_overlap(compiled_module, tmp_path):
    proto, module = compiled_module
    builder = SpaceBuilder()
    builder.hlo(proto, f"jit__looped({PROGRAM_ID})", PROGRAM_ID)
    gpu = builder.plane("/device:GPU:0")
    lines = [gpu.lines.add(id=i, name=f"Stream #{i}", timestamp_ns=0) for i in (1, 2)]
    events, _ = _schedule(module, 1_000 * US)
    for k, (op, start, duration) in enumerate(events):
        builder.event(gpu, lines[k % 2], op, start, duration, hlo_op=op, program_id=PROGRAM_ID)
    builder.write(tmp_path)
    with pytest.warns(measured.OverlapWarning, match="streams") as caught:
        report = measured.read_trace(tmp_path, chip=TEST_CHIP)
    assert report.summary["measured_overlap"] is True
    # streams of a device run concurrently by design: no advice to pin a CPU core
    assert "one core" not in str(caught[0].message)


def test_a_late_cpu_completion_is_capped_at_the_users_start_and_warns(compiled_module, tmp_path):
    """CPU thunks: ``end: <op>`` after a dependent op started → capped there, with a warning."""
    proto, module = compiled_module
    builder = SpaceBuilder()
    builder.hlo(proto, f"jit__looped({PROGRAM_ID})", PROGRAM_ID)
    cpu = builder.plane("/host:CPU")
    line = cpu.lines.add(id=3, name="tf_XLAPjRtCpuClient/3", timestamp_ns=0)
    producer, user = _producer_and_user(module)
    t = 1_000 * US
    builder.event(
        cpu, line, producer, t, 10 * US, hlo_op=producer, program_id=PROGRAM_ID, run_id=1, _p=11
    )
    builder.event(
        cpu, line, user, t + 12 * US, 10 * US, hlo_op=user, program_id=PROGRAM_ID, run_id=1, _p=12
    )
    builder.event(cpu, line, f"end: {producer}", t + 40 * US, 1, _c=11)
    builder.write(tmp_path)
    with pytest.warns(measured.OverlapWarning, match="dependent op"):
        report = measured.read_trace(tmp_path, chip=TEST_CHIP)
    assert by_name(report).loc[producer, "measured_s"] == pytest.approx(12e-6)


def _producer_and_user(module):
    skip = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast", "while"}
    for instr in module.entry.instructions:
        if instr.opcode in skip:
            continue
        for operand in instr.operands:
            if operand.opcode not in skip:
                return operand.name, instr.name
    raise AssertionError("no producer/user pair in the entry computation")


def test_measure_in_process_leaves_no_trace_behind(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    x = jnp.ones((128, 128), jnp.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", measured.OverlapWarning)  # this process may use 2 cores
        report = hr_measure(lambda a: jnp.tanh(a @ a), x, steps=2, warmup=1, chip=TEST_CHIP)
    assert list(tmp_path.iterdir()) == []
    assert report.summary["measured_steps"] == 2 and report.summary["compiled_for"] == "local"
    assert report.ops["measured_s"].notna().any()
    assert set(measured.MEASURED_COLUMNS) <= set(report.ops.columns)


# -- the host chip -----------------------------------------------------------------------------


def test_the_host_chip_was_measured_for_one_core_and_cached(one_core_run):
    cache = json.loads((one_core_run / "cache" / "hlo_roofline" / "host_chip.json").read_text())
    ((key, entry),) = cache.items()
    assert "cores=1" in key
    assert entry["flops"]["f32"] > 1e9 and entry["flops"]["bf16"] > 1e8
    assert 1e8 < entry["bandwidth"] < 1e12


def test_the_host_chip_comes_from_the_cache_and_is_registered(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    entry = {"flops": {"f32": 1.5e11, "bf16": 3e10}, "bandwidth": 1.2e10, "measured_at": 0}
    host.cache_path().parent.mkdir(parents=True)
    host.cache_path().write_text(json.dumps({host._fingerprint(): entry}))
    monkeypatch.setattr(host, "benchmark", lambda: pytest.fail("the cache was not used"))
    chip = host.host_chip()
    assert chips.get("host") is chip and chip.kind == "cpu"
    assert chip.peak_flops("f32") == 1.5e11 and chip.peak_flops("bf16") == 3e10
    assert chip.hbm_bandwidth == 1.2e10 and chip.vpu_flops == 1.5e11


def _faster_than_roof(bound: str, measured_s: float, bytes_per_run: float) -> pd.DataFrame:
    """Two measured ops: one at half its roof, one twice as fast as its roof allows."""
    return pd.DataFrame(
        {
            "name": ["slow", "fast"], "bound": ["compute", bound], "count": [1.0, 2.0],
            "flops": [1e9, 1e9], "bytes_accessed": [1e6, 2 * bytes_per_run],
            "t_bound_s": [1e-3, 2 * measured_s], "measured_s": [2e-3, measured_s],
        }
    )  # fmt: skip


CPU_WITH_CACHE = chips.Chip.custom(
    "cpu-with-llc", kind="cpu", peak_flops={"f32": 1e11}, hbm_bandwidth=1e10,
    memory={"llc": chips.MemorySpace("llc", "chip", 1, capacity=32 * 2**20)},
)  # fmt: skip


@pytest.mark.parametrize(
    ("bound", "measured_s", "bytes_per_run", "chip", "cause", "code"),
    [
        ("memory", 1e-3, 4 * 2**20, CPU_WITH_CACHE, "fit in the LLC (32 MiB)", "in_cache"),
        ("memory", 1e-3, 4 * 2**30, CPU_WITH_CACHE, "cpu-with-llc's memory bandwidth is below",
         "roof_low"),
        ("compute", 1e-3, 1e3, "v5e", "TPU v5e's peak FLOP/s is below what ran", "roof_low"),
        ("memory", 2e-7, 1e3, "v5e", "0.2 µs is too short to time", "too_short"),
    ],
)  # fmt: skip
def test_an_op_faster_than_its_roof_is_a_problem_with_a_cause(
    bound, measured_s, bytes_per_run, chip, cause, code
):
    ops = measured.add_efficiency(_faster_than_roof(bound, measured_s, bytes_per_run), chip)
    slow, fast = ops.set_index("name").loc["slow"], ops.set_index("name").loc["fast"]
    assert slow["efficiency"] == pytest.approx(0.5) and slow["measurement_problem"] == ""
    assert np.isnan(fast["efficiency"])
    assert fast["measurement_problem"].startswith("measured 2.00x faster than its roof allows: ")
    assert cause in fast["measurement_problem"]
    assert fast["measurement_cause"] == code and slow["measurement_cause"] == ""


def test_beating_the_host_roof_names_the_conditions_it_was_measured_under(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    loaded = {
        "flops": {"f32": 1e10, "bf16": 5e9}, "bandwidth": 1e9, "measured_at": 0,
        "conditions": {"load_average": [9.5, 11.0], "usable_cores": 1, "cpus": 2, "trials": 3},
    }  # fmt: skip
    host.cache_path().parent.mkdir(parents=True)
    host.cache_path().write_text(json.dumps({host._fingerprint(): {"measurements": [loaded]}}))
    chip = host.host_chip()
    ops = measured.add_efficiency(_faster_than_roof("compute", 1e-3, 1e3), chip)
    why = ops.set_index("name").loc["fast", "measurement_problem"]
    assert "host's compute roof was measured too low" in why
    assert ops.set_index("name").loc["fast", "measurement_cause"] == "host_roof_low"
    assert "load average 11.0 on 1 usable core(s)" in why and "host_chip(refresh=True)" in why


def test_measuring_the_host_again_keeps_the_best_of_each_figure(tmp_path, monkeypatch):
    """A busy neighbour only slows a measurement down: the roof is the best one reached."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    runs = iter([
        {"flops": {"f32": 4e10, "bf16": 1e10}, "bandwidth": 2e10, "measured_at": 1},
        {"flops": {"f32": 2e10, "bf16": 3e10}, "bandwidth": 1e10, "measured_at": 2},
    ])  # fmt: skip
    monkeypatch.setattr(host, "benchmark", lambda: next(runs))
    host.host_chip()
    chip = host.host_chip(refresh=True)
    assert dict(chip.flops) == {"fp32": 4e10, "bf16": 3e10} and chip.hbm_bandwidth == 2e10
    assert [m["measured_at"] for m in host.measurements()] == [1, 2]
    assert host.host_chip().hbm_bandwidth == 2e10  # from the cache: nothing measured
