"""The Python entry points: HLO text, a dump directory, or a JAX function in; :class:`Report` out.

A function's target is resolved here once (:func:`resolve`: a :class:`~hlo_roofline.targets.Target`);
:mod:`hlo_roofline.placement` places its arguments and :mod:`hlo_roofline.compile` lowers and
compiles it."""

from __future__ import annotations

import functools
import inspect
import logging
import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import jax

from hlo_roofline import chips, cost, targets
from hlo_roofline._gc import gc_paused
from hlo_roofline.compile import compile_lowered, jitted, local_chip, lower, refused
from hlo_roofline.dumps import (
    DUMP_SUFFIX,
    as_compiled,
    beside,
    dump_files,
    dump_topology,
    module_key,
)
from hlo_roofline.hlo import Module, parse_file, parse_module
from hlo_roofline.hlo.files import GZIP_SUFFIX, read_text
from hlo_roofline.judge import memory
from hlo_roofline.placement import (
    UnshardedProgramWarning,
    mesh_of,
    names_a_topology,
    place_args,
    step_inputs,
    warn_if_unsharded,
)
from hlo_roofline.report import Report, missing, missing_text

__all__ = [  # the entry points, and the warnings they give (UnshardedProgramWarning: analyze's)
    "IncompleteHloWarning",
    "JudgedElsewhereWarning",
    "UnoptimizedHloWarning",
    "UnshardedProgramWarning",
    "analyze",
    "analyze_dump",
    "analyze_file",
    "analyze_hlo",
    "dump_files",
    "module_key",
    "place_args",
    "resolve",
    "roofline",
    "wrap_step",
]

log = logging.getLogger(__name__)


def analyze_hlo(
    text: str | Path | Module,
    cost_model: str = "roofline",
    chip=None,
    *,
    user_packages: Sequence[str] = (),
    model_flops: float | None = None,
) -> Report:
    """Price every executed op of an optimized HLO module: its text, a parsed :class:`Module`, or
    a :class:`pathlib.Path` to a file of it (a string is always text, never a path).

    ``cost_model="xla"`` reproduces XLA's HloCostAnalysis op by op (its module totals, except that a
    custom call is "unknown" rather than −1; shapes sized as the installed jaxlib's XLA sizes them,
    :mod:`~hlo_roofline.cost.xla_sizes`); ``"roofline"`` (default) corrects it: loop bodies ×
    trip count, async pairs once, library calls priced from their shapes, and bytes on the wire for
    collectives. With ``chip`` the report is classified against it. ``user_packages`` (package
    names or directories) count as the user's code in ``user_source`` even where installed
    (MaxText in site-packages). ``model_flops``: your FLOPs per device and step, for the MFU
    against them (:meth:`Report.classify`). Malformed text raises
    :class:`~hlo_roofline.HloParseError`. A file with XLA's buffer assignment beside it:
    :func:`analyze_file`; an ``--xla_dump_to`` directory: :func:`analyze_dump`.
    """
    if cost_model not in cost.COST_MODELS:
        raise ValueError(f"cost_model must be one of {cost.COST_MODELS}, not {cost_model!r}")
    if isinstance(text, str) and _names_a_path(text):
        warnings.warn(
            f"analyze_hlo({text!r}) read the path it names: pass pathlib.Path({text!r}), or use "
            "analyze_file / analyze_dump (a string will be read as HLO text only)",
            DeprecationWarning,
            stacklevel=2,
        )
        text = Path(text)
    if isinstance(text, Path) and text.is_dir():
        warnings.warn(
            "analyze_hlo(directory) is deprecated: use analyze_dump(directory), which returns "
            "one report per module (analyze_hlo returns one report)",
            DeprecationWarning,
            stacklevel=2,
        )
        return {  # type: ignore[return-value]  # the old form's dict, until it is removed
            key: report.with_model_flops(model_flops) if model_flops is not None else report
            for key, report in analyze_dump(
                text, cost_model, chip, user_packages=user_packages
            ).items()
        }
    report = _analyze_hlo(text, cost_model, chip, user_packages, model_flops)
    _warn_if_missing(report)
    return report


