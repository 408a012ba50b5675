"""Fit the chip database's measured calibrations from the committed fixtures, and print each fit's
residuals: ``python -m hlo_roofline.calibrate`` (``--write`` puts the values in
``data/chips.toml``; ``tests/test_calibrate.py`` holds the file to what this computes).

What it fits, each on a named half of its fixtures (the other half held out, reported here and
checked in ``tests/test_measured_gpu.py`` and ``tests/test_published.py``):

- the H100's and H200's calibration, each card on its own traces of :data:`GPU_FITTING`
  (``fixtures/measured_gpu``, its README names the half): ``matmul_efficiency`` and
  ``memory_efficiency``, the median share of the bound (``efficiency``) that the large library
  GEMMs and the large memory-bound ops reached, ``occupancy_bandwidth``, the same share per unit of
  occupancy of the kernels XLA generates that keep at most :data:`OCCUPANCY_LIMITED` of the SM's
  warps resident (layernorm's), and ``op_floor``, on the micro-benchmarks (:data:`GPU_MICRO`);
  ``kernel_efficiency`` (cuDNN's flash attention), ``conv_efficiency`` and
  ``conv_narrow_efficiency`` (cuDNN's convolutions), time-weighted over the one program that holds
  them, and ``launch_gap``, the decode loop's idle stream between its kernels per kernel run
  (:data:`GPU_CLASS_FITTING`); ``dispatch`` and ``dispatch_per_argument``, the host's time
  before a step's first kernel and after its last, as a line over the program's arguments, on
  all of them (:func:`dispatch_fits`); the training steps are held out (:data:`GPU_HELD_OUT`);
- ``calibrated.matmul_efficiency`` of TPU v4: the share of the MXU peak at which the expected step
  of MaxText's published ``v4_22b`` (:data:`PUBLISHED_FITTING`, ``fixtures/published``) equals
  its measured step.

- ``calibrated.dcn_efficiency`` and ``calibrated.dcn_step`` of the TPUs with a DCN figure: the share
  of the DCN egress a multi-slice transfer reaches and the time each step of its ring over the
  slices adds, at which the expected step of MaxText's v5e 16B grows from 1 slice to 2 and to 32
  as its published table does (:data:`DCN_FITTING`; the 4, 8 and 16 slices are held out, as
  are v5e 128B on 2 to 32 slices and the other chips' two-slice configs). One data-centre network
  and one megascale runtime: the same two numbers on every TPU.

- XLA:TPU's charges on v5e, v5p, v6e and 7x, read off ``fixtures/tpu_estimates`` by the
  arithmetic each number's note writes out (:func:`tpu_fits`; ``_LOOP_FIT_POINT`` the program
  each loop rate is read from), rounded as the note says (to the stored digits, down where a
  lower charge is the safe side, up for a rate); the held-out programs are checked in
  ``tests/test_tpu_estimates.py``. The pass counts (``*_passes``, ``loop_reads``) are chosen
  against the fitting set, not fitted: printed, not refitted.
- ``calibrated.depthwise_taps``, ``expanded_elements``, ``sublane_fold``, ``folded_product``
  and ``relayout`` of v5e, v5p, v6e and 7x (a mechanism's rate each: a depthwise conv's taps, an
  array a fusion expands and folds in blocks, the result of one folded in column strips, a
  matmul's product its fusion folds, a lane-moving copy's elements in HBM), on the fit
  half of the generated corpus ``fixtures/tpu_heldout`` (:func:`heldout_fits`); its report half is
  held out, checked in ``tests/test_tpu_heldout.py``.
"""

from __future__ import annotations

import dataclasses
import gzip
import importlib.util
import json
import math
import re
import statistics
import sys
import tempfile
import warnings
from collections.abc import Callable
from functools import cache
from pathlib import Path

import numpy as np

