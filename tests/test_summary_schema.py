"""Every key a report's summary holds is declared in ``schema.Summary``, with its type; the codes
it and the op table hold (the memory fit's verdict and remedies, ``hint_reason``) are from their
owner's list, and only the renderers word them.

The reports are real: fixtures compiled by XLA judged on their chips, a step compiled here, and a
step run and measured under the profiler (as tests/test_measure.py makes them, in-process).
"""

from __future__ import annotations

import types
import typing
import warnings

import jax.numpy as jnp
import pytest
from conftest import FIXTURES

import hlo_roofline as hr
from hlo_roofline import chips, schema
from hlo_roofline.judge import hints, memory
from hlo_roofline.report import Report, ReportError

HINTS = {  # fixtures whose rows carry hints on their chips
    "gpt_tiny/tpu_v5e.hlo.txt": "v5e",
    "split_k_gemm/h100.hlo.txt": "h100",
    "mlp_bf16/tpu_v5e.hlo.txt": "v5e",
    "fsdp_train_step/h100.hlo.txt": "h100",
}
MEASURE_CHIP = chips.Chip.custom("summary-test-cpu", peak_flops={"f32": 1e11}, hbm_bandwidth=1e10)


def _accepts(hint, value) -> bool:
    """``value`` is of the declared type ``hint`` (one level deep: containers' items unchecked)."""
    if hint is typing.Any:
        return True
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        return any(_accepts(h, value) for h in typing.get_args(hint))
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if typing.is_typeddict(hint):
        return isinstance(value, dict)
    return isinstance(value, origin or hint)


def _check_summary(summary: dict) -> None:
    hints = typing.get_type_hints(schema.Summary)
    undeclared = sorted(set(summary) - set(hints))
    assert not undeclared, f"summary keys not in schema.Summary: {undeclared}"
    wrong = {k: v for k, v in summary.items() if not _accepts(hints[k], v)}
    assert not wrong, f"summary values not of their declared type: {wrong}"


@pytest.fixture(scope="module")
def measured_report() -> Report:
    def step(a, b):
        return jnp.tanh(a @ b).sum()

    a = jnp.full((256, 256), 0.5, jnp.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return hr.measure(step, a, a, steps=3, warmup=1, chip=MEASURE_CHIP)


def test_a_measured_reports_keys_are_declared(measured_report, tmp_path):
    summary = measured_report.summary
    declared = set(typing.get_type_hints(schema.MeasuredSummary))
    written = {k for k in summary if k.startswith("measured_")}
    assert written <= declared and len(written) >= 9, written
    assert {"measured_step_s", "measured_op_s", "measured_problems"} <= written
    _check_summary(summary)
    measured_report.to_json(tmp_path / "m.json")
    _check_summary(Report.read(tmp_path / "m.json").summary)  # and so does what is read back


@pytest.mark.parametrize("name", sorted(HINTS))
def test_a_judged_fixtures_keys_are_declared_and_hints_are_known_codes(name):
    report = hr.analyze_hlo(FIXTURES / name, chip=HINTS[name])
    _check_summary(report.summary)
    reasons = set(report.ops["hint_reason"]) - {""}
    assert reasons and reasons <= set(schema.HINT_REASONS), reasons
    assert report.summary["memory_fit"]["verdict"] in schema.FIT_VERDICTS


def test_every_hint_code_is_listed_in_its_columns_meaning_and_worded():
    meaning = schema.BY_NAME["hint_reason"].meaning
    for code in schema.HINT_REASONS:
        assert f"`{code}`" in meaning
        if code not in ("no_rate", "prefetch"):  # those carry their words in ``detail``
            assert hints.hint_text(code, "memory", ridge_m=64.0, ridge=200.0)


def test_a_compiled_steps_keys_are_declared():
    report = hr.analyze(lambda x: jnp.sin(x) @ x, jnp.ones((64, 64)), chip="v5e", target="local",
                        cache=False)  # fmt: skip
    _check_summary(report.summary)
    assert {"compiled_for", "how", "memory_fit"} <= set(report.summary)


# -- the memory fit: codes in the summary, words in the renderers ----------------------------


def _figures(need: float, **extra) -> dict:
    return {"need_bytes": need, "complete": True, "source": "compiler", "largest": [], **extra}


@pytest.mark.parametrize(
    ("need_share", "verdict"),
    [(0.5, "fits"), (0.95, "tight"), (1.3, "does_not_fit")],
)
def test_fit_verdicts_are_codes_without_spaces(need_share, verdict):
    chip = chips.get("v5e")
    capacity = chip.per_device().hbm_capacity
    fit = memory.judge(_figures(need_share * capacity, donatable_bytes=1e9), chip)["memory_fit"]
    assert fit["verdict"] == verdict and " " not in fit["verdict"]
    for advice in fit["advice"]:
        assert advice["code"] in schema.ADVICE_CODES
        assert all(not isinstance(v, str) or " " not in v for v in advice.values())
        assert memory.advice_text(advice)  # every code is worded
    shown = "\n".join(memory.describe({"memory": _figures(0), "memory_fit": fit}))
    assert verdict.replace("_", " ") in shown and "_" not in shown.split(": ")[1]


def test_every_advice_code_is_worded():
    chip = chips.get("v5e")
    capacity = chip.per_device().hbm_capacity
    seen = set()
    for slices in (None, [(4, "2x2")], [(1, "1x1")]):
        for outputs in (None, 1e9):
            for state_share in (0.05, 0.9):
                need = 1.5 * capacity
                figures = _figures(
                    need, donatable_bytes=1e9, temporaries_bytes=0.5 * need,
                    arguments_bytes=state_share * need, outputs_bytes=outputs, aliased_bytes=0,
                    devices=1, slices=slices,
                )  # fmt: skip
                for advice in memory.judge(figures, chip)["memory_fit"]["advice"]:
                    seen.add(advice["code"])
                    assert memory.advice_text(advice)
    assert seen == set(schema.ADVICE_CODES)


def test_a_report_written_before_the_codes_is_read_and_rendered(tmp_path):
    report = hr.analyze_hlo(FIXTURES / "gpt_tiny" / "tpu_v5e.hlo.txt", chip="v5e")
    payload = report.to_dict()
    fit = payload["summary"]["memory_fit"]
    need = 2 * fit["capacity_bytes"]  # a step that does not fit, as an older version wrote it
    payload["summary"]["memory"]["need_bytes"] = need
    payload["summary"]["memory_fit"] = {
        **fit, "verdict": "does not fit", "need_bytes": need, "used_fraction": 2.0,
        "advice": ["donate the inputs the step returns updated"],
    }  # fmt: skip
    old = Report.from_dict(payload)
    assert memory.verdict_of(old.summary["memory_fit"]) == "does_not_fit"
    shown = "\n".join(memory.describe(old.summary))
    assert "does not fit" in shown and "try: donate the inputs" in shown
    payload["summary"]["memory_fit"]["verdict"] = "roomy"
    with pytest.raises(ReportError, match="fit verdict"):
        Report.from_dict(payload)


def test_an_unknown_hint_code_is_refused_on_read():
    payload = hr.analyze_hlo(FIXTURES / "gpt_tiny" / "tpu_v5e.hlo.txt", chip="v5e").to_dict()
    payload["data"][0][payload["columns"].index("hint_reason")] = "go_faster"
    with pytest.raises(ReportError, match="hint_reason"):
        Report.from_dict(payload)
