"""Real training steps to analyze: a GPT decoder, a ResNet-style convnet, a mixture-of-experts layer
with all-to-all, and the GPT step sharded data × tensor parallel over 64 chips.

Each module has a function of no arguments returning ``(step, args)`` or ``(step, args,
jit_kwargs)`` with ``jax.ShapeDtypeStruct`` args (nothing is allocated), the convention of
``hlo-roofline analyze FILE.py:NAME``, plus ``TARGET`` (the suggested compile-only target) and
``TARGETS`` (every target it is tested on)::

    hlo-roofline analyze hlo_roofline/examples/gpt.py:gpt_step --target v5e:2x2

    from hlo_roofline.examples import analyze_example
    report = analyze_example("gpt", "h100")

The sharded examples (``moe``, ``gpt_sharded``) build their mesh on a target's devices, so their
function takes the target as an optional argument and the report's target must be that one.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hlo_roofline import api, cache
from hlo_roofline.targets import Target

__all__ = ["EXAMPLES", "Example", "analyze_example", "default_cache_dir", "get"]

PACKAGE_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Example:
    """One example workload: where its step function lives and which targets it compiles for."""

    name: str
    module: str  # module name inside hlo_roofline.examples
    function: str
    description: str

    def _module(self):
        return importlib.import_module(f"{__name__}.{self.module}")

    @property
    def target(self) -> str:
        """The compile-only target this example is meant for."""
        return self._module().TARGET

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(self._module().TARGETS)

    @property
    def entry(self) -> str:
        """``FILE.py:NAME`` for ``hlo-roofline analyze`` (relative to the working directory)."""
        path = PACKAGE_DIR / f"{self.module}.py"
        with contextlib.suppress(ValueError):
            path = path.relative_to(Path.cwd())
        return f"{path}:{self.function}"

    def load(self, target: str | Target | None = None) -> tuple[Callable, tuple, dict]:
        """(step, args, jit_kwargs); examples that shard over a mesh build it on ``target``."""
        factory = getattr(self._module(), self.function)
        takes_target = "target" in inspect.signature(factory).parameters
        returned = factory(target or self.target) if takes_target else factory()
        step, args, *rest = returned
        return step, tuple(args), dict(rest[0]) if rest else {}


EXAMPLES: dict[str, Example] = {
    e.name: e
    for e in (
        Example("gpt", "gpt", "gpt_step", "GPT decoder training step (scan over layers, AdamW)"),
        Example("convnet", "convnet", "convnet_step", "ResNet-style image classifier step"),
        Example("moe", "moe", "moe_step", "mixture-of-experts layer, top-2, two all-to-alls"),
        Example(
            "gpt_sharded",
            "gpt_sharded",
            "gpt_sharded_step",
            "GPT step on 64 chips, data × tensor parallel",
        ),
    )
}


def default_cache_dir() -> Path:
    """Where ``make demo`` and the tests keep optimized HLO: the compile cache's directory."""
    return cache.default_dir()


def get(name: str) -> Example:
    try:
        return EXAMPLES[name]
    except KeyError:
        raise KeyError(f"no example {name!r}; examples: {', '.join(EXAMPLES)}") from None


def analyze_example(
    name: str,
    target: str | Target | None = None,
    *,
    chip=None,
    cost_model: str = "roofline",
    cache_dir: str | os.PathLike | None = None,
):
    """The :class:`~hlo_roofline.Report` of an example compiled compile-only for ``target``.

    ``hlo_roofline.analyze(step, *args, target=target, jit_kwargs=jit_kwargs)``; the demo and the tests,
    whoever calls, share cache entries (the HLO records no caller's frames). With ``cache_dir`` the
    optimized HLO is kept on disk (:mod:`hlo_roofline.cache`), so a second run — ``make demo``
    again, or another test worker — does not pay for the compile again. An example built for one
    chip is not warned about on a slice (:class:`~hlo_roofline.api.UnshardedProgramWarning`): it
    is one chip's step by design.
    """
    example = get(name)
    target = target or example.target
    resolved = api.resolve(chip, target)[1]  # parsed once: the step's mesh and the compile
    step, args, jit_kwargs = example.load(resolved)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", api.UnshardedProgramWarning)
        return api.analyze(
            step,
            *args,
            chip=chip,
            target=resolved if resolved is not None else target,
            cost_model=cost_model,
            cache=cache_dir if cache_dir is not None else False,
            jit_kwargs=jit_kwargs,
        )
