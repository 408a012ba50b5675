"""hlo_roofline's predicted step against the throughput MaxText publishes for its own configs.

MaxText 0.2.5 prints, for each high-performance config script, the TFLOP/s per chip it measured
(``configs/tpu/*/README.md``, ``configs/gpu/a3/llama_2_7b/README.md``). ``fixtures/published``
holds each config's train step compiled compile-only with the script's own flags (its
``generate.py``, MaxText's environment, never in CI) and MaxText's own FLOP count
(``calculate_tflops_training_per_device``). Here, from those fixtures only (no compile): the step
as scheduled on the config's chip, the TFLOP/s per chip it implies, against the published figure.

A roofline is optimistic: every op at its unit's peak, every transfer at the links' rate. A
prediction below a measurement means some op class is overpriced, so ``published ≤ predicted``
must hold for every config; measured ÷ predicted must also sit in a band (what real kernels,
collectives and the host lose against the peak). Nothing is fitted to the published figures.
"""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent.parent / "fixtures" / "published"
_spec = importlib.util.spec_from_file_location("published_predict", HERE / "predict.py")
predict_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(predict_module)

# Every config meets its published figure. None did while splash's FLOPs were priced at the
# vector unit's peak (v5p 32B also while the schedule ran every collective on one interconnect
# queue), nor the GPU configs while they ran attention=dot_product (S x S scores through HBM) in
# place of the published run's cuDNN flash attention (fixtures/published/gaps.py has those
# counterfactuals).
# Pairs whose predicted loss from one slice to two exceeds the published loss.
TREND_GAPS: dict[str, str] = {
    # libtpu 0.0.52 compiles the two-slice step with synchronous all-reduces of 3.2e11 B per step
    # (one slice: 1.1e11 B of them beside 1.1e11 B of async all-gathers), all exposed: +0.97 s.
    # The published run (an older libtpu) lost 2.6%; this program would lose 4.7%.
    "v4_22b_x2": "two-slice step compiled with synchronous all-reduces, all exposed",
}
# measured ÷ predicted (whole step, and the program without attention) where it is checked: what
# the model reaches, per platform. The ceiling 1.0 is the roofline's optimism; the floor what a real
# step loses against it at most (kernels below peak, collectives not hidden, host gaps). TPU:
# 0.73-0.98. GPU (H100, A3): 0.49-0.59: the roofline runs 89% of the step's time on the tensor
# cores at their dense bf16 peak; the measured step is 1.7-2x that (docs/validation.md says why).
BANDS = {"tpu": (0.7, 1.0), "gpu": (0.45, 1.0)}


def band(name: str) -> tuple[float, float]:
    return BANDS["gpu" if predict_module.record(name)["chip"] == "h100" else "tpu"]


@cache
def _plain(name: str):
    return predict_module.report(name)


@cache
def _predicted(name: str) -> dict:
    return predict_module.predict(name, _plain(name))


NAMES = predict_module.names()
PAIRS = [(n, n.replace("_x2", "").replace("_2vm", "_1vm")) for n in NAMES
         if n.endswith(("_x2", "_2vm"))]  # fmt: skip


def test_fixtures_are_there():
    """Every chip generation MaxText publishes for, a two-slice TPU and a two-node GPU config."""
    records = {n: predict_module.record(n) for n in NAMES}
    chips = {r["chip"] for r in records.values()}
    assert {"v4", "v5e", "v5p", "h100"} <= chips
    assert any(r["num_slices"] == 2 and r["chip"] != "h100" for r in records.values())
    assert any(r["num_slices"] == 2 and r["chip"] == "h100" for r in records.values())


@pytest.mark.parametrize("name", NAMES)
def test_published_at_most_predicted(name):
    """The roofline is optimistic: no published measurement beats it."""
    p = _predicted(name)
    assert p["published_tflops"] <= p["predicted_tflops"], (
        f"{name}: published {p['published_tflops']:.0f} TFLOP/s/chip > predicted "
        f"{p['predicted_tflops']:.0f} (step {p['predicted_step_s']:.3f} s predicted, "
        f"{p['measured_step_s']:.3f} s measured): an op class is overpriced; by class "
        f"{p['t_by_class_s']}"
    )


@pytest.mark.parametrize("name", NAMES)
def test_measured_over_predicted_in_band(name):
    ratio, (low, high) = _predicted(name)["measured_over_predicted"], band(name)
    assert low <= ratio <= high, f"{name}: measured ÷ predicted {ratio:.2f} outside {low}-{high}"