from hlo_roofline import chips, schema
from hlo_roofline.judge import compute, time_model

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
CARDS = {"h100": "h100-sxm", "h200": "h200"}
# The measured GPU programs each card's fits read (fixtures/measured_gpu/README.md): the
# micro-benchmarks (its GEMMs' and streams' efficiencies, per-op floor and step dispatch), and one
# program for each effect they hold none of: cuDNN's flash attention, cuDNN's convolutions, and a
# step of many small kernels (a decode loop: the launch gap). The training steps and the attention
# written out (and MaxText's published A3 configs) are held out.
GPU_MICRO = ("matmul_sweep", "matmul_8192", "fp8_matmul", "f32_add", "layernorm", "softmax")
GPU_CLASS_FITTING = {
    "kernel_efficiency": "attention_cudnn",
    "conv_efficiency": "convnet_step",
    "conv_narrow_efficiency": "convnet_step",
    "launch_gap": "kv_decode",
}
GPU_FITTING = (*GPU_MICRO, *dict.fromkeys(GPU_CLASS_FITTING.values()))
GPU_HELD_OUT = ("gpt_step", "gpt_step_graphs", "nnx_lm_step", "attention_block")
# The published configs a fit reads (one slice); the two-slice configs are held out.
PUBLISHED_FITTING = {"v4": "v4_22b"}
# The multi-slice config and the slice counts the DCN fit reads (fixtures/published/predict.py's
# SLICES: MaxText's published TFLOP/s per chip on each count, its 1-slice config beside it).
DCN_FITTING = ("v5e_16b", "v5e_16b_x2", (2, 32))
DCN_CHIPS = ("v4", "v5e", "v5p", "v6e", "7x")  # the TPUs with a DCN egress figure
LARGE_RUN_S = 50e-6  # an op's bound time per run large enough to measure its rate
# An occupancy at or below which a kernel XLA generates keeps too few loads in flight for the
# streams' rate (judge.time_model.occupancy_limited): its rows fit occupancy_bandwidth, the others
# memory_efficiency. No fitting kernel between a quarter and all of the SM's warps reached less
# than the streams' share.
OCCUPANCY_LIMITED = 0.5
SMALL_RUN_S = 2e-6  # an op's bound time per run far below what launching a kernel takes
DIGITS = 3  # significant digits a fitted value is written with


@dataclasses.dataclass(frozen=True)
class Fit:
    """One calibrated number: its chip, its key in ``[calibrated]``, its value, and the ratios
    of what it fits (each fitting sample's own value, or expected ÷ measured)."""

    chip: str
    key: str
    value: float
    fitted_on: str
    residuals: tuple[float, ...]


def _round(x: float) -> float:
    return float(f"{x:.{DIGITS}g}")