def _analyze_hlo(text, cost_model, chip, user_packages, model_flops) -> Report:
    """:func:`analyze_hlo` without its warning: for the entry points that learn more before they
    return (a dump's buffer assignment, the compiler's own figures)."""
    if isinstance(text, Path):
        module = parse_file(text)  # its errors name the file
    elif isinstance(text, str):
        module = parse_module(text)
    elif isinstance(text, Module):
        module = text
    else:
        raise TypeError(
            f"analyze_hlo takes HLO text (str), a pathlib.Path or a parsed Module, not "
            f"{type(text).__name__}"
        )
    _warn_if_unoptimized(module)
    with gc_paused():
        # TPU arrays sized as stored (roofline), or as the installed XLA sizes them (xla)
        sizes = cost.shape_sizes(cost_model)
        # the ops priced one at a time, each summed and made a row as it comes: a large module's
        # priced ops never all exist at once
        totals: dict = {}
        ops = cost.priced(module, cost_model, sizes.tiled, sizes.tuple_pointer_bytes)
        ops = cost.tallied(ops, cost_model, totals)
        columns = cost.rows(module, ops, pad_to_tiles=sizes.tiled, user_packages=user_packages)
        summary = {**totals, "memory": memory.from_module(module)}
        summary["missing"] = ["tiling"] if _lacks_tiling(module) else []
        summary["missing"] = missing(summary)
        report = Report.from_columns(columns, summary, module.name)
    if chip is not None:
        return report.classify(chip, model_flops=model_flops)
    return report.with_model_flops(model_flops) if model_flops is not None else report


class IncompleteHloWarning(UserWarning):
    """The HLO did not say something its compile knew (``report.summary["missing"]``), and a
    figure of the report leans one way for it."""


def _warn_if_missing(report: Report, stacklevel: int = 3) -> None:
    """Warn of what changes the report's times (tiling, device coordinates); missing temporaries
    are said by the memory fit itself ("unknown") and recorded in the summary."""
    codes = [c for c in report.summary.get("missing") or () if c != "temporaries"]
    if codes:
        warnings.warn(
            f"module {report.module!r}: the HLO lacks " + "; and ".join(map(missing_text, codes)),
            IncompleteHloWarning,
            stacklevel=stacklevel,
        )


def _lacks_tiling(module: Module) -> bool:
    """An XLA:TPU module (tiled layouts) none of whose fusions carries the tiling code
    generation writes in its ``backend_config`` (``window_config``): a dump's
    ``after_optimizations`` module, read where its ``after_codegen`` one was not."""
    tiled = False
    for computation in module.computations.values():
        for i in computation.instructions:
            if i.opcode != "fusion":
                continue
            # the attributes' text, where it is not split yet: a fusion whose text holds neither
            # mark, and whose shape could change nothing, is passed without splitting it
            text = i.attr_text
            if (
                text is not None
                and "window_config" not in text
                and (tiled or (":T(" not in text and ":T(" not in str(i.shape)))
            ):
                continue
            attrs = i.peek_attrs()
            if attrs.get("kind") not in ("kLoop", "kInput", "kOutput"):
                continue
            config = attrs.get("backend_config", "")
            if "window_config" in config:
                return False
            tiled = tiled or ":T(" in config or ":T(" in str(i.shape)
    return tiled


class UnoptimizedHloWarning(UserWarning):
    """The HLO looks like XLA's input, not its optimized output: the numbers are before fusion."""


def _warn_if_unoptimized(module: Module) -> None:
    """XLA schedules every module it optimizes; one that is neither scheduled nor fused is the
    compiler's input (``jit(f).lower(...).as_text(dialect="hlo")``), priced op by op as if every
    intermediate went through memory."""
    if module.attrs.get("is_scheduled") == "true":
        return
    if any(i.opcode == "fusion" for i in module.instructions()):
        return
    warnings.warn(
        f"module {module.name!r} looks unoptimized (not scheduled, no fusions), e.g. from "
        "lower().as_text(): its numbers are before fusion, not what XLA runs. Analyze "
        "lower().compile().as_text(), or the function itself with hlo_roofline.analyze(fn, ...)",
        UnoptimizedHloWarning,
        stacklevel=3,
    )


