"""Every way a framework's users write a training step, as that framework's docs write it
(tests/framework_models/idioms.py): ``@nnx.jit`` with ``nnx.Optimizer`` (also donated, with a
static argument, and abstract), ``@eqx.filter_jit`` with ``filter_value_and_grad`` and optax (real
and abstract), ``jax.jit`` with static arguments and donation, Linen's ``TrainState``, a
``shard_map`` step. Each is compiled for the CPU here and compile-only for TPU v5e and H100.

The oracles: the step's FLOPs are the model's analytic count (its matmuls, 5 × 2·B·D·H, plus at
most 3% of elementwise work: biases, ReLU, the loss, the optimizer); the arguments' bytes are what
XLA's ``memory_analysis`` says the program takes, and both are the model's state and batch counted
from their shapes; the state the step returns updated without donating it is the donatable bytes,
and none once donated: so the wrapper's own split of the arguments was seen through.
"""

from __future__ import annotations

import warnings

import jax
import pytest
from conftest import SLOW, shared_cache_dir
from framework_models import idioms

import hlo_roofline as hr
from hlo_roofline import targets
from hlo_roofline.testing import assert_roofline

# the shard_map step shards its batch over these: one CPU device here, a 2x2 v5e, two H100s
TARGETS = {"cpu": None, "v5e": "v5e:2x2", "h100": "h100:1x1x2"}
CASES = [
    pytest.param(name, target, marks=() if target == "cpu" else SLOW, id=f"{name}-{target}")
    for name in idioms.CASES
    for target in TARGETS
]


def devices(target: str) -> list:
    spec = TARGETS[target]
    return jax.devices()[:1] if spec is None else targets.devices(spec)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return shared_cache_dir(tmp_path_factory)


def analyzed(name: str, target: str, cache) -> tuple[idioms.Case, hr.Report]:
    case = idioms.CASES[name](devices(target))
    spec = TARGETS[target]
    if name != "shard_map" and spec is not None:
        spec = target  # one device of the chip: nothing to shard
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hr.chips.RateFallbackWarning)
        report = hr.analyze(
            case.step, *case.args, target=spec or "local", chip=None if spec else "h100",
            cache=cache, **case.kwargs,
        )  # fmt: skip
    return case, report


@pytest.mark.parametrize(("name", "target"), CASES)
def test_each_idiom_costs_what_its_model_does(name, target, cache):
    case, report = analyzed(name, target, cache)
    assert report.summary["coverage"] == 1.0, report.summary["unknown_ops"]
    assert 1.0 <= report.summary["flops"] / case.flops < 1.03
    fit = report.summary["memory"]
    assert fit["source"] == "compiler"
    # TPU pads a small array to its tile (a bias, a step count): within 1%
    assert fit["arguments_bytes"] == pytest.approx(case.arguments_bytes, rel=0.01)
    assert fit["donatable_bytes"] == pytest.approx(case.donatable_bytes, rel=0.01, abs=64)
    assert report.summary["missing"] == []  # compiled here: the tiling, mesh and memory known


def test_wrap_step_and_assert_roofline_take_an_nnx_step(cache):
    """The wrapped ``@nnx.jit`` step runs (its model updated in place, as nnx.jit does) and its
    report is the analyze's; ``assert_roofline`` takes the step, and the report itself."""
    case = idioms.nnx_jit()
    model = case.args[0]
    before = model.linear1.kernel[...].copy()
    step = hr.wrap_step(case.step, chip="h100", target="local", cache=cache)
    loss = step(*case.args)
    assert step.analysis_error is None and loss.shape == ()
    assert not (model.linear1.kernel[...] == before).all()  # the real step ran on the real model
    assert 1.0 <= step.report.summary["flops"] / case.flops < 1.03
    report = assert_roofline(
        case.step, *case.args, chip="h100", target="local", cache=cache, min_coverage=1.0
    )
    assert assert_roofline(report, min_coverage=1.0) is report
    with pytest.raises(AssertionError, match="TPU v5e"):  # judged against the chip it names
        assert_roofline(report, chip="v5e", max_memory_share=0.0)
    with pytest.raises(TypeError, match="already compiled"):
        assert_roofline(report, *case.args, min_coverage=1.0)


class OpaqueLowered:
    def as_text(self):
        return ""


class OpaqueJit:
    """A wrapper whose ``lower`` gives something that holds no jax lowering."""

    __name__ = "opaque_step"

    def __call__(self, x):
        return x

    def lower(self, *args, **kwargs):
        return OpaqueLowered()


