"""``make demo``: the GPT training step, compiled compile-only for TPU v5e and NVIDIA H100, compared.

No accelerator and no network: libtpu and JAX's CUDA plugin compile for a target without one. Prints
both summaries side by side, where each part of the model spends its time on each chip, and the top
ops of each; writes CSV, JSON, a roofline PNG per chip and a TensorBoard logdir under ``out/demo``::

    python -m hlo_roofline.demo [--out DIR] [--cache DIR | --no-cache] [--top N]

The optimized HLO is cached in ``~/.cache/hlo_roofline/hlo`` (keyed by the lowered program, the
target and the compiler versions; see ``hlo_roofline.cache``), so a second run, and
the test suite, skip the compiles.
"""

from __future__ import annotations

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import sys
import time
from collections.abc import Sequence
from pathlib import Path

import click
import pandas as pd

from hlo_roofline import Report, chips, schema, targets  # targets before jax: see its docstring
from hlo_roofline._atomic import unwritable
from hlo_roofline.diff import flipped
from hlo_roofline.examples import analyze_example, default_cache_dir
from hlo_roofline.examples.gpt import CONFIG
from hlo_roofline.hlo.attribution import pass_of, scope_of
from hlo_roofline.judge import memory
from hlo_roofline.report import UNATTRIBUTED

EXAMPLE = "gpt"
# (run name, target, label): the chip is the target's.
RUNS = (("gpt_v5e", "v5e:2x2", "TPU v5e"), ("gpt_h100", "h100", "H100 SXM"))
DEFAULT_OUT = Path("out/demo")


def part_label(scope: str, pass_: str) -> str:
    """A row of the parts table: the named scope and, under autodiff, the pass."""
    scope = "(no named scope)" if scope == UNATTRIBUTED else scope
    return scope if pass_ == UNATTRIBUTED else f"{scope} ({pass_})"


def parts_table(reports: dict[str, Report], labels: dict[str, str]) -> pd.DataFrame:
    """Predicted time per model part on each chip, with the bound that dominates it: the report's
    rollup by named scope and pass (``report.rollup(["scope", "pass"])``)."""
    columns = {}
    for run, report in reports.items():
        rolled = report.rollup(["scope", "pass"])
        rolled.index = [part_label(scope, pass_) for scope, pass_ in rolled.index]
        columns[(labels[run], "ms")] = rolled["t_expected_s"] * 1e3
        columns[(labels[run], "share")] = rolled["share"]
        columns[(labels[run], "mostly")] = rolled["bound"]
    table = pd.DataFrame(columns).fillna({c: 0.0 for c in columns if c[1] != "mostly"})
    first = next(iter(labels.values()))
    return table.sort_values((first, "ms"), ascending=False)


def forward_matmul_ops(report: Report) -> pd.DataFrame:
    """The forward pass's matmuls (ops with matmul geometry, not of the backward pass), by op_name."""
    ops = report.ops
    forward = ops["op_name"].map(pass_of) != "backward"
    matmuls = ops[schema.matmul_rows(ops) & forward]
    return matmuls.drop_duplicates("op_name", keep=False).set_index("op_name")


def forward_matmuls(reports: dict[str, Report], labels: dict[str, str]) -> pd.DataFrame:
    """Each forward matmul of the model (one op per op_name) with its verdict on every chip.

    Forward matmuls have one op per JAX op_name on both compilers, so they line up across chips
    although XLA fuses differently for each; the backward pass has several per op_name.
    """
    columns: dict[tuple[str, str], pd.Series] = {}
    for run, report in reports.items():
        ops = forward_matmul_ops(report)
        label = labels[run]
        columns[(label, "op")] = ops["name"]
        columns[(label, "FLOP/B")] = ops["intensity"].map("{:.0f}".format)
        columns[(label, "ridge")] = ops["critical_intensity"].map("{:.0f}".format)
        columns[(label, "bound")] = ops["bound"]
    table = pd.DataFrame(columns).dropna()
    table.index = [_tail(name, 56) for name in table.index]
    return table