def _names_a_path(text: str) -> bool:
    """The deprecated form: a one-line string that is not HLO and names a file or directory."""
    if "\n" in text or not text.strip() or text.lstrip().startswith("HloModule"):
        return False
    try:
        return Path(text).exists()
    except (OSError, ValueError):  # too long or odd to be a path (an embedded NUL byte)
        return False


def analyze_dump(
    directory: str | Path,
    cost_model: str = "roofline",
    chip=None,
    *,
    user_packages: Sequence[str] = (),
    model_flops: float | None = None,
    module: str | None = None,
    before_each: Callable[[Path], object] | None = None,
) -> dict[str, Report]:
    """One report per optimized module of an ``--xla_dump_to`` directory, keyed by
    :func:`module_key` (see :func:`analyze_file`: the fit is known where XLA wrote the buffer
    assignment). ``module``: only the files whose name matches this regex; ``before_each`` is
    called with each file before it is analyzed (a progress bar)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise NotADirectoryError(f"{directory} is not an --xla_dump_to directory")
    files = dump_files(directory)
    if not files:
        raise FileNotFoundError(f"no '*{DUMP_SUFFIX}' files under {directory}")
    if module:
        files = dump_files(directory, module)
        if not files:
            raise FileNotFoundError(f"no module under {directory} matches {module!r}")
    reports = {}
    for f in files:
        if before_each is not None:
            before_each(f)
        reports[module_key(f)] = _analyze_file(f, cost_model, chip, user_packages, model_flops)
        _warn_if_missing(reports[module_key(f)])
    return reports


def analyze_file(
    path: str | os.PathLike,
    cost_model: str = "roofline",
    chip=None,
    *,
    user_packages: Sequence[str] = (),
    model_flops: float | None = None,
) -> Report:
    """An optimized HLO file (:func:`analyze_hlo` of its text); where XLA wrote its buffer
    assignment beside it (a dump's ``*-buffer-assignment.txt``), the memory figures are the
    compiler's (:func:`memory.from_dump`), so the fit is known, not only a lower bound from the
    text. A directory is :func:`analyze_dump`'s (IsADirectoryError here)."""
    report = _analyze_file(path, cost_model, chip, user_packages, model_flops)
    _warn_if_missing(report)
    return report


def _analyze_file(path, cost_model, chip, user_packages, model_flops) -> Report:
    """:func:`analyze_file` without its warning. A dump's ``*after_optimizations.txt`` is read
    from its ``*after_codegen.txt`` where XLA:TPU wrote one beside it: the same module with the
    tiling code generation chose (``window_config``), as ``compiled.as_text()`` has it."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a directory: analyze_dump({str(path)!r}) reads a dump")
    report = _analyze_hlo(as_compiled(path), cost_model, None, user_packages, None)
    stem = path.name.removesuffix(GZIP_SUFFIX).removesuffix(".txt")
    assignment = beside(path, stem + memory.ASSIGNMENT_SUFFIX)
    if assignment is not None:
        usage = beside(path, stem + memory.USAGE_SUFFIX)
        report.summary["memory"] = memory.from_dump(
            read_text(assignment),
            read_text(usage) if usage is not None else None,
            report.summary["memory"],
        )
        report.summary["missing"] = missing(report.summary)
    if chip is not None:
        return report.classify(chip, topology=dump_topology(path, as_chip(chip)), model_flops=model_flops)
    return report.with_model_flops(model_flops) if model_flops is not None else report


analyze_dump_file = analyze_file  # the name the CLI used before analyze_file


# -- JAX functions ------------------------------------------------------------------------------


def _default_target(chip) -> targets.Target | None:
    """The compile-only target that produces this chip's HLO, if there is one."""
    try:
        return targets.parse_target(chip.key)
    except targets.TargetError:
        return None


def as_chip(chip) -> chips.Chip | None:
    """``chip=`` as the API takes it: None, a name the database knows, or a :class:`chips.Chip`."""
    if chip is None or isinstance(chip, chips.Chip):
        return chip
    if isinstance(chip, str):
        return chips.get(chip)
    raise TypeError(
        f"chip must be a chip name such as 'v5e' or 'h100' (see hlo_roofline.chips.names()), "
        f"a hlo_roofline.chips.Chip, or None; got {type(chip).__name__} {chip!r}"
    )


def resolve(
    chip=None, target: str | targets.Target | None = None
) -> tuple[object, targets.Target | None, str]:
    """(chip, compile-only :class:`~hlo_roofline.targets.Target` or None for local, a sentence
    saying what is compiled for what). The target string is parsed here, once: everything after
    (placement, the cache key, warnings) takes the :class:`Target`.

    One meaning everywhere: ``target`` says what to compile for ("local" for this machine);
    without it, an accelerator ``chip`` is compiled for compile-only, unless the local device is
    that chip. ``chip`` defaults to the target's chip, else the local device's.
    """
    chip = as_chip(chip)
    if target is not None and not isinstance(target, str | targets.Target):
        raise TypeError(f"target must be a string such as 'v5e:2x2' or 'h100', got {target!r}")
    if target == "local":
        chip = chip or local_chip()
        return chip, None, "compiled for the local backend"
    if target is not None:
        spec = targets.parse_target(target)
        if chip is not None and chip.key != spec.chip:
            warnings.warn(
                f"the program is compiled for {spec.spec} but judged against {chip.name} "
                f"({chip.key}): its fusion and layouts are {spec.chip}'s, not {chip.key}'s",
                JudgedElsewhereWarning,
                stacklevel=3,
            )
        chip = chip or chips.get(spec.chip)
        return chip, spec, f"compiled compile-only for {spec.spec}"
    if chip is not None and chip.kind in ("tpu", "gpu"):
        local = local_chip()
        if local is not None and local.key == chip.key:
            return chip, None, f"compiled for the local {chip.name}"
        target = _default_target(chip)
        if target is not None:
            return (
                chip,
                target,
                (
                    f"compiled compile-only for {target} because chip={chip.key!r} "
                    "(the local CPU's HLO differs; pass target='local' to use it)"
                ),
            )
        warnings.warn(
            f"no compile-only target produces {chip.name} HLO; judging the local backend's HLO "
            f"against {chip.name}",
            JudgedElsewhereWarning,
            stacklevel=3,
        )
    return chip or local_chip(), None, "compiled for the local backend"


class JudgedElsewhereWarning(UserWarning):
    """The program is judged against another chip than the one it was compiled for."""


def analyze(
    fn,
    *args,
    chip=None,
    target: str | targets.Target | None = None,
    cost_model: str = "roofline",
    cache: bool | str | os.PathLike = True,
    user_packages: Sequence[str] = (),
    model_flops: float | None = None,
    jit_kwargs: dict | None = None,
    **fn_kwargs,
) -> Report:
    """Compile ``fn(*args, **fn_kwargs)`` and return its classified :class:`Report`.

    As ``jax.eval_shape(fn, *args, **kwargs)``: ``args`` and ``fn_kwargs`` are ``fn``'s (arrays,
    ``jax.ShapeDtypeStruct`` with or without shardings, or pytrees of them: Flax NNX modules,
    Equinox modules, optax states); ``fn`` may be plain or jitted as its framework's docs write it
    (``jax.jit``, ``nnx.jit``, ``eqx.filter_jit``: the jax lowering inside is read, and abstract
    arguments keep the framework's split of array and static leaves), and ``jit_kwargs``
    (``static_argnums``, ``in_shardings``, …) go to ``jax.jit`` for a plain ``fn``.
    ``target`` ("v5e:2x2", "h100:1x1x8", "a100", …, or a parsed :class:`~hlo_roofline.targets.Target`)
    compiles compile-only for that accelerator;
    ``chip`` defaults to the target's chip (or the local device's). Naming an accelerator ``chip``
    without a target compiles for that chip, not for the local CPU.
    The optimized HLO is kept on disk (:mod:`hlo_roofline.cache`): analyzing the same step again,
    in any process, does not compile it again. ``cache=False`` compiles regardless; a path keeps
    the cache there. The step is traced on the caller's thread, in the caller's JAX context
    (``jax.set_mesh``, ``use_mesh``, Flax's axis rules, ``jax.config`` contexts): it compiles what
    calling it there would. The callers' own frames are left out of the stacks the HLO records, so
    a step is one cache entry whoever analyzes it.
    ``user_packages`` count as the user's code in the attribution (see :func:`analyze_hlo`).
    A multi-device ``target`` whose topology is named (``"v5e:2x2"``, not ``"v5e"``) given a program
    with nothing sharded warns (:class:`UnshardedProgramWarning`). ``model_flops``: your FLOPs per
    device and step (MaxText's ``calculate_tflops_training_per_device`` × 1e12), for the MFU
    against them (:meth:`Report.classify`).

    Deprecated: ``jax.jit``'s keywords passed loosely (``analyze(fn, x, static_argnums=1)``) still
    go to ``jax.jit`` with a DeprecationWarning where ``fn`` has no parameter of that name.
    """
    jit_kwargs, fn_kwargs = _split_loose_jit_kwargs(fn, dict(jit_kwargs or {}), fn_kwargs)
    chip, target, how = resolve(chip, target)
    step = jitted(fn, jit_kwargs)
    report = _analyze_step(
        step,
        args,
        fn_kwargs,
        chip,
        target,
        how,
        cost_model,
        cache,
        user_packages,
        placed_by_jit=jit_kwargs.get("in_shardings") is not None,
    )
    return report.with_model_flops(model_flops) if model_flops is not None else report


# ``isolate_trace``: an option of analyze() that the trace on the caller's thread made moot.
_RETIRED_KWARGS = frozenset({"isolate_trace"})


@functools.cache
def _jit_parameters() -> frozenset[str]:
    """The keywords this jax's ``jax.jit`` takes (besides the function)."""
    try:
        return frozenset(inspect.signature(jax.jit).parameters) - {"fun"}
    except (TypeError, ValueError):
        return frozenset({"in_shardings", "out_shardings", "static_argnums", "static_argnames",
                          "donate_argnums", "donate_argnames", "keep_unused", "device",
                          "backend", "inline", "abstracted_axes", "compiler_options"})  # fmt: skip


def _split_loose_jit_kwargs(fn, jit_kwargs: dict, fn_kwargs: dict) -> tuple[dict, dict]:
    """The old form told apart from the new: a keyword that ``jax.jit`` takes and ``fn`` does not
    (no parameter of that name, no ``**kwargs``) was meant for ``jax.jit``; it goes there, with a
    DeprecationWarning. Every other keyword is ``fn``'s."""
    accepts = _keyword_parameters(fn)
    loose = {
        name: fn_kwargs.pop(name)
        for name in list(fn_kwargs)
        if (name in _jit_parameters() or name in _RETIRED_KWARGS)
        and accepts is not None
        and name not in accepts
    }
    for name in sorted(loose.keys() & _RETIRED_KWARGS):
        del loose[name]
        warnings.warn(f"analyze(..., {name}=) is ignored and deprecated", DeprecationWarning, 3)
    if loose:
        warnings.warn(
            f"analyze(fn, ..., {', '.join(f'{k}=' for k in sorted(loose))}) sends jax.jit's "
            f"keywords loosely: pass jit_kwargs={{{', '.join(repr(k) for k in sorted(loose))}: "
            "...} (keywords outside it are fn's, as for jax.eval_shape)",
            DeprecationWarning,
            stacklevel=3,
        )
        clash = loose.keys() & jit_kwargs.keys()
        if clash:
            raise TypeError(f"{sorted(clash)} given both loosely and in jit_kwargs")
    return {**jit_kwargs, **loose}, fn_kwargs


def _keyword_parameters(fn) -> frozenset[str] | None:
    """The names ``fn`` takes by keyword; None where it takes any (``**kwargs``) or cannot say."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    by_keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return frozenset(p.name for p in parameters if p.kind in by_keyword)


def _analyze_step(
    step,
    args,
    kwargs,
    chip,
    target,
    how,
    cost_model,
    cache,
    user_packages: Sequence[str] = (),
    placed_by_jit: bool = False,
) -> Report:
    """Lower a jitted ``step`` for ``target``, compile it (or find it in the cache), analyze it.

    A program the target's compiler refuses for want of memory is a report too: the step does
    not fit, with the compiler's figures (see :mod:`hlo_roofline.judge.memory`)."""
    log.info("%s", how)
    placed_args = place_args(args, target, placed_by_jit)
    placed_kwargs = place_args(kwargs, target, placed_by_jit)
    lowered = lower(step, placed_args, placed_kwargs)
    inputs, donatable = step_inputs(step, lowered, (placed_args, placed_kwargs))
    program, error = compile_lowered(lowered, target, cache)
    if program is None:
        with warnings.catch_warnings():  # the lowered program is unoptimized by design
            warnings.simplefilter("ignore", UnoptimizedHloWarning)
            as_lowered = analyze_hlo(lowered.as_text(dialect="hlo"), cost_model)
        report = refused(lowered, as_lowered, error, inputs, donatable, target)
        how += "; the compiler refused it: out of memory"
    else:
        module = parse_module(program.text)
        report = _analyze_hlo(module, cost_model, None, user_packages, None)
        if names_a_topology(target):
            warn_if_unsharded(report, module, target, inputs, lowered)
        if program.memory is not None:
            temporaries = memory.largest_temporaries(report.summary["memory"])
            report.summary["memory"] = memory.from_stats(
                program.memory, inputs, donatable, temporaries
            )
        report.summary["missing"] = missing(report.summary)
    report = labelled(report, target, how)
    if chip is None:
        return report
    return report.classify(chip, topology=mesh_of(placed_args, placed_kwargs))


def labelled(report: Report, target: targets.Target | None, how: str) -> Report:
    """Record in the summary what the program was compiled for, and why."""
    report.summary["compiled_for"] = target.spec if target is not None else "local"
    report.summary["how"] = how
    return report


def wrap_step(
    fn=None,
    *,
    chip=None,
    target: str | targets.Target | None = None,
    logdir=None,
    run: str | None = None,
    cost_model: str = "roofline",
    cache: bool | str | os.PathLike = True,
):
    """Wrap a (jitted) training step: its first call analyzes the program compiled for its arguments.

    ``chip`` and ``target`` mean what they mean for :func:`analyze`: on a machine without the
    chip, the step is compiled compile-only for it (from the first call's shapes) while the calls
    themselves run here; the report's ``how`` says which. The report is written to TensorBoard when
    ``logdir`` is given and kept as ``step.report``; later calls go straight to the jitted step.
    Usable as ``@wrap_step(chip="v5e", logdir="runs")`` or ``step = wrap_step(step, chip="v5e")``.

    Bad names fail here, at wrapping time. An analysis that fails inside the training step is
    logged (``logging.warning`` on ``hlo_roofline.api``) and kept as ``step.analysis_error``, and
    the step runs: a report is never worth a crashed run. It is not tried again.
    """
    resolved = resolve(chip, target)

    def wrap(step):
        jitted_step = jitted(step, {})
        name = getattr(step, "__name__", "step")

        @functools.wraps(step)
        def wrapper(*args, **kwargs):
            if not wrapper.analyzed:
                wrapper.analyzed = True
                try:
                    report = _analyze_step(
                        jitted_step,
                        args,
                        kwargs,
                        *resolved,
                        cost_model=cost_model,
                        cache=cache,
                    )
                    if logdir is not None:
                        report.write_tensorboard(logdir, run or name)
                    wrapper.report = report
                except Exception as exc:  # the user's step goes on without its report
                    wrapper.analysis_error = exc
                    log.warning(
                        "hlo_roofline could not analyze %s (the step runs without a report): "
                        "%s: %s", name, type(exc).__name__, exc, exc_info=log.isEnabledFor(logging.DEBUG),
                    )  # fmt: skip
            return jitted_step(*args, **kwargs)

        wrapper.report = None
        wrapper.analysis_error = None
        wrapper.analyzed = False
        return wrapper

    return wrap(fn) if fn is not None else wrap


def roofline(fn=None, **kwargs):
    """Deprecated name of :func:`wrap_step` (it shadowed ``jax.experimental.roofline``)."""
    warnings.warn(
        "hlo_roofline.roofline is deprecated: use hlo_roofline.wrap_step (same arguments); the "
        "old name shadows jax.experimental.roofline",
        DeprecationWarning,
        stacklevel=2,
    )
    return wrap_step(fn, **kwargs)