@cache
def gpu_reports(card: str, case: str):
    """The measured report of one trace of ``fixtures/measured_gpu`` (judged on its card)."""
    from hlo_roofline import read_trace

    folder = Path(tempfile.mkdtemp(prefix="hlo_roofline_calibrate_"))
    path = folder / case / f"{case}.xplane.pb"
    path.parent.mkdir(parents=True)
    source = FIXTURES / "measured_gpu" / card / f"{case}.xplane.pb.gz"
    path.write_bytes(gzip.decompress(source.read_bytes()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return read_trace(path)


def _large(ops, kind: str):
    """The large ops of one class with a measured efficiency: library GEMMs bound by compute
    (``matmul``), memory-bound ops (``memory``) less those whose occupancy limits their rate
    (``occupancy``: :func:`_occupancy_limited`). cuDNN's convolutions are a class of their own."""
    per_run = ops["t_bound_s"] / ops["count"]
    large = ops[(per_run >= LARGE_RUN_S) & ops["efficiency"].notna()]
    conv = large["name"].str.startswith("cudnn-conv")
    if kind == "matmul":
        library = large["name"].str.contains("gemm|custom-call|matmul") & ~conv
        return large[library & large["bound"].eq("compute")]
    memory = large[large["bound"].eq("memory") & ~conv]
    limited = _occupancy_limited(memory)
    return memory[limited if kind == "occupancy" else ~limited]


def _occupancy_limited(ops):
    """The rows whose kernels keep too few loads in flight for the streams' rate (at most
    :data:`OCCUPANCY_LIMITED` of the SM's warps, in a kernel XLA generates)."""
    occupancy = time_model.occupancy_limited(ops)
    return (occupancy > 0) & (occupancy <= OCCUPANCY_LIMITED)


def gpu_fits(card: str) -> list[Fit]:
    """The card's calibration: its GEMMs', streams' and smallest kernels' rates over the
    micro-benchmarks, each kernel class of its own and the launch gap on its one program."""
    found = []
    for kind in ("matmul", "memory"):
        seen = [
            e
            for case in GPU_MICRO
            for e in _large(gpu_reports(card, case).model_frame(), kind)["efficiency"]
        ]
        value = _round(statistics.median(seen))
        found.append(Fit(CARDS[card], f"{kind}_efficiency", value, "fixtures/measured_gpu",
                         tuple(e / value for e in seen)))  # fmt: skip
    small = []  # what a kernel far below any roof took a run: launch and drain
    for case in GPU_MICRO:
        ops = gpu_reports(card, case).model_frame()
        timed = ops[(ops["measured_s"] > 0) & (ops["t_bound_s"] > 0) & (ops["count"] > 0)]
        tiny = timed[timed["t_bound_s"] / timed["count"] < SMALL_RUN_S]
        small += list(tiny["measured_s"] / tiny["count"])
    value = float(f"{statistics.median(small):.2g}")
    found.append(Fit(CARDS[card], "op_floor", value, "fixtures/measured_gpu",
                     tuple(t / value for t in small)))  # fmt: skip
    for key, rows in KERNEL_CLASSES.items():
        ops = rows(gpu_reports(card, GPU_CLASS_FITTING[key]).model_frame())
        ops = ops[ops["efficiency"].notna()]
        # time-weighted: the share of the bound the class's kernels reached together
        value = _round(ops["t_bound_s"].sum() / ops["measured_s"].sum())
        found.append(Fit(CARDS[card], key, value, "fixtures/measured_gpu",
                         tuple(e / value for e in ops["efficiency"])))  # fmt: skip
    limited = [
        row.efficiency / row.occupancy
        for case in GPU_MICRO
        for row in _large(gpu_reports(card, case).model_frame(), "occupancy").itertuples()
    ]
    if limited:  # the share of the bandwidth per unit of occupancy (Little's law)
        value = _round(statistics.median(limited))
        found.append(Fit(CARDS[card], "occupancy_bandwidth", value, "fixtures/measured_gpu",
                         tuple(e / value for e in limited)))  # fmt: skip
    return found + _launch_fits(card) + dispatch_fits(card)


def _fused_kernels(ops):
    """Custom kernels whose matrix work is priced from their shapes (cuDNN's flash attention)."""
    return ops[ops["kernel_mxu_flops"] > 0]


def _convolutions(ops, narrow: bool):
    """cuDNN's convolutions of one class (:func:`~hlo_roofline.judge.time_model.cudnn_convolutions`):
    the narrow ones, or the rest."""
    conv, narrows = time_model.cudnn_convolutions(ops)
    return ops[narrows if narrow else conv & ~narrows]


KERNEL_CLASSES = {
    "kernel_efficiency": _fused_kernels,
    "conv_efficiency": lambda ops: _convolutions(ops, narrow=False),
    "conv_narrow_efficiency": lambda ops: _convolutions(ops, narrow=True),
}


@dataclasses.dataclass(frozen=True)
class Timeline:
    """Where one measured step's time went that no kernel covers, read off its trace: the
    host's dispatch (from the step's start to its first kernel, and from its last kernel's end
    to the step's end), the stream's idle time between its kernels, the kernel runs the model
    gives a launch gap (:func:`~hlo_roofline.judge.time_model.kernel_runs`, times their count)
    and the program's arguments (:func:`~hlo_roofline.judge.time_model.entry_arguments`)."""

    dispatch_s: float
    idle_s: float
    runs: float
    arguments: int


@cache
def timeline(card: str, case: str) -> Timeline:
    """The :class:`Timeline` of one trace of ``fixtures/measured_gpu`` (its one step)."""
    from hlo_roofline import xplane
    from hlo_roofline.measured import trace

    raw = gzip.decompress((FIXTURES / "measured_gpu" / card / f"{case}.xplane.pb.gz").read_bytes())
    planes = xplane.parse_space(raw)
    (step,) = (e for steps in trace.step_windows(planes).values() for e in steps.events)
    spans = sorted(
        (e.start_ps, e.end_ps or e.launch_end_ps)
        for e in trace.op_events(planes, trace.programs(planes))
        if e.device.startswith("/device:") and step.start_ps <= e.start_ps <= step.end_ps
    )
    idle, end = 0, spans[0][0]
    for start, stop in spans:  # the stream's gaps between kernels (overlapping runs cover both)
        idle += max(start - end, 0)
        end = max(end, stop)
    ops = gpu_reports(card, case).ops
    runs = ops[time_model.kernel_runs(ops, ops["t_bound_s"].to_numpy(dtype=float))]["count"]
    arguments = int(time_model.entry_arguments(ops).sum())
    head, tail = spans[0][0] - step.start_ps, step.end_ps - end
    return Timeline((head + tail) * 1e-12, idle * 1e-12, float(runs.sum()), arguments)


def step_as_measured(report) -> float:
    """The expected step of a report as ``measure`` runs it (each step waits for its outputs):
    ``step_expected_s`` and the host's dispatch of the step
    (:meth:`~hlo_roofline.judge.time_model.GpuTimeModel.dispatch`), what its measured step is
    held to."""
    return report.summary["step_expected_s"] + report.summary["host_dispatch_s"]


def dispatch_fits(card: str) -> list[Fit]:
    """The host's dispatch of a step: a time per step and one per argument, the least-squares
    line through each fitting program's dispatch over its argument count (the micro-benchmarks'
    one to twenty arguments, the convnet's 76)."""
    seen = [timeline(card, case) for case in GPU_FITTING]
    n = len(seen)
    mean_x = sum(t.arguments for t in seen) / n
    mean_y = sum(t.dispatch_s for t in seen) / n
    slope = sum((t.arguments - mean_x) * (t.dispatch_s - mean_y) for t in seen) / sum(
        (t.arguments - mean_x) ** 2 for t in seen
    )
    per_step = float(f"{mean_y - slope * mean_x:.2g}")
    per_argument = float(f"{slope:.2g}")
    residuals = tuple((per_step + per_argument * t.arguments) / t.dispatch_s for t in seen)
    return [
        Fit(CARDS[card], "dispatch", per_step, "fixtures/measured_gpu", residuals),
        Fit(CARDS[card], "dispatch_per_argument", per_argument, "fixtures/measured_gpu",
            residuals),
    ]  # fmt: skip


def _launch_fits(card: str) -> list[Fit]:
    """The launch gap per kernel run: the decode loop's (hundreds of kernel runs a step) idle
    stream between its kernels, per kernel run."""
    seen = timeline(card, GPU_CLASS_FITTING["launch_gap"])
    launch = float(f"{seen.idle_s / seen.runs:.2g}")
    residual = seen.idle_s / seen.runs / launch
    return [Fit(CARDS[card], "launch_gap", launch, "fixtures/measured_gpu", (residual,))]


@cache
def _published():
    spec = importlib.util.spec_from_file_location(
        "published_predict", FIXTURES / "published" / "predict.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def published_step(name: str, chip: chips.Chip) -> tuple[float, float]:
    """(the expected step of a published config on ``chip``, its measured step)."""
    module = _published()
    rec = module.record(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        judged = _published_plain(name).classify(chip)
    measured = rec["tflops_training_per_device"]["total"] / float(rec["published"]["tflops"])
    return float(judged.summary["step_expected_s"]), measured


@cache
def _published_plain(name: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _published().report(name)


def _solve(f: Callable[[float], float], low: float, high: float, steps: int = 14) -> float:
    """The x in [low, high] where the decreasing ``f`` crosses 0 (bisection)."""
    for _ in range(steps):
        mid = (low + high) / 2
        low, high = (mid, high) if f(mid) > 0 else (low, mid)
    return (low + high) / 2


def published_fits() -> list[Fit]:
    """Each chip's matmul efficiency at which its fitting config's expected step is measured."""
    found = []
    for key, name in PUBLISHED_FITTING.items():
        base = chips.get(key)
        if _published().chip(name).key != key:
            raise ValueError(f"{name} is not measured on {key}")

        def at(efficiency: float, base=base) -> chips.Chip:
            calibration = dataclasses.replace(base.calibration, matmul_efficiency=efficiency)
            return dataclasses.replace(base, calibration=calibration)

        def excess(efficiency: float, name=name, at=at) -> float:  # measured − expected
            expected, measured = published_step(name, at(efficiency))
            return measured - expected

        value = _round(_solve(lambda e: -excess(e), 0.2, 1.0))
        expected, measured = published_step(name, at(value))
        found.append(Fit(key, "matmul_efficiency", value, "fixtures/published",
                         (expected / measured,)))  # fmt: skip
    return found


def dcn_loss(efficiency: float, step_s: float, slices: int) -> tuple[float, float]:
    """(expected, measured) step of :data:`DCN_FITTING`'s config on ``slices`` slices over its
    step on one, at a DCN efficiency and ring step time."""
    one, many, _ = DCN_FITTING
    module = _published()
    base = module.chip(one)
    calibration = dataclasses.replace(
        base.calibration, dcn_efficiency=efficiency, dcn_step_s=step_s
    )
    chip = dataclasses.replace(base, calibration=calibration)
    alone = published_step(one, base)[0]  # one slice: no DCN transfer to calibrate
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = _published_plain(many)
        if slices != module.record(many)["num_slices"]:
            program = module.over_slices(program, slices)
        expected = float(program.classify(chip).summary["step_expected_s"])
    measured = module.measured_step(many, slices) / module.measured_step(one)
    return expected / alone, measured


def dcn_fits() -> list[Fit]:
    """The DCN efficiency that gives the fitting config's loss on its fewest slices, with the
    ring step time that gives it on its most (each solved with the other: the step time hardly
    moves two slices, the efficiency hardly moves the 32 ring steps' part). Stored on every
    TPU with a DCN egress figure."""
    few, most = DCN_FITTING[2]

    def efficiency_at(step_s: float) -> float:
        def excess(e: float) -> float:  # measured − expected loss: grows with the efficiency
            expected, measured = dcn_loss(e, step_s, few)
            return measured - expected

        return _solve(lambda e: -excess(e), 0.02, 1.0, steps=10)

    def short(step_s: float) -> float:  # measured − expected loss on the most slices
        expected, measured = dcn_loss(efficiency_at(step_s), step_s, most)
        return measured - expected

    step_s = _round(_solve(short, 0.0, 2e-4, steps=10))
    efficiency = _round(efficiency_at(step_s))
    residuals = []
    for slices in DCN_FITTING[2]:
        expected, measured = dcn_loss(efficiency, step_s, slices)
        residuals.append(expected / measured)
    return [
        Fit(chip, key, value, "fixtures/published", tuple(residuals))
        for chip in DCN_CHIPS
        for key, value in (("dcn_efficiency", efficiency), ("dcn_step", step_s))
    ]


TPU_CHIPS = ("v5e", "v5p", "v6e", "7x")
# The fixtures/tpu_estimates program whose loop fusion each chip's loop rate is read from.
_LOOP_FIT_POINT = {"v5e": "convert_reduce_fusion", "v5p": "convert_reduce_fusion",
                   "v6e": "fusion.4", "7x": "convert_reduce_fusion"}  # fmt: skip


def _tpu_ops(chip: str, program: str):
    """The ops of one fixture of ``fixtures/tpu_estimates`` with XLA's estimate, judged on ``chip``."""
    from hlo_roofline import analyze_hlo

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        text = (FIXTURES / "tpu_estimates" / f"{program}.{chip}.hlo.txt").read_text()
        ops = analyze_hlo(text).classify(chip).model_frame()
    return ops[ops["xla_estimate_s"].notna()]


def _stored(chip: str, key: str) -> tuple[str, str] | None:
    """A calibrated leaf's value as written in data/chips.toml, and its note."""
    found = chips.get(chip).sources.get(f"calibrated.{key}")
    if found is None:
        return None
    header = f"[chips.{chip}.calibrated]\n"
    text = chips.DATA_FILE.read_text()
    section = text[text.index(header) :]
    m = re.search(rf"^{key} = \{{[^\n]*?value = ([^,]+),", section, re.M)
    return (m[1], found.note) if m else None


def _rounded(raw: float, chip: str, key: str) -> float:
    """``raw`` to the stored value's significant digits, in the direction its note says."""
    stored = _stored(chip, key)
    if stored is None:
        return raw
    text, note = stored
    mantissa = text.lower().split("e")[0].replace("-", "").replace(".", "").lstrip("0")
    digits = max(len(mantissa), 1)
    exponent = math.floor(math.log10(abs(raw))) - digits + 1
    scaled = raw / 10**exponent
    if "rounded down" in note:
        scaled = math.floor(scaled + 1e-9)
    elif "rounded up" in note:
        scaled = math.ceil(scaled - 1e-9)
    else:
        scaled = round(scaled)
    return float(f"{scaled * 10**exponent:.{digits}g}")


def tpu_fits(chip: str) -> list[Fit]:
    """XLA:TPU's charges on ``chip``, each from its one fitting program's estimate."""
    device = chips.get(chip).per_device()
    spec = chips.get(chip)
    per_core = (spec.devices_per_chip or 1) / spec.cores.get("tensorcore", 1)  # device → one core
    raw: dict[str, float] = {}
    ops = _tpu_ops(chip, "matmul_b8192")
    row = ops[schema.matmul_rows(ops)].iloc[0]
    mxu = 2 * 8192 * 4096 * 4096 / device.flops["bf16"]
    raw["tile_step"] = (row["xla_estimate_s"] - mxu) / row["tile_steps"]
    ops = _tpu_ops(chip, "layernorm")
    row = ops[ops["name"] == _LOOP_FIT_POINT[chip]].iloc[0]
    raw["loop_elements"] = row["vector_elements"] / row["xla_estimate_s"] * per_core
    ops = _tpu_ops(chip, "zeros_f32")
    row = ops.loc[ops["vector_elements"].idxmax()]
    raw["fill"] = row["vector_elements"] / row["xla_estimate_s"] * per_core
    ops = _tpu_ops(chip, "softmax_long")
    row = ops[(ops["opcode"] == "reduce") & (ops["lane_reduced_elements"] > 0)].iloc[0]
    raw["lane_reduce"] = row["lane_reduced_elements"] / row["xla_estimate_s"] * per_core
    ops = _tpu_ops(chip, "lm_head")
    row = ops[schema.matmul_rows(ops)].iloc[0]
    streamed = row["bytes_accessed"] - row["vmem_bytes"]
    raw["matmul_stream"] = streamed / row["xla_estimate_s"] * (spec.devices_per_chip or 1)
    ops = _tpu_ops(chip, "dispatch_mask")
    rows = ops[ops["major_reduce_results"] > 0]
    if _stored(chip, "major_reduce") and len(rows):
        raw["major_reduce"] = (
            rows["major_reduce_results"].sum() / rows["xla_estimate_s"].sum() * per_core
        )
    ops = _tpu_ops(chip, "decode_scores_max")
    rows = ops[ops["reduced_stream_words"] > 0] if "reduced_stream_words" in ops else ops[:0]
    if _stored(chip, "reduced_stream") and len(rows):
        row = rows.iloc[0]
        raw["reduced_stream"] = row["reduced_stream_words"] / row["xla_estimate_s"] * per_core
    least = min(
        float(_tpu_ops(chip, p.name.split(".")[0])["xla_estimate_s"].min())
        for p in (FIXTURES / "tpu_estimates").glob(f"*.{chip}.hlo.txt")
    )
    raw["op_floor"] = least
    found = []
    for key, value in raw.items():
        stored = _rounded(value, chip, key)
        found.append(Fit(chip, key, stored, "fixtures/tpu_estimates", (value / stored,)))
    return found


HELDOUT = FIXTURES / "tpu_heldout"  # the generated corpus: fit half here, report half held out


def heldout_programs(half: str) -> list[str]:
    """The names of ``fixtures/tpu_heldout``'s programs in one half (``fit`` or ``report``), as
    its manifest records the seeded split."""
    manifest = json.loads((HELDOUT / "manifest.json").read_text())
    return sorted(n for n, e in manifest.items() if not n.startswith("_") and e["half"] == half)


def _heldout_ops(chip: str, program: str):
    from hlo_roofline import analyze_hlo

    text = gzip.decompress((HELDOUT / f"{program}.{chip}.hlo.txt.gz").read_bytes()).decode()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ops = analyze_hlo(text).classify(chip).model_frame()
    return ops[ops["xla_estimate_s"].notna()]


SPREAD_LIMIT = 0.5  # the slowest fitting op's rate ÷ the fastest's a single fitted rate allows


def heldout_fits(chip: str) -> list[Fit]:
    """The charges fitted on the fit half of ``fixtures/tpu_heldout`` (the report half is never
    read here), each over every fit-half op its mechanism's column marks, whatever its program:

    - ``depthwise_taps``: the multiply-adds per second per TensorCore at which XLA charges an
      op holding a depthwise convolution its taps;
    - ``expanded_elements``: the elements per second per TensorCore XLA charges an array a fusion
      expands and folds inside itself, over the expansions ``sublane_fold`` does not charge
      (the expected model charges each expansion by one of the two);
    - ``sublane_fold``: the result elements per second per TensorCore XLA charges a fusion that
      folds an expansion's sublanes in a loop tiled into column strips (its charge follows the
      result, not the expansion: cost/intermediates.py).
    - ``folded_product``: the product elements per second per TensorCore XLA charges a matmul
      fusion that folds its own product (attention's scores and their row max: cost/tpu/units.py);
    - ``relayout``: the elements per second per TensorCore XLA charges a copy that moves its
      lanes, per element (its tiles' padding included) of each side in HBM (cost/tpu/units.py).

    A chip whose fit-half ops imply rates more than 2x apart gets none (``SPREAD_LIMIT``: one
    rate would leave some of them below half XLA's estimate). Each is the fastest rate any
    fit-half op implies (the least charge: the expected model is not to go above XLA's estimate
    on an op the fit saw), rounded up; the residuals printed are each op's rate ÷ the fit (≤ 1)."""
    spec = chips.get(chip)
    per_core = (spec.devices_per_chip or 1) / spec.cores.get("tensorcore", 1)
    counted: dict[str, list[tuple[float, float]]] = {
        "depthwise_taps": [], "expanded_elements": [], "sublane_fold": [], "folded_product": [],
        "relayout": [],
    }
    for program in heldout_programs("fit"):
        if chip not in _heldout_chips(program):
            continue
        ops = _heldout_ops(chip, program)
        rows = ops[ops["depthwise_taps"] > 0]
        counted["depthwise_taps"] += list(
            zip(rows["depthwise_taps"], rows["xla_estimate_s"], strict=True)
        )
        rows = ops[ops["expanded_elements"] > 0]
        by_fold = rows["sublane_fold_results"] > 0
        counted["expanded_elements"] += list(
            zip(rows["expanded_elements"][~by_fold], rows["xla_estimate_s"][~by_fold], strict=True)
        )
        counted["sublane_fold"] += list(
            zip(rows["sublane_fold_results"][by_fold], rows["xla_estimate_s"][by_fold],
                strict=True)
        )  # fmt: skip
        for key, column in (("folded_product", "folded_product_elements"),
                            ("relayout", "relaid_elements")):  # fmt: skip
            rows = ops[ops[column] > 0]
            counted[key] += list(zip(rows[column], rows["xla_estimate_s"], strict=True))
    found = []
    for key, samples in counted.items():
        if not any(s > 0 for _, s in samples):
            continue
        value = _round_up(max(a / s for a, s in samples if s > 0) * per_core)  # least charge
        residuals = tuple(a / s * per_core / value for a, s in samples if s > 0)
        if min(residuals) < SPREAD_LIMIT:  # no one rate: the mechanism is not this chip's charge
            continue
        found.append(Fit(chip, key, value, "fixtures/tpu_heldout", residuals))
    return found + weight_load_fits(chip)


def weight_load_fits(chip: str) -> list[Fit]:
    """``weight_load`` and ``weight_load_overhead``, fitted on the fit half of
    ``fixtures/tpu_heldout`` alone: the held weight elements per second per TensorCore and the
    time per op at which XLA charges a matmul loading its weights into the MXUs
    (:func:`hlo_roofline.judge.compute.weight_loads`: load + overhead, whatever M).

    Two numbers, so the least charge is a line, not a rate: the line under every fit-half matmul
    (``held / rate + overhead ≤`` its estimate, per execution, whatever its program) that is
    highest on them (the sum of each op's charge ÷ its estimate), the rate and overhead ≥ 0;
    found among the lines through two ops' points or one and an axis (a linear programme in two
    unknowns). The residuals printed are each weight-bound op's charge ÷ its estimate (weights in
    VMEM, and too few rows for the MXU's time to pass the load's at the fitted rate: the ops the
    load sets), ≤ 1. None where the fit half has no matmul."""
    spec = chips.get(chip)
    device = spec.per_device()
    per_core = (spec.devices_per_chip or 1) / spec.cores.get("tensorcore", 1)
    held, xla, rows_streamed, in_vmem = [], [], [], []
    for program in heldout_programs("fit"):
        if chip not in _heldout_chips(program):
            continue
        ops = _heldout_ops(chip, program)
        weights = compute.held_weight_elements(ops, device)
        rows = ops[weights > 0]
        count = rows["count"].to_numpy(dtype=float)
        held += list(weights[weights > 0])
        xla += list(rows["xla_estimate_s"].to_numpy(dtype=float) / count)
        rows_streamed += list(np.where(compute.streams_columns(rows), rows["mm_n"], rows["mm_m"]))
        in_vmem += list(rows["vmem_bytes"] >= 0.9 * rows["bytes_accessed"])
    w, t = np.array(held), np.array(xla)
    if not len(w):
        return []
    # each constraint a·w + c ≤ t is the line (w, 1, t); a vertex is where two lines (or one and
    # an axis a = 0, c = 0) cross; the best feasible vertex maximises Σ (a·w + c) / t
    lines = [(wi, 1.0, ti) for wi, ti in zip(w, t, strict=True)]
    lines += [(1.0, 0.0, 0.0), (0.0, 1.0, 0.0)]  # a = 0, c = 0
    best, best_score = (0.0, 0.0), -1.0
    for i, (p1, q1, r1) in enumerate(lines):
        for p2, q2, r2 in lines[i + 1 :]:
            det = p1 * q2 - p2 * q1
            if abs(det) < 1e-30:
                continue
            a, c = (r1 * q2 - r2 * q1) / det, (p1 * r2 - p2 * r1) / det
            if a < 0 or c < 0 or np.any(a * w + c > t * (1 + 1e-9)):
                continue
            score = float(np.sum((a * w + c) / t))
            if score > best_score:
                best, best_score = (a, c), score
    slope, overhead = best
    if slope <= 0:
        return []
    rate = _round_up(per_core / slope)
    overhead = _round_down(overhead)
    # weight-bound: the load (held / rate) longer than the MXU's pass (2·rows·held / peak)
    bound = np.array(in_vmem) & (np.array(rows_streamed) < device.peak("bf16") * slope / 2)
    residuals = tuple((w[bound] * per_core / rate + overhead) / t[bound])
    return [
        Fit(chip, "weight_load", rate, "fixtures/tpu_heldout", residuals),
        Fit(chip, "weight_load_overhead", overhead, "fixtures/tpu_heldout", residuals),
    ]


def _round_down(x: float, digits: int = 4) -> float:
    """``x`` rounded down to ``digits`` significant digits (a time: the lower charge); 0 stays 0."""
    if x <= 0:
        return 0.0
    unit = 10.0 ** (math.floor(math.log10(x)) - digits + 1)
    return float(f"{math.floor(x / unit + 1e-9) * unit:.{digits}g}")


def _round_up(x: float, digits: int = 4) -> float:
    """``x`` rounded up to ``digits`` significant digits (a rate: the lower charge)."""
    unit = 10.0 ** (math.floor(math.log10(x)) - digits + 1)
    return float(f"{math.ceil(x / unit - 1e-9) * unit:.{digits}g}")


def _heldout_chips(program: str) -> set[str]:
    manifest = json.loads((HELDOUT / "manifest.json").read_text())
    return set(manifest[program].get("chips", {}))


def fits() -> list[Fit]:
    """Every fit this module makes."""
    tpu = [fit for chip in TPU_CHIPS for fit in (*tpu_fits(chip), *heldout_fits(chip))]
    return [*tpu, *gpu_fits("h100"), *gpu_fits("h200"), *published_fits(), *dcn_fits()]


_LEAF = re.compile(
    r"^(?P<key>\w+) = \{ kind = \"calibrated\", (?P<rest>.*?)value = (?P<value>[^,]+),"
)


def written(text: str, found: list[Fit]) -> str:
    """``data/chips.toml``'s text with each fitted value in its chip's ``[calibrated]`` section."""
    lines = text.splitlines(keepends=True)
    for fit in found:
        header = f"[chips.{fit.chip}.calibrated]\n"
        if header not in lines:
            raise ValueError(f"data/chips.toml has no {header.strip()} section for {fit.key}")
        at = lines.index(header) + 1
        while at < len(lines) and lines[at].strip() and not lines[at].startswith("["):
            m = _LEAF.match(lines[at])
            if m and m["key"] == fit.key:
                if float(m["value"]) != fit.value:  # the text as written where the value holds
                    lines[at] = lines[at].replace(
                        f"value = {m['value']},", f"value = {fit.value:g},", 1
                    )
                break
            at += 1
        else:
            raise ValueError(f"chips.{fit.chip}.calibrated has no {fit.key} to write")
    return "".join(lines)


def held_out() -> list[tuple[str, str, float]]:
    """(chip, program, expected ÷ measured step) on what no fit read (a measured GPU program's
    expected step as ``measure`` runs it: :func:`step_as_measured`)."""
    rows = []
    for card in CARDS:
        for case in GPU_HELD_OUT:
            report = gpu_reports(card, case)
            measured = report.summary["measured_step_s"]
            rows.append((CARDS[card], case, step_as_measured(report) / measured))
    for name in _published().names():
        if name in PUBLISHED_FITTING.values() or name in DCN_FITTING[:2]:
            continue
        chip = _published().chip(name)
        expected, measured = published_step(name, chip)
        rows.append((chip.key, name, expected / measured))
    return rows


def main(argv: list[str]) -> int:
    found = fits()
    for fit in found:
        spread = f"{min(fit.residuals):.3f}-{max(fit.residuals):.3f}" if fit.residuals else "—"
        print(f"{fit.chip:9} {fit.key:18} {fit.value:<8g} {fit.fitted_on:24} "
              f"{len(fit.residuals):3} samples, each ÷ the fit: {spread}")  # fmt: skip
    fitted = {(fit.chip, fit.key) for fit in found}
    print("\nchosen against the fitting set, not fitted (each note says why):")
    for chip in chips.all_chips():
        for path, source in chip.sources.items():
            key = path.removeprefix("calibrated.")
            if path.startswith("calibrated.") and (chip.key, key) not in fitted:
                print(f"{chip.key:9} {key:18} {source.value:<8g} {source.fitted_on}")
    print("\nheld out: expected ÷ measured step")
    for chip, program, ratio in held_out():
        print(f"{chip:9} {program:22} {ratio:.3f}")
    if "--write" in argv:
        chips.DATA_FILE.write_text(written(chips.DATA_FILE.read_text(), found))
        print(f"\nwrote {chips.DATA_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
