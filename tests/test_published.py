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

# Configs left out of the published ≤ predicted check, each with why (docs/validation.md,
# "Predicted against MaxText's published throughput", has the evidence; fixtures/published/gaps.py
# the counterfactuals). test_known_gaps_are_still_there fails once a gap is gone: then move the
# config back.
DOT_PRODUCT = (
    "not the published program: attention=dot_product stands in for the run's cuDNN flash "
    "attention (Transformer Engine, not installed), and its S x S scores through HBM cost more "
    "than the whole shortfall"
)
# Every TPU config was here while splash's FLOPs were priced at the vector unit's peak (v5p 32B
# also while the schedule ran every collective on one interconnect queue); with them on the
# matrix unit (kernel_mxu_flops) and one queue per TPU device group, all hold.
KNOWN_GAPS: dict[str, str] = {
    "a3_llama2_7b_1vm": DOT_PRODUCT,  # 380 < 492; without the S x S ops: 1.206 s < 1.427 s
    "a3_llama2_7b_2vm": DOT_PRODUCT,  # 376 < 422; without them: 1.226 s < 1.664 s
}
# Pairs whose predicted loss from one slice to two exceeds the published loss.
TREND_GAPS: dict[str, str] = {
    # libtpu 0.0.52 compiles the two-slice step with synchronous all-reduces of 3.2e11 B per step
    # (one slice: 1.1e11 B of them beside 1.1e11 B of async all-gathers), all exposed: +0.97 s.
    # The published run (an older libtpu) lost 2.6%; this program would lose 4.7%.
    "v4_22b_x2": "two-slice step compiled with synchronous all-reduces, all exposed",
}
# measured ÷ predicted (of the program without attention) where it is checked: what the model
# reaches (0.73-0.92). The floor is what a real step loses against the roofline at most (kernels
# below peak, collectives not hidden, host gaps); the ceiling 1.0 is the roofline's optimism.
BAND = (0.7, 1.0)


@cache
def _plain(name: str):
    return predict_module.report(name)


@cache
def _predicted(name: str) -> dict:
    return predict_module.predict(name, _plain(name))


NAMES = predict_module.names()
CHECKED = [n for n in NAMES if n not in KNOWN_GAPS]
PAIRS = [(n, n.replace("_x2", "").replace("_2vm", "_1vm")) for n in NAMES
         if n.endswith(("_x2", "_2vm"))]  # fmt: skip


def test_fixtures_are_there():
    """Every chip generation MaxText publishes for, a two-slice TPU and a two-node GPU config."""
    records = {n: predict_module.record(n) for n in NAMES}
    chips = {r["chip"] for r in records.values()}
    assert {"v4", "v5e", "v5p", "h100"} <= chips
    assert any(r["num_slices"] == 2 and r["chip"] != "h100" for r in records.values())
    assert any(r["num_slices"] == 2 and r["chip"] == "h100" for r in records.values())


@pytest.mark.parametrize("name", CHECKED)
def test_published_at_most_predicted(name):
    """The roofline is optimistic: no published measurement beats it."""
    p = _predicted(name)
    assert p["published_tflops"] <= p["predicted_tflops"], (
        f"{name}: published {p['published_tflops']:.0f} TFLOP/s/chip > predicted "
        f"{p['predicted_tflops']:.0f} (step {p['predicted_step_s']:.3f} s predicted, "
        f"{p['measured_step_s']:.3f} s measured): an op class is overpriced; by class "
        f"{p['t_by_class_s']}"
    )


@pytest.mark.parametrize("name", CHECKED)
def test_measured_over_predicted_in_band(name):
    ratio = _predicted(name)["measured_over_predicted"]
    assert BAND[0] <= ratio <= BAND[1], f"{name}: measured ÷ predicted {ratio:.2f} outside {BAND}"


@pytest.mark.parametrize("name", NAMES)
def test_without_attention_at_most_measured(name):
    """The program less its attention (what KNOWN_GAPS is about) is priced optimistically too: its
    step cannot exceed the measured step of the whole, whatever attention cost; and within BAND."""
    p = _predicted(name)
    ratio = p["measured_over_predicted_without_attention"]
    assert BAND[0] <= ratio <= BAND[1], (
        f"{name}: without attention {p['predicted_step_without_attention_s']:.3f} s predicted, "
        f"{p['measured_step_s']:.3f} s measured (ratio {ratio:.2f}, band {BAND})"
    )


@pytest.mark.parametrize("name", sorted(KNOWN_GAPS))
def test_known_gaps_are_still_there(name):
    """A config left out is still below its published figure, for the reason its entry gives."""
    p = _predicted(name)
    assert p["predicted_tflops"] < p["published_tflops"], f"{name}: gap closed, check it again"
    judged = _plain(name).classify(predict_module.CHIPS[predict_module.record(name)["chip"]])
    ops = judged.ops
    rows = predict_module.attention_rows(name, ops)
    assert rows.any()
    shortfall = p["predicted_step_s"] - p["measured_step_s"]
    if KNOWN_GAPS[name] == DOT_PRODUCT:
        assert float(ops["t_roofline_s"][rows].sum()) > shortfall
    else:  # no other cause is known today
        raise AssertionError(f"{name}: a known gap without its check")


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
