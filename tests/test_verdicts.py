"""Roofline verdicts through the public API, against the book's worked answers
(*How to Scale Your Model*, docs/book.md) and real programs compiled for TPU and GPU targets."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import jax
import jax.numpy as jnp
import pandas as pd
import pytest
from conftest import FIXTURES, HAND_WRITTEN_HLO, SLOW

import hlo_roofline as hr
import hlo_roofline.targets  # hr.targets below needs the submodule imported
from hlo_roofline import chips
from hlo_roofline.judge import verdict

pytestmark = HAND_WRITTEN_HLO  # hand-written modules: not scheduled, no fusions

V5E_BOOK = chips.get("v5e", profile="book")


def dot_module(
    b: int, d: int, f: int, lhs="bf16", rhs="bf16", out="bf16", fuse_convert=False
) -> str:
    """X[b,d] · W[d,f] as XLA would emit it (optionally with the weight convert fused in)."""
    if not fuse_convert:
        return f"""HloModule book
ENTRY %e (x: {lhs}[{b},{d}], w: {rhs}[{d},{f}]) -> {out}[{b},{f}] {{
  %x = {lhs}[{b},{d}]{{1,0}} parameter(0)
  %w = {rhs}[{d},{f}]{{1,0}} parameter(1)
  ROOT %dot = {out}[{b},{f}]{{1,0}} dot(%x, %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}
"""
    return f"""HloModule book
%fused (p0: {lhs}[{b},{d}], p1: {rhs}[{d},{f}]) -> {out}[{b},{f}] {{
  %p0 = {lhs}[{b},{d}]{{1,0}} parameter(0)
  %p1 = {rhs}[{d},{f}]{{1,0}} parameter(1)
  %c = {lhs}[{d},{f}]{{1,0}} convert(%p1)
  ROOT %dot = {out}[{b},{f}]{{1,0}} dot(%p0, %c), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}
ENTRY %e (x: {lhs}[{b},{d}], w: {rhs}[{d},{f}]) -> {out}[{b},{f}] {{
  %x = {lhs}[{b},{d}]{{1,0}} parameter(0)
  %w = {rhs}[{d},{f}]{{1,0}} parameter(1)
  ROOT %fusion = {out}[{b},{f}]{{1,0}} fusion(%x, %w), kind=kOutput, calls=%fused
}}
"""


def row(report, name):
    return report.ops.set_index("name").loc[name]


def test_r1_dot_product_is_memory_bound_at_intensity_one_half():
    n = 1_000_000
    text = f"""HloModule r1
ENTRY %e (x: bf16[{n}], y: bf16[{n}]) -> bf16[] {{
  %x = bf16[{n}]{{0}} parameter(0)
  %y = bf16[{n}]{{0}} parameter(1)
  ROOT %d = bf16[] dot(%x, %y), lhs_contracting_dims={{0}}, rhs_contracting_dims={{0}}
}}
"""
    r = row(hr.analyze_hlo(text, chip=V5E_BOOK), "d")
    assert (r.flops, r.bytes_accessed) == (2_000_000, 4_000_002)
    assert r.intensity == pytest.approx(0.49999975)
    assert r.bound == "memory"


def test_r2_v5e_critical_intensity_is_240():
    r = row(hr.analyze_hlo(dot_module(8, 8, 8), chip=V5E_BOOK), "dot")
    assert r.critical_intensity == pytest.approx(240.24, abs=0.01)


@pytest.mark.parametrize(
    ("batch", "bound"), [(128, "memory"), (240, "memory"), (272, "compute"), (1024, "compute")]
)
def test_r3_bf16_matmul_is_compute_bound_iff_batch_above_about_240(batch, bound):
    r = row(hr.analyze_hlo(dot_module(batch, 8192, 8192), chip=V5E_BOOK), "dot")
    assert r.bound == bound
    assert r.t_expected_s == max(r.t_compute_s, r.t_memory_s)


def test_r3_exact_crossover_for_d_f_8192_is_255():
    dot = row(hr.analyze_hlo(dot_module(64, 8192, 8192), chip=V5E_BOOK), "dot")
    assert dot.hint_reason == "ridge_m" and dot.ridge_m == pytest.approx(255.2, abs=0.1)
    assert dot.hint == f"memory-bound at M=64; ridge at M≈{dot.ridge_m:.0f}"


def _tpu_dot(b: int, d: int, f: int) -> str:
    """x[b,d] · w[d,f] in bf16 with the TPU's tiled layouts (rows in tiles of 8)."""
    tiled = "{1,0:T(8,128)(2,1)}"
    return f"""HloModule book
ENTRY %e (x: bf16[{b},{d}], w: bf16[{d},{f}]) -> bf16[{b},{f}] {{
  %x = bf16[{b},{d}]{tiled} parameter(0)
  %w = bf16[{d},{f}]{tiled} parameter(1)
  ROOT %dot = bf16[{b},{f}]{tiled} dot(%x, %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}
"""


@pytest.mark.parametrize("batch", [264, 272, 273, 274, 280])
def test_book_crossover_is_for_the_array_as_stored(batch):
    """x[B,4096] @ w[4096,4096] on v5e (book numbers): with the book's exact bytes the crossover
    is B = 272.2, but a TPU stores the rows in tiles of 8, so B = 273 moves 280 rows' bytes and
    stays memory-bound; the verdict flips at 274. The hint's ridge_m is that crossover, and says
    it is for the array as stored."""
    d, ci = 4096, V5E_BOOK.critical_intensity("bf16")
    stored = -(-batch // 8) * 8
    padded = batch * d * d / (stored * 2 * d + d * d)  # 2·B·D² FLOPs over 2·(2·stored·D + D²) B
    exact = batch * d * d / (batch * 2 * d + d * d)
    dot = row(hr.analyze_hlo(_tpu_dot(batch, d, d), chip=V5E_BOOK), "dot")
    assert dot.bytes_accessed == 2 * (2 * stored * d + d * d)
    assert dot.bound == ("compute" if padded > ci else "memory")
    if batch == 273:  # the book's exact bytes would call it compute-bound
        assert exact > ci and dot.bound == "memory"
        assert math.ceil(dot.ridge_m) == 274
        assert dot.hint.endswith("for the lhs as stored (its rows padded to the layout's tile)")
    if batch % 8 == 0:
        assert "as stored" not in dot.hint
        assert dot.ridge_m == pytest.approx(ci * d / (d - 2 * ci), abs=0.01)  # 272.2


def test_r4_int8_matmul_worked_vector():
    report = hr.analyze_hlo(dot_module(256, 8192, 8192, "s8", "s8", "s8"), chip=V5E_BOOK)
    r = row(report, "dot")
    assert r.flops == 34_359_738_368 and r.bytes_accessed == 71_303_168
    assert r.intensity == pytest.approx(481.9, abs=0.05)
    assert r.critical_intensity == pytest.approx(480.5, abs=0.1)  # 3.94e14 / 8.2e11
    assert r.t_compute_s == pytest.approx(87.21e-6, rel=1e-3)
    assert r.t_memory_s == pytest.approx(86.96e-6, rel=1e-3)
    assert r.bound == "compute"  # barely
    assert report.summary["step_time_serial_s"] == pytest.approx(max(r.t_compute_s, r.t_memory_s))
    assert report.summary["step_time_upper_s"] == pytest.approx(r.t_compute_s + r.t_memory_s)


@pytest.mark.parametrize(
    ("batch", "int8_bound", "bf16_bound"),
    [
        (112, "memory", "memory"),
        (144, "compute", "memory"),
        (200, "compute", "memory"),
        (300, "compute", "compute"),
    ],
)
def test_r5_int8_weights_halve_the_critical_batch(batch, int8_bound, bf16_bound):
    """bf16 activations × int8 weights (convert fused): compute-bound above B ≈ 127.6 (book: > 120)."""
    int8 = row(
        hr.analyze_hlo(dot_module(batch, 8192, 8192, rhs="s8", fuse_convert=True), chip=V5E_BOOK),
        "fusion",
    )
    assert int8.bytes_accessed == 2 * batch * 8192 + 8192 * 8192 + 2 * batch * 8192
    assert int8.bound == int8_bound
    bf16 = row(hr.analyze_hlo(dot_module(batch, 8192, 8192), chip=V5E_BOOK), "dot")
    assert bf16.bound == bf16_bound


def test_r6_per_batch_weights_stay_memory_bound():
    text = """HloModule r6
ENTRY %e (x: s8[128,8192], w: s8[128,8192,8192]) -> s8[128,8192] {
  %x = s8[128,8192]{1,0} parameter(0)
  %w = s8[128,8192,8192]{2,1,0} parameter(1)
  ROOT %d = s8[128,8192]{1,0} dot(%x, %w), lhs_batch_dims={0}, lhs_contracting_dims={1}, rhs_batch_dims={0}, rhs_contracting_dims={1}
}
"""
    r = row(hr.analyze_hlo(text, chip=V5E_BOOK), "d")
    assert (r.flops, r.bytes_accessed) == (17_179_869_184, 8_592_031_744)
    assert r.intensity == pytest.approx(1.99951, abs=1e-5)
    assert r.bound == "memory" and r.hint_reason == "batched_weights"
    assert "whatever the batch" in r.hint


def test_r7_h100_ridge_is_295():
    r = row(hr.analyze_hlo(dot_module(8, 8, 8), chip="h100"), "dot")
    assert r.critical_intensity == pytest.approx(295.2, abs=0.1)


def test_mxu_padding_waste_hint():
    """300x1000 · 1000x200: the 1000x200 weights pad to 1024x256 on a 128-wide MXU, 24% waste.

    The 300 lhs rows stream through the array and do not pad to the MXU width.
    """
    padded = row(hr.analyze_hlo(dot_module(300, 1000, 200), chip="v5e"), "dot")
    assert padded.mxu_waste == pytest.approx(1 - 200 * 1000 / (256 * 1024))
    assert "MXU 128-padding of N,K=200,1000 wastes 24%" in padded.hint
    aligned = row(hr.analyze_hlo(dot_module(256, 1024, 512), chip="v5e"), "dot")
    assert aligned.mxu_waste == 0 and "MXU" not in aligned.hint


def test_unknown_chip_lists_close_matches():
    with pytest.raises(chips.UnknownChipError, match="v5e"):
        hr.analyze_hlo(dot_module(8, 8, 8), chip="v5f")


# -- real programs compiled for accelerators we do not have ----------------------------------


def transformer_step(params, tokens):
    """One block (attention + MLP) forward and backward, bf16."""

    def loss(params):
        x = params["embed"][tokens]
        q, k, v = (x @ params[n] for n in ("wq", "wk", "wv"))
        att = jax.nn.softmax(q @ k.swapaxes(-1, -2) / 8.0, axis=-1)
        x = x + (att @ v) @ params["wo"]
        x = x + jax.nn.gelu(x @ params["w1"]) @ params["w2"]
        return jnp.mean(x.astype(jnp.float32) ** 2)

    grads = jax.grad(loss)(params)
    return jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads)


D_MODEL = 1024


def transformer_inputs(batch: int, seq: int = 128, d: int = D_MODEL, ff: int = 4 * D_MODEL):
    def s(*shape, dtype=jnp.bfloat16):
        return jax.ShapeDtypeStruct(shape, dtype)

    params = {"embed": s(1024, d), "wq": s(d, d), "wk": s(d, d), "wv": s(d, d), "wo": s(d, d),
              "w1": s(d, ff), "w2": s(ff, d)}  # fmt: skip
    return params, s(batch, seq, dtype=jnp.int32)


def _big_matmuls(report):
    ops = report.ops
    mm = ops[(ops.mm_k > 0) & ops.op_name.str.contains("dot_general")]
    return mm[mm.flops >= 0.05 * mm.flops.max()]


@SLOW
def test_transformer_matmuls_compute_bound_at_large_batch_memory_bound_at_batch_1():
    big = hr.analyze(transformer_step, *transformer_inputs(batch=16), chip="v5e")
    assert big.summary["compiled_for"] == "v5e:2x2"
    mm = _big_matmuls(big)
    assert len(mm) >= 6 and (mm.bound == "compute").all(), mm[["name", "bound", "intensity"]]
    small = hr.analyze(transformer_step, *transformer_inputs(batch=1, seq=1), chip="v5e")
    weights = small.ops[small.ops.op_name.str.contains("dot_general") & (small.ops.flops > 0)]
    heavy = weights[weights.bytes_accessed >= 2 * D_MODEL * D_MODEL * 0.9]  # ops that read a weight
    # XLA:TPU lowers these matrix-vector products onto the vector unit (multiply, then reduce):
    # the weight's bytes or the loop over its elements sets their time, never the MXU
    assert len(heavy) >= 4, heavy[["name", "bound"]]
    # (their bound: the weight's bytes, or the vector unit where the weight sits in VMEM; their
    # expectation: XLA:TPU's loop where it charges more)
    shown = heavy[["name", "bound", "compute_unit", "expected_by"]]
    assert ((heavy.bound == "memory") | (heavy.compute_unit == "vector")).all(), shown
    assert (heavy.compute_unit != "mxu").all(), shown


def test_int8_weights_change_the_verdict_on_v5e():
    def matmul(x, w):
        return (x @ w.astype(jnp.bfloat16)).astype(jnp.bfloat16)

    x = jax.ShapeDtypeStruct((192, 8192), jnp.bfloat16)
    verdicts = {}
    for dtype in (jnp.bfloat16, jnp.int8):
        report = hr.analyze(matmul, x, jax.ShapeDtypeStruct((8192, 8192), dtype), chip="v5e")
        (mm,) = [r for r in report.ops.itertuples() if r.mm_k > 0]
        verdicts[dtype.__name__] = mm.bound
    assert verdicts == {"bfloat16": "memory", "int8": "compute"}


@pytest.mark.parametrize(
    "target", ["v5p:2x2x1", "v6e:2x2", "7x:2x2x1", "h100:1x1x8", "a100", "b200"]
)
def test_compile_only_targets_give_classified_reports(target):
    def step(w, x):
        return jax.nn.relu(x @ w).sum()

    w = jax.ShapeDtypeStruct((1024, 1024), jnp.bfloat16)
    x = jax.ShapeDtypeStruct((512, 1024), jnp.bfloat16)
    report = hr.analyze(step, w, x, target=target)
    assert report.summary["compiled_for"] == hr.targets.parse_target(target).spec
    assert report.summary["chip"] == hr.targets.parse_target(target).chip
    assert report.summary["flops"] >= 2 * 512 * 1024 * 1024
    assert report.summary["step_time_serial_s"] > 0
    assert set(report.ops.bound) <= {"compute", "memory", "communication", "unknown", "none"}


def test_sharded_data_parallel_step_on_h100x8_has_communication():
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = hr.targets.make_mesh("h100:1x1x8", (8,), ("data",))
    w = jax.ShapeDtypeStruct((2048, 2048), jnp.bfloat16, sharding=NamedSharding(mesh, P()))
    x = jax.ShapeDtypeStruct((8 * 64, 2048), jnp.bfloat16, sharding=NamedSharding(mesh, P("data")))

    def step(w, x):
        g = jax.grad(lambda w: jnp.mean((x @ w).astype(jnp.float32) ** 2))(w)
        return w - 1e-3 * g

    report = hr.analyze(step, w, x, target="h100:1x1x8")
    comm = report.ops[report.ops.comm_bytes > 0]
    assert len(comm) and (comm.group_size == 8).all()
    # a gradient all-reduce moves 2·B·(N−1)/N per device over NVLink (450 GB/s one way)
    ar = comm[comm.collective == "all-reduce"].iloc[0]
    assert ar.t_comm_s == pytest.approx(ar.comm_bytes / 450e9)


def test_chip_without_compile_target_says_so():
    with pytest.warns(UserWarning, match="no compile-only target"):
        report = hr.analyze(lambda x: x @ x, jnp.ones((64, 64)), chip="mi300x")
    assert report.summary["chip"] == "mi300x" and report.summary["compiled_for"] == "local"


# -- the report as a file ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def classified():
    return hr.analyze_hlo("fixtures/attention/h100.hlo.txt", chip="h100")


@pytest.mark.parametrize("suffix", [".json", ".csv"])
def test_report_round_trips_losslessly(classified, tmp_path, suffix):
    path = tmp_path / f"r{suffix}"
    getattr(classified, f"to_{suffix[1:]}")(path)
    back = hr.Report.read(path)
    pd.testing.assert_frame_equal(back.ops, classified.ops)
    assert back.summary == json.loads(json.dumps(classified.summary))
    assert back.module == classified.module


def test_hostile_text_round_trips(classified, tmp_path):
    hostile = classified.ops.copy()
    hostile.loc[0, "op_name"] = 'a,"b"\n<img src=x onerror=alert(1)>#c'
    report = hr.Report(hostile, classified.summary, classified.module)
    for suffix in (".csv", ".json"):
        report_path = tmp_path / f"h{suffix}"
        getattr(report, f"to_{suffix[1:]}")(report_path)
        assert hr.Report.read(report_path).ops.loc[0, "op_name"] == hostile.loc[0, "op_name"]
    assert "<img" not in report._repr_html_()


@pytest.mark.parametrize(
    "content", ["", "{", '{"format": "other"}', "#hlo_roofline.report {}\nname\n", "\x00\x01"]
)
def test_corrupt_report_is_a_clear_error(tmp_path, content):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    with pytest.raises(hr.ReportError, match=r"bad\.json"):
        hr.Report.read(bad)


def test_write_tensorboard_layout(classified, tmp_path):
    where = classified.write_tensorboard(tmp_path, "run1")
    assert where == tmp_path / "run1" / "plugins" / "hlo_roofline"
    assert sorted(p.name for p in where.iterdir()) == ["report.csv", "report.json", "report.meta.json"]
    assert hr.Report.read(where / "report.csv").summary == classified.summary
    assert (
        hr.Report.read(tmp_path / "run1").summary == hr.Report.read(where / "report.json").summary
    )


def test_write_tensorboard_stays_in_the_logdir_and_is_readable_by_all(classified, tmp_path):
    for run in ("../x", "a/../../x", str(tmp_path.parent / "abs")):
        with pytest.raises(ValueError, match="outside the logdir"):
            classified.write_tensorboard(tmp_path / "logdir", run)
    assert not (tmp_path / "x").exists() and not (tmp_path.parent / "abs").exists()
    where = classified.write_tensorboard(tmp_path / "logdir", "a/../b")  # inside: allowed
    for name in ("report.csv", "report.json"):
        assert (where / name).stat().st_mode & 0o777 == 0o644


def test_rollup_sums_to_the_totals(classified):
    for by in ("source", "op_name"):
        rolled = classified.rollup(by)
        assert rolled.flops.sum() == pytest.approx(classified.ops.flops.sum())
        assert rolled.t_expected_s.sum() == pytest.approx(classified.summary["step_time_serial_s"])


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_plot(classified, tmp_path, suffix):
    path = classified.plot(tmp_path / f"roofline{suffix}")
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG") if suffix == ".png" else b"<svg" in data[:2000]
    svg = classified.plot(tmp_path / "r.svg").read_text()
    assert "roof" in svg


def test_roofline_wrapper_compiles_once_and_writes_the_report(tmp_path):
    compiles = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda name, *_, **__: (
            compiles.append(name) if name.endswith("backend_compile_duration") else None
        )
    )
    w, x = jnp.ones((128, 128)), jnp.ones((32, 128))
    jnp.zeros(1).block_until_ready()

    def train(w, x):
        return w - 0.1 * jax.grad(lambda w: jnp.sum((x @ w) ** 2))(w)

    # Judged on this machine: the analysis's compile is the one the calls run.
    step = hr.wrap_step(jax.jit(train), target="local", logdir=tmp_path, run="train", cache=False)
    before = len(compiles)
    for _ in range(3):
        w = step(w, x)
    assert len(compiles) - before == 1
    assert step.report is not None and step.report.summary["compiled_for"] == "local"
    assert hr.Report.read(tmp_path / "train").module == step.report.module

    # chip="v5e" on a CPU machine: compiled compile-only for a v5e (as analyze does), run here.
    def train_again(w, x):  # a new function: jax has not compiled it for this machine yet
        return train(w, x)

    step = hr.wrap_step(jax.jit(train_again), chip="v5e", cache=False)
    before = len(compiles)
    for _ in range(3):
        w = step(w, x)
    assert len(compiles) - before == 2
    assert step.report.summary["chip"] == "v5e" and step.report.summary["compiled_for"] == "v5e:2x2"


def test_xla_dump_directory_gives_one_report_per_module(tmp_path):
    code = "import jax, jax.numpy as jnp; jax.jit(lambda x: jnp.sin(x) @ x)(jnp.ones((16, 16)))"
    env = {
        "XLA_FLAGS": f"--xla_dump_to={tmp_path} --xla_dump_hlo_as_text",
        "JAX_PLATFORMS": "cpu",
        "PATH": "",
    }
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
    reports = hr.analyze_hlo(tmp_path)
    assert isinstance(reports, dict) and any("lambda" in k for k in reports)
    assert all(isinstance(r, hr.Report) for r in reports.values())


# -- f32 matmuls run at the rate their precision asks for -----------------------------------------


def _f32_dot_row(target: str, precision) -> pd.Series:
    x = jax.ShapeDtypeStruct((512, 1024), jnp.float32)
    w = jax.ShapeDtypeStruct((1024, 2048), jnp.float32)
    report = hr.analyze(
        lambda a, b: jnp.tanh(jnp.dot(a, b, precision=precision)), x, w, target=target
    )
    matmuls = report.ops[report.ops.mm_k > 0]
    assert len(matmuls) == 1, matmuls[["name", "opcode"]]
    return matmuls.iloc[0]


@pytest.mark.parametrize(
    "precision, level, rate",
    [(None, "default", "tf32"), ("high", "high", "tf32"), ("highest", "highest", "f32"),
     ("BF16_BF16_F32_X3", "dot_bf16_bf16_f32_x3", "bf16/3")],
)  # fmt: skip
def test_f32_dots_on_h100_run_at_tf32_unless_highest(precision, level, rate):
    """JAX computes f32 dots on NVIDIA tensor cores in TF32 unless asked for 'highest'."""
    row = _f32_dot_row("h100", precision)
    h100 = chips.get("h100")
    dtype, _, passes = rate.partition("/")
    peak = h100.rate(dtype).flops / int(passes or 1)
    assert row.precision == level
    assert row.t_compute_s == pytest.approx((row.flops + row.transcendentals) / peak)
    assert row.critical_intensity == pytest.approx(peak / h100.hbm_bandwidth)


@pytest.mark.parametrize(
    "precision, passes", [(None, 1), ("high", 3), ("highest", 6), ("BF16_BF16_F32_X6", 6)]
)
def test_f32_dots_on_tpu_take_one_three_or_six_bf16_passes(precision, passes):
    row = _f32_dot_row("v5e:2x2", precision)
    v5e = chips.get("v5e")
    work = row.flops + row.transcendentals
    assert row.t_compute_s == pytest.approx(work / (v5e.rate("bf16").flops / passes))


def test_cublas_precision_config_is_read():
    """A cuBLAS call says its precision in its backend config, not in operand_precision."""
    text = (FIXTURES / "mlp_f32" / "h100_cublas.hlo.txt").read_text()
    assert '"operand_precision":["DEFAULT","DEFAULT"]' in text
    default = hr.analyze_hlo(text, chip="h100").ops
    highest = hr.analyze_hlo(
        text.replace(
            '"operand_precision":["DEFAULT","DEFAULT"]', '"operand_precision":["DEFAULT","HIGHEST"]'
        ),
        chip="h100",
    ).ops
    gemms = default.opcode == "custom-call"
    assert gemms.sum() > 0
    assert set(default[gemms].precision) == {"default"} and set(highest[gemms].precision) == {
        "highest"
    }
    ratio = highest[gemms].t_compute_s.to_numpy() / default[gemms].t_compute_s.to_numpy()
    h100 = chips.get("h100")
    assert ratio == pytest.approx(h100.rate("tf32").flops / h100.rate("f32").flops)


def test_report_without_a_precision_column_still_classifies(classified):
    old = classified.ops.drop(columns=["precision"])
    ops, _ = verdict.classify(old, "h100")
    assert (ops.t_expected_s > 0).any()


def test_hint_names_the_contracting_size_when_no_row_count_helps():
    """8192×256 · 256×256: no M reaches the ridge (N·K too small), but a longer K does; from the K
    the hint names on, the model's own verdict is compute (below it, a K that fills whole MXU
    tiles is memory-bound)."""
    dot = row(hr.analyze_hlo(dot_module(8192, 256, 256), chip=V5E_BOOK), "dot")
    whole_tiles = int(dot.ridge_k) // 128 * 128
    below = row(hr.analyze_hlo(dot_module(8192, whole_tiles, 256), chip=V5E_BOOK), "dot")
    above = [
        row(hr.analyze_hlo(dot_module(8192, math.ceil(dot.ridge_k) + d, 256), chip=V5E_BOOK), "dot")
        for d in (0, 20, 200)
    ]
    assert dot.hint_reason == "ridge_k" and "no M reaches the ridge" in dot.hint
    assert f"K≈{dot.ridge_k:.0f} (K=256)" in dot.hint
    assert below.bound == "memory" and {a.bound for a in above} == {"compute"}


def _s8_matmul(batch: int, layout: str) -> str:
    return f"""HloModule r8
ENTRY %e (x: s8[{batch},4096], w: s8[4096,16384]) -> s8[{batch},16384] {{
  %x = s8[{batch},4096]{layout} parameter(0)
  %w = s8[4096,16384]{layout} parameter(1)
  ROOT %d = s8[{batch},16384]{layout} dot(%x, %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}
"""


@pytest.mark.parametrize("batch, bound", [(10, "memory"), (11, "compute")])
def test_r8_matmul_fed_from_vmem_is_compute_bound_past_batch_11(batch, bound):
    """The book's VMEM question: with the arrays in VMEM (S(1)) at 22x HBM, B > 10.96 is compute-bound."""
    r = row(hr.analyze_hlo(_s8_matmul(batch, "{1,0:S(1)}"), chip=V5E_BOOK), "d")
    assert r.vmem_bytes == r.bytes_accessed == batch * 4096 + 4096 * 16384 + batch * 16384
    assert r.bound == bound
    in_hbm = row(hr.analyze_hlo(_s8_matmul(batch, "{1,0}"), chip=V5E_BOOK), "d")
    assert in_hbm.vmem_bytes == 0 and in_hbm.bound == "memory"


def test_vmem_bytes_never_exceed_what_the_op_moves():
    """A slice of a VMEM array reads only the slice: vmem_bytes is capped by bytes_accessed."""
    text = """HloModule s
ENTRY %e (p: f32[1024,1024]) -> f32[8,1024] {
  %p = f32[1024,1024]{1,0:S(1)} parameter(0)
  ROOT %s = f32[8,1024]{1,0} slice(%p), slice={[0:8], [0:1024]}
}
"""
    r = row(hr.analyze_hlo(text, chip="v5e"), "s")
    assert 0 < r.vmem_bytes <= r.bytes_accessed == 2 * 8 * 1024 * 4


def test_vmem_roof_is_in_the_summary_and_the_plot(tmp_path):
    in_vmem = hr.analyze_hlo(_s8_matmul(11, "{1,0:S(1)}"), chip=V5E_BOOK)
    in_hbm = hr.analyze_hlo(_s8_matmul(11, "{1,0}"), chip=V5E_BOOK)
    assert in_vmem.summary["vmem_bandwidth"] == V5E_BOOK.bandwidth("vmem")
    assert in_hbm.summary["vmem_bandwidth"] is None
    assert in_vmem.plot(tmp_path / "vmem.svg").read_text().count("VMEM roof") == 1


FP32_ONLY = chips.Chip.custom("fp32-only", peak_flops={"f32": 1e12}, hbm_bandwidth=1e11)


@pytest.mark.parametrize(
    ("dtype", "chip"), [("s2", "v5e"), ("u1", "h100"), ("f6e3m2fn", "v5e"), ("s8", FP32_ONLY)]
)
def test_matmul_in_a_type_the_chip_has_no_rate_for_is_an_unknown_row_with_its_reason(dtype, chip):
    """Element types with no rate class (s2, u1, the 6-bit floats) or a chip with no fallback for
    the class: the row is flagged, says why, and keeps its memory time; nothing raises."""
    report = hr.analyze_hlo(dot_module(256, 512, 128, dtype, dtype, "s32"), chip=chip)
    dot = row(report, "dot")
    name = chips.get(chip).name if isinstance(chip, str) else chip.name
    assert dot.bound == "unknown"
    assert dot.hint_reason == "no_rate" and dot.note == ""
    assert dot.hint == f"compute time unknown: {name} has no rate for {dtype} matmuls"
    calibration = (chips.get(chip) if isinstance(chip, str) else chip).calibration
    floor = calibration.op_floor_s or 0.0  # per-op
    launch = calibration.launch_gap_s or 0.0  # a GPU kernel's launch gap, on top of its run
    assert dot.t_compute_s == 0 and dot.t_memory_s > 0
    assert dot.t_expected_s == pytest.approx(max(dot.t_memory_s, floor) + launch, rel=1e-12)
    assert report.summary["step_time_serial_s"] == pytest.approx(dot.t_expected_s)
    again = row(report.classify("v5p"), "dot")  # judged again: the old chip's reason goes
    assert again.hint == f"compute time unknown: TPU v5p has no rate for {dtype} matmuls" or (
        again.bound != "unknown" and again.hint_reason != "no_rate"
    )


@pytest.mark.parametrize("dtype", ["f4e2m1fn", "f8e8m0fnu", "c128", "s4", "u2"])
def test_every_element_type_gets_a_verdict_on_every_chip(dtype):
    for chip in chips.names():
        report = hr.analyze_hlo(dot_module(64, 64, 64, dtype, dtype, "f32"), chip=chip)
        assert row(report, "dot").bound in verdict.BOUNDS


def test_a_report_without_rows_has_no_host_dispatch():
    """The host dispatches a program that runs: a report with no rows (a sharded step the compiler
    refused keeps none) has no dispatch time, where the same program's rows have one on a GPU."""
    from hlo_roofline.report import Report

    whole = hr.analyze_file("fixtures/attention/h100.hlo.txt", chip="h100")
    assert whole.summary["host_dispatch_s"] > 0
    empty = Report(whole.ops.iloc[0:0].reset_index(drop=True), dict(whole.summary), whole.module)
    assert empty.classify("h100").summary["host_dispatch_s"] == 0


# An entry that takes no arguments and runs one of two branches, each of which takes one.
_NO_ARGUMENT_ENTRY = """HloModule no_arguments, entry_computation_layout={()->f32[1024]{0}}

%add_one (x: f32[1024]) -> f32[1024] {
  %x = f32[1024]{0} parameter(0)
  %one = f32[] constant(1)
  %ones = f32[1024]{0} broadcast(%one), dimensions={}
  ROOT %sum = f32[1024]{0} add(%x, %ones)
}

%double (y: f32[1024]) -> f32[1024] {
  %y = f32[1024]{0} parameter(0)
  ROOT %twice = f32[1024]{0} add(%y, %y)
}

ENTRY %main () -> f32[1024] {
  %which = pred[] constant(true)
  %zero = f32[] constant(0)
  %zeros = f32[1024]{0} broadcast(%zero), dimensions={}
  ROOT %picked = f32[1024]{0} conditional(%which, %zeros, %zeros), true_computation=%add_one, false_computation=%double
}
"""


def test_a_branchs_parameters_are_no_arguments_of_the_host():
    """The host's dispatch grows with the program's arguments, the entry's parameters: an entry
    that takes none passes none, though its branches' bodies have parameters of their own."""
    from hlo_roofline import chips

    report = hr.analyze_hlo(_NO_ARGUMENT_ENTRY, chip="h100")
    ops = report.ops
    assert (ops["opcode"] == "parameter").sum() >= 1  # the branches' parameters are rows
    assert report.summary["host_dispatch_s"] == chips.get("h100").calibration.dispatch_s
