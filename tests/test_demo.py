"""``make demo`` end to end: it runs, writes its files, and its verdicts follow from the numbers.

The demo runs in-process with a temporary output directory; its compiles go through the same
optimized-HLO cache as tests/test_examples.py (see there), which compiles the same GPT programs. Not marked slow: the demo must run on the oldest supported JAX
too, so both environments of `make test` run it.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
from conftest import shared_cache_dir

from hlo_roofline import Report, chips, demo
from hlo_roofline.hlo.attribution import scope_of
from hlo_roofline.logdir import PLUGIN_NAME

RUNS = [run for run, _, _ in demo.RUNS]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory) -> tuple[int, str, Path]:
    out = tmp_path_factory.mktemp("demo")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = demo.main(["--out", str(out), "--cache", str(shared_cache_dir(tmp_path_factory))])
    return code, printed.getvalue(), out


@pytest.fixture(scope="module")
def reports(demo_run) -> dict[str, Report]:
    _, _, out = demo_run
    return {run: Report.read(out / f"{run}.json") for run in RUNS}


def test_demo_writes_every_output(demo_run):
    code, printed, out = demo_run
    assert code == 0
    for run in RUNS:
        for suffix in (".csv", ".json"):
            assert Report.read(out / f"{run}{suffix}").ops.shape[0] > 100
        assert (out / f"{run}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        plugin = out / run / "plugins" / PLUGIN_NAME
        assert json.loads((plugin / "report.json").read_text())["format"] == "hlo_roofline.report"
        assert Report.read(out / run).summary["chip"] == Report.read(out / f"{run}.json").chip
    assert printed.rstrip().endswith(f"tensorboard --logdir {out}")


def test_demo_compares_the_two_chips(demo_run, reports):
    _, printed, _ = demo_run
    assert {r.chip for r in reports.values()} == {"v5e", "h100-sxm"}
    assert "== Summary ==" in printed
    for label in ("TPU v5e", "H100 SXM"):
        assert printed.count(label) >= 3  # summary, parts and matmul tables


def test_printed_tables_list_attention_and_mlp_matmuls(demo_run):
    """The side-by-side matmul table names them by op_name, and the top-op tables show some."""
    _, printed, _ = demo_run
    matmul_rows = [line for line in printed.splitlines() if "dot_general" in line]
    for scope in ("attention/qkv", "attention/scores", "attention/context", "attention/out",
                  "mlp/up", "mlp/down"):  # fmt: skip
        assert any(scope in line for line in matmul_rows), scope
    top_tables = printed.split("== Top ")[1:]
    assert len(top_tables) == 2
    for table in top_tables:
        assert "attention/" in table and "dot_general" in table


def expected_bound(op, chip) -> str:
    """Compute- or memory-bound from the op's numbers and the chip's ridge for its dtype alone; on
    a TPU the MXU pads N and K to its width (head_dim 64 on a 128-wide MXU does twice the work)."""
    chip = chips.get(chip)
    ridge = chip.critical_intensity(op["dtype"])
    padding = 1.0
    if chip.mxu:
        width = chip.mxu[0]
        n, k = int(op["mm_n"]), int(op["mm_k"])
        padding = (-(-n // width) * width) * (-(-k // width) * width) / (n * k)
    return "compute" if op["intensity"] * padding >= ridge else "memory"


@pytest.mark.filterwarnings("ignore::hlo_roofline.chips.RateFallbackWarning")
def test_verdicts_differ_where_the_numbers_say_they_must(demo_run, reports):
    """Each forward matmul's verdict on each chip is what its intensity and that chip's ridge give
    (the bound's: no calibrated rate, such as v5e's vector loop, enters a verdict); where those
    give different verdicts on v5e and H100, the reports differ, and some do."""
    tpu, gpu = reports["gpt_v5e"], reports["gpt_h100"]
    ridges = [chips.get(r.chip).critical_intensity("bf16") for r in (tpu, gpu)]
    assert ridges[0] < ridges[1]  # 240.5 vs 295.2: a matmul in between flips
    a, b = demo.forward_matmul_ops(tpu), demo.forward_matmul_ops(gpu)
    common = a.index.intersection(b.index)
    assert len(common) >= 7  # qkv, scores, context, out, up, down, logits
    must_differ = []
    for op_name in common:
        x, y = a.loc[op_name], b.loc[op_name]
        want = expected_bound(x, tpu.chip), expected_bound(y, gpu.chip)
        assert (x["bound"], y["bound"]) == want, op_name
        if want[0] != want[1]:
            must_differ.append(op_name)
    assert must_differ, "no forward matmul whose numbers put it on different sides of the ridges"
    printed = [line for line in demo_run[1].splitlines() if "verdicts differ:" in line]
    assert len(printed) == len(must_differ)
    for op_name in must_differ:
        part = scope_of(op_name)
        assert any(f"verdicts differ: {part}:" in line for line in printed), part


def test_parts_table_is_the_rollup_by_scope_and_pass(demo_run, reports):
    """The parts table is each report's rollup by named scope and pass: every part of the model
    (examples/gpt.py's scopes) forward and backward, the layer scan's stacking, the optimizer
    outside any scope, and the times add up to the step."""
    table = demo.parts_table(reports, {run: run for run in reports})
    for scope in ("attention/qkv", "attention/scores", "attention/context", "attention/out",
                  "mlp/up", "mlp/down", "logits"):  # fmt: skip
        for pass_ in ("forward", "backward"):
            assert f"{scope} ({pass_})" in table.index, (scope, pass_)
    assert "(no named scope)" in table.index  # the AdamW update
    for pass_ in ("forward", "backward"):  # the layer scan writing and reading its stacked buffers
        assert f"(scan stacking) ({pass_})" in table.index
    for run, report in reports.items():
        assert table[(run, "ms")].sum() == pytest.approx(report.summary["step_time_serial_s"] * 1e3)
    printed = demo_run[1].split("by part of the model")[1]
    assert "mlp/up (backward)" in printed and "(no named scope)" in printed