def test_a_wrapper_it_cannot_see_through_is_named_with_the_way_out():
    with pytest.raises(TypeError, match=r"opaque_step \(.*OpaqueJit\).*jax\.jit"):
        hr.analyze(OpaqueJit(), jax.ShapeDtypeStruct((4,), "float32"), target="local", cache=False)


def test_a_variable_two_nnx_modules_share_is_placed_once(cache):
    """Tied weights: one ``nnx.Param`` held by two layers is one input of the program compiled
    for a compile-only target, as it is of the one nnx.jit compiles here."""
    from flax import nnx

    class Tied(nnx.Module):
        def __init__(self, rngs):
            self.encode = nnx.Linear(idioms.D, idioms.H, use_bias=False, rngs=rngs)
            self.decode = nnx.Linear(idioms.H, idioms.D, use_bias=False, rngs=rngs)
            self.decode.kernel = self.encode.kernel  # the same variable, used transposed below

        def __call__(self, x):
            return jax.nn.relu(x @ self.encode.kernel[...]) @ self.decode.kernel[...].T

    @nnx.jit
    def forward(model, x):
        return model(x)

    model, (x, _) = Tied(nnx.Rngs(0)), idioms.batch()
    kernel = idioms.D * idioms.H * 4
    for target in ("local", "v5e"):
        report = hr.analyze(forward, model, x, target=target, chip="v5e", cache=cache)
        assert report.summary["memory"]["arguments_bytes"] == pytest.approx(
            kernel + idioms.nbytes(x), rel=0.01
        ), target


ENTRIES = """
import sys
sys.path.insert(0, {tests!r})
from framework_models import idioms


def nnx_step():
    case = idioms.nnx_jit()
    return case.step, case.args


def eqx_step():
    case = idioms.eqx_filter_jit()
    return case.step, case.args
"""


@pytest.mark.parametrize("name", ["nnx_step", "eqx_step"])
def test_the_cli_takes_the_step_as_written(name, tmp_path):
    """``hlo-roofline analyze FILE.py:NAME`` with NAME returning an ``@nnx.jit`` or
    ``@eqx.filter_jit`` step: compiled (here, compile-only for an H100) and measured here."""
    import json
    from pathlib import Path

    from click.testing import CliRunner

    from hlo_roofline import cli

    entry = tmp_path / "steps.py"
    entry.write_text(ENTRIES.format(tests=str(Path(__file__).resolve().parent)))
    out = tmp_path / "report.json"
    result = CliRunner().invoke(
        cli.main, ["analyze", f"{entry}:{name}", "--chip", "h100", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    flops = json.loads(out.read_text())["summary"]["flops"]
    assert 1.0 <= flops / idioms.matmul_flops() < 1.03
    measured = CliRunner().invoke(
        cli.main, ["analyze", f"{entry}:{name}", "--measure", "--steps", "2"]
    )
    assert measured.exit_code == 0, measured.output


def test_inputs_are_named_after_the_arguments_past_static_ones_and_numbers():
    """The program's inputs paired with the caller's arguments in order: the static argument
    between them is skipped, a Python number is an input (the f32[] jit makes of it), and the
    donated one is known donated (nothing left to donate)."""
    from hlo_roofline import placement
    from hlo_roofline.compile import lower

    def f(x, n, y, scale):
        return x * n + y * scale

    step = jax.jit(f, static_argnums=1, donate_argnums=2)
    vector = jax.ShapeDtypeStruct((256,), "float32")
    placed = placement.place_args((vector, 2, vector, 0.5), "v5e")
    inputs, donatable = placement.step_inputs(step, lower(step, placed, {}), (placed, {}))
    assert [(b.name, b.bytes) for b in inputs] == [("x", 1024), ("y", 1024), ("scale", 4)]
    assert donatable == 0  # the one output reuses y, donated


def test_a_python_bool_passed_traced_is_an_input_like_a_number():
    """``jit`` traces a Python ``True`` as the ``bool[]`` it makes of it, as it does a float: the
    input is named after its argument, and the arrays after it keep their own names."""
    from hlo_roofline import placement
    from hlo_roofline.compile import lower

    def f(x, training, y):
        return jax.numpy.where(training, x, y)

    step = jax.jit(f)
    vector = jax.ShapeDtypeStruct((256,), "float32")
    placed = placement.place_args((vector, True, vector), "v5e")
    inputs, _ = placement.step_inputs(step, lower(step, placed, {}), (placed, {}))
    assert [(b.name, b.bytes) for b in inputs] == [("x", 1024), ("training", 1), ("y", 1024)]
