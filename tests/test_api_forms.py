"""The public API takes what it is given, as jax does, and guesses nothing.

``analyze(fn, *args, jit_kwargs=..., **fn_kwargs)`` passes keywords to ``fn`` as
``jax.eval_shape`` does (the oracle: the FLOPs XLA's own cost analysis gives the program
``jax.jit(fn).lower(*args, **kwargs).compile()``), the old loose jit keywords still work with a
DeprecationWarning; a string given to ``analyze_hlo`` is HLO text, a ``pathlib.Path`` a file, a
directory goes to ``analyze_dump``; ``wrap_step`` logs, rather than raises, an analysis that fails
inside the user's training step.
"""

from __future__ import annotations

import logging
import shutil
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

import hlo_roofline as hr
from hlo_roofline import HloParseError, api

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
FIXTURE = FIXTURES / "mlp_bf16" / "tpu_v5e.hlo.txt"
S = jax.ShapeDtypeStruct


def _xla_flops(fn, *args, **kwargs) -> float:
    """FLOPs of the compiled program as XLA's cost analysis counts them."""
    step = fn if hasattr(fn, "lower") else jax.jit(fn)
    analysis = step.lower(*args, **kwargs).compile().cost_analysis()
    analysis = analysis[0] if isinstance(analysis, list) else analysis
    return float(analysis["flops"])


def scaled_matmul(x, w, *, times=1, chip="not jit's"):
    """A step whose keywords are its own (``chip`` too: analyze's ``chip=`` is not it)."""
    out = x
    for _ in range(times):
        out = out @ w
    return out