def verdict_flips(reports: dict[str, Report], labels: dict[str, str]) -> list[str]:
    """Sentences for the forward matmuls whose verdict flips between the chips (``diff.flipped``:
    as the diff counts a flip), with the numbers."""
    run_a, run_b = list(reports)[:2]
    paired = forward_matmul_ops(reports[run_a]).add_suffix("_a").join(
        forward_matmul_ops(reports[run_b]).add_suffix("_b"), how="inner"
    )
    lines = []
    for op_name, op in paired[flipped(paired)].iterrows():
        lines.append(
            f"{scope_of(op_name)}: {op['bound_a']}-bound on {labels[run_a]} ({op['intensity_a']:.0f} "
            f"FLOP/B vs ridge {op['critical_intensity_a']:.0f}, op {op['name_a']}), "
            f"{op['bound_b']}-bound on {labels[run_b]} ({op['intensity_b']:.0f} vs "
            f"{op['critical_intensity_b']:.0f}, op {op['name_b']})"
        )
    return lines


def _tail(text: str, width: int) -> str:
    return text if len(text) <= width else "…" + text[-(width - 1) :]


def summary_table(reports: dict[str, Report], labels: dict[str, str]) -> pd.DataFrame:
    rows = {}
    for run, report in reports.items():
        s = report.summary
        chip = chips.get(s["chip"])
        shares = s["time_share"]
        rows[labels[run]] = {
            "compiled for": s["compiled_for"],
            "ops": f"{len(report.ops)}",
            "FLOPs per step": f"{s['flops']:.4g}",
            "bytes per step (in VMEM)": (
                f"{s['bytes_accessed']:.4g} ({report.ops['vmem_bytes'].sum() / s['bytes_accessed']:.0%})"
            ),
            "bf16 peak, HBM bandwidth": (
                f"{chip.peak_flops('bf16') / 1e12:.0f} TFLOP/s, {chip.hbm_bandwidth / 1e12:.3g} TB/s"
            ),
            "ridge (bf16)": f"{chip.critical_intensity('bf16'):.0f} FLOP/B",
            "step time, bound (no run is faster)": f"{s['step_bound_s'] * 1e3:.2f} ms",
            "step time expected, as scheduled": f"{s['step_expected_s'] * 1e3:.2f} ms",
            "step time, no overlap": f"{s['step_time_upper_s'] * 1e3:.2f} ms",
            "ops one after another (Σ per op)": f"{s['step_time_serial_s'] * 1e3:.2f} ms",
            "communication exposed": (
                f"{s['exposed_comm_s'] * 1e3:.2f} of {s['comm_time_s'] * 1e3:.2f} ms"
            ),
            "MFU upper bound": f"{s['mfu_upper_bound']:.0%}",
            "MFU expected": f"{s['mfu_expected']:.0%}",
            "time compute / memory / comm": (
                f"{shares['compute']:.0%} / {shares['memory']:.0%} / {shares['communication']:.0%}"
            ),
            "coverage": f"{s['coverage']:.0%}",
            "HBM per device (fit)": (
                f"{fit['need_bytes'] / 1e9:.3g} of {fit['capacity_bytes'] / 1e9:.3g} GB "
                f"({memory.verdict_text(fit)})"
                if (fit := s.get("memory_fit"))
                else "—"
            ),
        }
    return pd.DataFrame(rows)


def top_ops(report: Report, n: int) -> pd.DataFrame:
    """The n ops with the largest predicted time, in readable units; op_name keeps its tail."""
    top = report.top(n)
    return pd.DataFrame(
        {
            "op": top["name"],
            "bound": top["bound"],
            "bound µs": (top["t_bound_s"] * 1e6).round(1),
            "expected µs": (top["t_expected_s"] * 1e6).round(1),
            "share": top["share"].map("{:.1%}".format),
            "FLOP/B": top["intensity"].map("{:.3g}".format),
            "ridge": top["critical_intensity"].map("{:.0f}".format),
            "op_name": top["op_name"].map(lambda s: _tail(s, 72)),
        }
    )