@pytest.mark.parametrize("name", NAMES)
def test_without_attention_at_most_measured(name):
    """The program less its attention kernels is priced optimistically too: its step cannot
    exceed the measured step of the whole, whatever attention cost; and within the band."""
    p = _predicted(name)
    ratio, (low, high) = p["measured_over_predicted_without_attention"], band(name)
    assert low <= ratio <= high, (
        f"{name}: without attention {p['predicted_step_without_attention_s']:.3f} s predicted, "
        f"{p['measured_step_s']:.3f} s measured (ratio {ratio:.2f}, band {low}-{high})"
    )


GPU = [n for n in NAMES if predict_module.record(n)["chip"] == "h100"]


@pytest.mark.parametrize("name", GPU)
def test_gpu_attention_is_cudnn_flash_partitioned(name):
    """The A3 programs run cuDNN's fused flash attention (as the published run's Transformer
    Engine does), one forward call per layer and one rematerialised, one backward, on each GPU's
    own batch (FSDP: per_device_batch_size, not the global batch); each forward does the causal
    attention MaxText counts: a third of its attention FLOPs per layer (forward + 2× backward)."""
    rec = predict_module.record(name)
    ops = _plain(name).ops
    rows = ops[predict_module.attention_rows(name, ops)]
    targets = rows["note"].str.extract(r"kernel '(__cudnn\$fmha\w+)'")[0]
    layers = rec["num_decoder_layers"]
    assert (targets == "__cudnn$fmhaSoftmax").sum() == 2 * layers
    assert (targets == "__cudnn$fmhaSoftmaxBackward").sum() == layers
    overrides = dict(a.split("=", 1) for a in rec["argv_overrides"])
    batch = int(overrides["per_device_batch_size"])
    assert rows["shape"].astype(str).str.contains(rf"bf16\[{batch},").all()
    forward = rows[targets == "__cudnn$fmhaSoftmax"]
    per_layer = rec["tflops_training_per_device"]["attention"] * 1e12 / 3 / layers
    assert forward["kernel_mxu_flops"].to_numpy() == pytest.approx(per_layer, rel=1e-3)
    judged = _predicted(name)
    assert judged["attention_s"] < 0.1 * judged["predicted_step_s"]


@pytest.mark.parametrize(("two", "one"), [p for p in PAIRS if p[0] not in TREND_GAPS])
def test_scaling_loss_at_most_published(two, one):
    """From one slice (node) to two, the program less its attention may lose less than the
    published figure did (the model prices DCN transfers as links it knows), not more."""
    steps = {n: _predicted(n)["predicted_step_without_attention_s"] for n in (one, two)}
    tflops = {n: _predicted(n)["maxtext_tflops_per_device"] for n in (one, two)}
    predicted = (tflops[two] / steps[two]) / (tflops[one] / steps[one])
    published = _predicted(two)["published_tflops"] / _predicted(one)["published_tflops"]
    assert predicted >= published, f"{two}: predicted {predicted:.3f} < published {published:.3f}"


@pytest.mark.parametrize("name", NAMES)
def test_maxtext_flops_are_the_programs(name):
    """MaxText's weight FLOPs (most of the published TFLOP/s's numerator: 6 × weights × tokens)
    are the compiled program's matmul FLOPs, plus at most one recomputed forward pass (remat:
    8 × weights × tokens): the fixture is the step MaxText counts, at its real size."""
    ops = _plain(name).ops
    matmul = ops["mm_k"] > 0
    sizes = ops["count"] * ops["mm_batch"] * ops["mm_m"] * ops["mm_n"] * ops["mm_k"]
    hlo = 2 * float(sizes[matmul].sum())
    weights = predict_module.record(name)["tflops_training_per_device"]["learnable_weight"] * 1e12
    assert 0.999 * weights <= hlo <= weights * 8 / 6, f"{name}: HLO {hlo:.4g} vs {weights:.4g}"


@pytest.mark.parametrize("name", [n for n in NAMES if predict_module.record(n)["published"]["mfu"]])
def test_published_mfu_uses_the_chips_peak(name):
    """MaxText's MFU is its TFLOP/s ÷ the chip's bf16 peak: the same peak as the chip database's,
    so predicted and published MFU are on one scale."""
    p = _predicted(name)
    mfu = p["published_tflops"] / (p["predicted_tflops"] / p["predicted_mfu"])
    assert mfu == pytest.approx(p["published_mfu"], abs=0.005)


def test_the_docs_table_is_todays_prediction():
    """docs/validation.md shows what the model predicts now (``python fixtures/published/predict.py``
    prints the table to paste), not what an earlier model did."""
    shown = (Path(__file__).parents[1] / "docs" / "validation.md").read_text()
    for line in predict_module.table([_predicted(n) for n in NAMES]).splitlines()[2:]:
        assert line in shown, f"docs/validation.md is out of date: {line}"