def test_keywords_go_to_fn_as_for_eval_shape():
    x, w = S((64, 128), jnp.float32), S((128, 128), jnp.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        once = hr.analyze(scaled_matmul, x, w, target="local", cache=False)
        thrice = hr.analyze(
            scaled_matmul, x, w, target="local", cache=False, jit_kwargs={"static_argnames": "times"},
            times=3,
        )  # fmt: skip
    assert once.summary["flops"] == pytest.approx(_xla_flops(scaled_matmul, x, w))
    expected = _xla_flops(jax.jit(scaled_matmul, static_argnames="times"), x, w, times=3)
    assert thrice.summary["flops"] == pytest.approx(expected)
    assert thrice.summary["flops"] == pytest.approx(3 * once.summary["flops"])


def test_a_dynamic_keyword_argument_is_an_input_of_the_program():
    def add(x, *, bias):
        return x + bias

    x = S((8, 32), jnp.float32)
    report = hr.analyze(add, x, bias=x, target="local", cache=False)
    memory = report.summary["memory"]
    assert memory["arguments_bytes"] == 2 * 8 * 32 * 4  # x and bias, both inputs of the program
    assert any(b["name"] == "bias" for b in memory["largest"])


def test_loose_jit_keywords_still_work_with_a_deprecation_warning():
    x, w = S((64, 128), jnp.float32), S((128, 128), jnp.float32)

    def step(x, w, n):
        return scaled_matmul(x, w, times=n)

    with pytest.warns(DeprecationWarning, match="jit_kwargs"):
        old = hr.analyze(step, x, w, 2, target="local", cache=False, static_argnums=2)
    new = hr.analyze(step, x, w, 2, target="local", cache=False, jit_kwargs={"static_argnums": 2})
    assert old.summary["flops"] == new.summary["flops"] > 0


def test_a_keyword_fn_takes_is_fns_even_when_jit_has_one_of_that_name():
    def step(x, donate_argnums=0):  # a parameter that shares a jax.jit keyword's name
        return x * (donate_argnums + 1)

    x = S((16,), jnp.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        report = hr.analyze(step, x, donate_argnums=jnp.float32(2.0), target="local", cache=False)
    assert any(b["name"] == "donate_argnums" for b in report.summary["memory"]["largest"])


def test_jit_kwargs_on_a_jitted_fn_is_refused():
    with pytest.raises(TypeError, match="already jitted"):
        hr.analyze(jax.jit(scaled_matmul), S((2, 2), jnp.float32), S((2, 2), jnp.float32),
                   jit_kwargs={"static_argnums": 0}, target="local", cache=False)  # fmt: skip


# -- text and paths --------------------------------------------------------------------------


def test_a_string_is_text_and_a_path_is_a_file():
    text = FIXTURE.read_text()
    from_text = hr.analyze_hlo(text)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        from_path = hr.analyze_hlo(FIXTURE)
        from_file = hr.analyze_file(FIXTURE)
    for other in (from_path, from_file):
        assert other.module == from_text.module
        assert other.summary["flops"] == from_text.summary["flops"] > 0


def test_a_string_naming_a_file_is_deprecated_not_guessed_silently():
    with pytest.warns(DeprecationWarning, match="pathlib.Path"):
        report = hr.analyze_hlo(str(FIXTURE))
    assert report.summary["flops"] == hr.analyze_hlo(FIXTURE).summary["flops"]


@pytest.mark.parametrize("text", ["\x00\xff", "no/such/file.hlo.txt", "HloModule", " "])
def test_text_that_is_not_hlo_is_a_parse_error(text):
    with pytest.raises(HloParseError):
        hr.analyze_hlo(text)


@pytest.mark.parametrize("bad", [b"HloModule m", None, 3])
def test_other_types_are_refused_by_name(bad):
    with pytest.raises(TypeError, match="analyze_hlo takes HLO text"):
        hr.analyze_hlo(bad)


def test_a_directory_is_a_dump_one_return_type_per_function(tmp_path):
    dump = tmp_path / "dump"
    dump.mkdir()
    shutil.copy(FIXTURE, dump / "module_0001.jit_step.tpu_after_optimizations.txt")
    reports = hr.analyze_dump(dump)
    assert list(reports) == ["module_0001.jit_step.tpu"]
    assert all(isinstance(r, hr.Report) for r in reports.values())
    with pytest.raises(IsADirectoryError, match="analyze_dump"):
        hr.analyze_file(dump)
    with pytest.raises(NotADirectoryError):
        hr.analyze_dump(FIXTURE)
    with pytest.warns(DeprecationWarning, match="analyze_dump"):
        old = hr.analyze_hlo(dump)  # the old form: a dict, kept while deprecated
    with pytest.warns(DeprecationWarning, match="analyze_dump"):
        old_text = hr.analyze_hlo(str(dump))
    assert old.keys() == old_text.keys() == reports.keys()


# -- the training-step wrapper ---------------------------------------------------------------


def test_wrap_step_reports_and_the_old_name_warns(tmp_path):
    def step(x):
        return jnp.tanh(x) * 2

    wrapped = hr.wrap_step(step, target="local", cache=False, logdir=tmp_path)
    out = wrapped(jnp.ones((4, 8)))
    assert float(out[0, 0]) == pytest.approx(2 * float(jnp.tanh(1.0)))
    assert isinstance(wrapped.report, hr.Report) and wrapped.analysis_error is None
    assert hr.Report.read(tmp_path / "step").module == wrapped.report.module
    with pytest.warns(DeprecationWarning, match="wrap_step"):
        old = hr.roofline(step, target="local", cache=False)
    assert float(old(jnp.ones((4, 8)))[0, 0]) == pytest.approx(float(out[0, 0]))


def test_a_failing_analysis_is_logged_and_the_step_runs(monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError("the analysis broke")

    monkeypatch.setattr(api, "_analyze_step", broken)
    wrapped = hr.wrap_step(lambda x: x + 1, target="local", cache=False)
    with caplog.at_level(logging.WARNING, logger="hlo_roofline.api"):
        first = wrapped(jnp.zeros(3))
        second = wrapped(jnp.zeros(3))
    assert first.tolist() == second.tolist() == [1.0, 1.0, 1.0]
    assert wrapped.report is None and isinstance(wrapped.analysis_error, RuntimeError)
    logged = [r for r in caplog.records if "the analysis broke" in r.getMessage()]
    assert len(logged) == 1  # tried once, not on every step


def test_bad_names_still_fail_when_wrapping():
    with pytest.raises(hr.chips.UnknownChipError):
        hr.wrap_step(lambda x: x, chip="no-such-chip")