def run(out: Path = DEFAULT_OUT, cache: Path | None = None, top: int = 10) -> int:
    """Compile, print and write everything (see the module); ``cache=None`` compiles regardless.
    Returns the exit status: 2, with a one-line message, where ``out`` cannot be written."""
    out = Path(out)
    problem = unwritable(out)
    if problem:  # say so now, not after minutes of compiling
        print(f"error: cannot write to --out {out}: {problem}", file=sys.stderr)
        return 2
    pd.set_option("display.width", 200)

    c = CONFIG
    print(
        f"GPT training step (hlo_roofline/examples/gpt.py): {c.n_layers} layers scanned, d_model "
        f"{c.d_model}, {c.n_heads} heads, d_ff {c.d_ff}, vocab {c.vocab}, {c.batch}×{c.seq} "
        "tokens,\nbf16 params, AdamW with f32 moments. Compiled compile-only: no accelerator needed."
    )
    parsed = {run: targets.parse_target(target) for run, target, _ in RUNS}  # each read once
    for target in parsed.values():  # load libtpu and the CUDA plugin first: they log to stderr
        target.devices  # noqa: B018  (made for its side effect)
    reports: dict[str, Report] = {}
    labels = {}
    for run, _, label in RUNS:
        print(f"  compiling for {parsed[run].spec} ... ", end="", flush=True)
        start = time.perf_counter()
        reports[run] = analyze_example(EXAMPLE, parsed[run], cache_dir=cache)
        print(f"{time.perf_counter() - start:.1f} s, {len(reports[run].ops)} ops")
        labels[run] = label

    print("\n== Summary ==")
    print(summary_table(reports, labels).to_string())
    print("\n== Where the step goes, by part of the model (ms and share of the step per chip) ==")
    table = parts_table(reports, labels)
    print(table.to_string(float_format=lambda x: f"{x:.3g}", formatters=_share_formatters(table)))
    print("\n== Forward matmuls side by side: intensity against each chip's ridge ==")
    print(forward_matmuls(reports, labels).to_string())
    for line in verdict_flips(reports, labels):
        print(f"  verdicts differ: {line}")
    for report in reports.values():
        chip = report.summary["chip_name"]
        print(f"\n== Top {top} ops on {chip} ({report.summary['compiled_for']}) ==")
        print(top_ops(report, top).to_string(index=False))

    out.mkdir(parents=True, exist_ok=True)
    written = []
    for run, report in reports.items():
        csv_path, json_path = out / f"{run}.csv", out / f"{run}.json"
        report.to_csv(csv_path)
        report.to_json(json_path)
        png_path = report.plot(out / f"{run}.png", f"GPT training step on {labels[run]}")
        written += [csv_path, json_path, png_path, report.write_tensorboard(out, run)]
    print("\nWrote:")
    for path in written:
        print(f"  {path}")
    print("\nOpen the HLO Roofline tab in TensorBoard:")
    print(f"  tensorboard --logdir {out}")
    return 0


def _share_formatters(table: pd.DataFrame) -> dict:
    return {c: "{:.1%}".format for c in table.columns if c[1] == "share"}


@click.command(
    "demo",
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    short_help="Analyze the GPT example for v5e and H100.",
)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_OUT,
              show_default=True, help="Output directory: CSV, JSON, charts, TensorBoard.")  # fmt: skip
@click.option("--cache", "cache_dir", type=click.Path(file_okay=False, path_type=Path),
              default=None, show_default="the compile cache's folder",
              help="Optimized-HLO cache.")  # fmt: skip
@click.option("--no-cache", is_flag=True, help="Compile even if the optimized HLO is cached.")
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True,
              help="Ops listed per chip.")  # fmt: skip
def command(out: Path, cache_dir: Path | None, no_cache: bool, top: int) -> None:
    """Compile the GPT training step of hlo_roofline/examples/gpt.py compile-only for TPU v5e and
    H100, print both roofline tables side by side, and write CSV, JSON, charts and a TensorBoard
    logdir under --out.

    \b
    Example:
      $ hlo-roofline demo --out out/demo
    """
    try:
        cache = None if no_cache else cache_dir or default_cache_dir()
    except OSError as exc:  # $HLO_ROOFLINE_CACHE_DIR a URL: the cache is a local folder
        raise click.UsageError(f"--cache: {exc.strerror}: {exc.filename}") from None
    raise SystemExit(run(out, cache, top))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m hlo_roofline.demo [--out DIR] [--cache DIR | --no-cache] [--top N]``: the exit
    status, as :func:`run` returns it (2 for bad usage, with click's message)."""
    try:
        command.main(args=list(argv) if argv is not None else None, prog_name="hlo_roofline.demo")
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
