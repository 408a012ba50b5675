"""``analyze FILE.py:NAME`` (compile a step) and ``hlo FILE|DIR`` (optimized HLO text)."""

from __future__ import annotations

import contextlib
import difflib
import importlib.util
import inspect
import re
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import click

from hlo_roofline import api, measured, targets
from hlo_roofline.cli._common import (
    CONTEXT,
    PACKAGE_DIR,
    PROGRESS_MIN_FILES,
    EntryError,
    InputError,
    _check_run,
    _emit,
    _format_option,
    _input_errors,
    _one_line,
    _output_errors,
    _output_options,
    _regex,
    chip_option,
    cost_model_option,
    model_flops_option,
    no_cache_option,
    pyproject_user_packages,
    quiet_jax_cache_logs,
    target_option,
    top_option,
    user_package_option,
)
from hlo_roofline.report import Report


def load_entry(entry: str) -> tuple[Callable, tuple, dict]:
    """``path/to/file.py:NAME`` → (step, args, jit kwargs), from ``NAME()``'s return value.

    ``NAME`` takes no arguments and returns ``(step, args)`` or ``(step, args, jit_kwargs)``:
    ``args`` a tuple of arrays / ``jax.ShapeDtypeStruct`` / pytrees, ``jit_kwargs`` a dict for
    ``jax.jit`` (``static_argnums``, ``donate_argnums``, ``in_shardings``, ...). A ``NAME`` that
    yields (its step needs a context) is opened with :func:`opened_entry` instead.
    """
    _, returned = _call(entry)
    if inspect.isgenerator(returned):
        returned.close()
        raise EntryError(
            f"{entry} yields its step (it needs a context): open it with "
            f"hlo_roofline.cli.opened_entry({entry!r})"
        )
    return _unpack(entry, returned)


@contextlib.contextmanager
def opened_entry(entry: str) -> Iterator[tuple[Callable, tuple, dict]]:
    """``FILE.py:NAME``'s (step, args, jit kwargs), inside the JAX context ``NAME`` sets up.

    ``NAME`` either returns the tuple (see :func:`load_entry`) or *yields* it from inside the
    context its step needs, as a ``contextlib.contextmanager`` would::

        def train_step_example():
            with jax.set_mesh(mesh), nn.logical_axis_rules(RULES):
                yield train_step, (state, batch)

    The step is traced and compiled while ``NAME`` is suspended at its ``yield``, so on this
    thread its mesh, axis rules and config contexts hold, as they do where the step is called.
    """
    path, generator = _call(entry)
    if not inspect.isgenerator(generator):
        yield _unpack(entry, generator)
        return
    try:
        returned = next(generator)
    except StopIteration:
        raise EntryError(f"{entry}() returned without yielding (step, args)") from None
    except Exception as exc:
        raise EntryError(f"{entry}() raised {_user_error(exc, path)}") from None
    try:
        yield _unpack(entry, returned)
    except BaseException:
        generator.close()  # leaves its contexts (runs its `finally` and `with` exits)
        raise
    try:
        next(generator)
    except StopIteration:
        return
    except Exception as exc:
        raise EntryError(f"{entry}() raised {_user_error(exc, path)} after its yield") from None
    generator.close()
    raise EntryError(f"{entry}() must yield once, not twice")


def _call(entry: str) -> tuple[Path, object]:
    """The file ``FILE.py:NAME`` names and what ``NAME()`` returned (a generator if it yields)."""
    path, factory = _factory(entry)
    try:
        return path, factory()
    except Exception as exc:
        raise EntryError(f"{entry}() raised {_user_error(exc, path)}") from None


def _factory(entry: str) -> tuple[Path, Callable]:
    """The file and the function of no arguments that ``FILE.py:NAME`` names."""
    if Path(entry).is_dir():
        raise EntryError(
            f"{entry} is a directory: use `hlo-roofline hlo {entry}` for an --xla_dump_to "
            "directory, or name a step as FILE.py:NAME"
        )
    file, sep, name = entry.rpartition(":")
    if not sep or not file or not name.isidentifier():
        raise EntryError(f"{entry!r} is not FILE.py:NAME (e.g. steps.py:matmul_step)")
    path = Path(file)
    if path.is_dir():
        raise EntryError(f"{file} is a directory, not a Python file (FILE.py:NAME)")
    if not path.is_file():
        raise EntryError(f"no such file: {file}")
    module = _import_file(path)
    factory = getattr(module, name, None)
    if factory is None:
        public = [n for n in vars(module) if not n.startswith("_")]
        close = difflib.get_close_matches(name, public, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise EntryError(f"{file} has no {name!r}{hint}")
    if not callable(factory):
        raise EntryError(f"{entry} is not a function: {type(factory).__name__}")
    _require_no_arguments(entry, factory)
    return path, factory


def _require_no_arguments(entry: str, factory: Callable) -> None:
    """A step itself (it needs its inputs) is the commonest mistake: explain the factory form."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # builtins and the like: let the call decide
        return
    needed = [
        p.name
        for p in params
        if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if needed:
        name = entry.rpartition(":")[2]
        args = ", ".join(needed)
        raise EntryError(
            f"{entry} needs arguments ({args}): NAME must be a function of no arguments that "
            f"returns (step, args) or (step, args, jit_kwargs), e.g. "
            f"`def {name}_example(): return {name}, ({args}{',' if len(needed) == 1 else ''})` "
            f"with jax.ShapeDtypeStruct or arrays for the arguments"
        )


_imported: dict[Path, tuple[tuple[int, int], object]] = {}


def _import_file(path: Path) -> ModuleType:
    """Import a user's Python file as a module (its directory importable meanwhile).

    An unchanged file is imported once per process, so a long-lived process (a test session, the
    TensorBoard plugin) hands jax the same step function again and reuses its compilation.
    """
    resolved = path.resolve()
    stat = resolved.stat()
    version = (stat.st_mtime_ns, stat.st_size)
    cached = _imported.get(resolved)
    if cached is not None and cached[0] == version:
        return cached[1]
    module_name = "_hlo_roofline_entry_" + re.sub(r"\W", "_", str(resolved))
    spec = importlib.util.spec_from_file_location(module_name, resolved)
    if spec is None or spec.loader is None:
        raise EntryError(f"cannot import {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    sys.path.insert(0, str(resolved.parent))
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:
        sys.modules.pop(module_name, None)
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise EntryError(f"cannot import {path}: {_user_error(exc, path)}") from None
    finally:
        sys.path.remove(str(resolved.parent))
    _imported[resolved] = (version, module)
    return module


def _unpack(entry: str, returned: object) -> tuple[Callable, tuple, dict]:
    convention = "must return (step, args) or (step, args, jit_kwargs)"
    if not isinstance(returned, tuple | list) or len(returned) not in (2, 3):
        raise EntryError(f"{entry}() {convention}, not {type(returned).__name__}")
    step, args, *rest = returned
    kwargs = rest[0] if rest else {}
    if not callable(step):
        raise EntryError(f"{entry}() {convention}: step is a {type(step).__name__}")
    if not isinstance(args, tuple | list):
        raise EntryError(f"{entry}() {convention}: args must be a tuple, not {type(args).__name__}")
    if not isinstance(kwargs, dict):
        raise EntryError(f"{entry}() {convention}: jit_kwargs must be a dict")
    return step, tuple(args), kwargs


def _user_error(exc: BaseException, path: Path) -> str:
    """``TypeError: ... (steps.py:12)``: the exception and the innermost line of the user's file."""
    where = ""
    if isinstance(exc, SyntaxError) and exc.lineno:
        where = f" ({path.name}:{exc.lineno})"
    else:
        resolved = str(path.resolve())
        for frame in reversed(traceback.extract_tb(exc.__traceback__)):
            if frame.filename == resolved or Path(frame.filename).resolve() == path.resolve():
                where = f" ({path.name}:{frame.lineno})"
                break
    return f"{type(exc).__name__}: {_one_line(exc)}{where}"


def _compile(
    entry: str,
    chip,
    target,
    cost_model: str,
    steps: int = 0,
    no_cache: bool = False,
    user_packages: tuple[str, ...] = (),
) -> Report:
    """Load ``entry`` and analyze it (``steps`` > 0: run and measure it); errors become messages.

    The step is traced here, on this thread, inside the context ``NAME`` yields from (see
    :func:`opened_entry`): it compiles what the same call compiles in the user's process.
    """
    quiet_jax_cache_logs()
    with _input_errors(), opened_entry(entry) as (step, args, kwargs):  # errors: one line
        return _analyze_entry(
            entry, step, args, kwargs, chip, target, cost_model, steps, no_cache, user_packages
        )


def _analyze_entry(
    entry, step, args, kwargs, chip, target, cost_model, steps, no_cache, user_packages
) -> Report:
    packages = (*pyproject_user_packages(Path(entry.rpartition(":")[0]).parent), *user_packages)
    try:
        if steps:
            if target is not None:
                raise InputError("--measure runs the step here: it cannot use --target")
            return measured.measure(api.jitted(step, kwargs), *args, steps=steps, chip=chip)
        return api.analyze(
            step,
            *args,
            chip=chip,
            target=target,
            cost_model=cost_model,
            cache=not no_cache,
            user_packages=packages,
            **kwargs,
        )
    except InputError:
        raise
    except (targets.TargetError, targets.TargetUnavailableError, measured.TraceError) as exc:
        raise InputError(_one_line(exc)) from None
    except Exception as exc:
        path = Path(entry.rpartition(":")[0])
        innermost = traceback.extract_tb(exc.__traceback__)[-1]
        if Path(innermost.filename).resolve().is_relative_to(PACKAGE_DIR):
            where = f"{Path(innermost.filename).name}:{innermost.lineno}"
            raise InputError(
                f"internal error analyzing {entry} at {where} (please report it): "
                f"{type(exc).__name__}: {_one_line(exc)}"
            ) from None
        raise InputError(f"compiling {entry} failed: {_user_error(exc, path)}") from None


@click.command(
    context_settings=CONTEXT, short_help="Compile a JAX step; print its per-op roofline."
)
@click.argument("entry", metavar="FILE.py:NAME")
@chip_option
@target_option
@cost_model_option
@_output_options
@_format_option("table", "csv", "json")
@top_option
@click.option(
    "--measure",
    is_flag=True,
    help="Also run the step under the profiler (locally) and join measured per-op times.",
)
@click.option(
    "--steps",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Profiled steps for --measure.",
)
@no_cache_option
@user_package_option
@model_flops_option
@click.option(
    "--trace-out",
    "trace_path",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="PATH",
    help="Also write the step as scheduled as Chrome trace-event JSON (open it in Perfetto or "
    "XProf's trace viewer).",
)
def analyze(
    entry,
    chip,
    target,
    cost_model,
    csv_path,
    json_path,
    logdir,
    run,
    plot_path,
    fmt,
    top,
    measure,
    steps,
    no_cache,
    user_packages,
    model_flops,
    trace_path,
):
    """Compile a JAX step and print its per-op roofline.

    NAME is a function of no arguments in FILE.py that returns (step, args) or
    (step, args, jit_kwargs); the step is compiled as
    hlo_roofline.analyze(step, *args, chip=..., target=..., **jit_kwargs). Args may be
    jax.ShapeDtypeStruct: nothing is allocated or run. A step that needs a context (a mesh
    set with jax.set_mesh, Flax axis rules) is yielded from inside it:
    `with jax.set_mesh(mesh): yield step, args`. For an --xla_dump_to directory use `hlo`.

    \b
    Example:
      $ hlo-roofline analyze steps.py:matmul_step --chip v5e
      $ hlo-roofline analyze steps.py:matmul_step --target v5e:2x2 --json large.json --top 3
      $ hlo-roofline analyze steps.py:elementwise_step --chip v5e --format csv
      $ hlo-roofline analyze steps.py:matmul_step --chip v5e --trace-out step.trace.json
    """
    _check_run(logdir, run)
    report = _compile(
        entry, chip, target, cost_model, steps if measure else 0, no_cache, user_packages
    )
    if model_flops is not None:
        report = report.with_model_flops(model_flops)
    name = entry.rpartition(":")[2]
    if trace_path is not None:
        if report.chip is None:
            raise click.UsageError("--trace-out needs a chip to schedule on: pass --chip")
        with _output_errors(trace_path):
            report.to_trace(trace_path)
        click.echo(f"wrote {trace_path}", err=True)
    _emit({name: report}, fmt, top, csv_path, json_path, logdir, run or name, plot_path)


@click.command(
    "hlo", context_settings=CONTEXT, short_help="Analyze HLO text or an XLA dump directory."
)
@click.argument("path", type=click.Path(exists=True, path_type=Path), metavar="FILE|DIR")
@chip_option
@cost_model_option
@click.option("--module", "module_regex", callback=_regex, metavar="REGEX",
              help="With a dump directory: only modules whose file name matches.")  # fmt: skip
@_output_options
@_format_option("table", "csv", "json")
@top_option
@user_package_option
@model_flops_option
def hlo_command(path, chip, cost_model, module_regex, csv_path, json_path, logdir, run, plot_path,
                fmt, top, user_packages, model_flops):  # fmt: skip
    """Analyze optimized HLO text, or every optimized module of an --xla_dump_to directory.

    With several modules, --csv/--json/--plot insert the module name before the suffix and
    --logdir writes one run per module under RUN/.

    \b
    Example:
      $ hlo-roofline hlo fixtures/mlp_bf16/tpu_v5e.hlo.txt --chip v5e --top 5
      $ hlo-roofline hlo fixtures/mlp_bf16/tpu_v5e.hlo.txt --chip v5e --json mlp.json
    """
    _check_run(logdir, run)
    if path.is_dir():
        files = api.dump_files(path)
        if not files:
            raise InputError(f"no '*{api.DUMP_SUFFIX}' files under {path}")
        if module_regex:
            files = [f for f in files if re.search(module_regex, f.name)]
            if not files:
                raise InputError(f"no module under {path} matches --module {module_regex!r}")
    else:
        files = [path]
    packages = (*pyproject_user_packages(path if path.is_dir() else path.parent), *user_packages)
    reports = {}
    bar = (
        click.progressbar(files, label="analyzing", file=sys.stderr, show_pos=True)
        if len(files) >= PROGRESS_MIN_FILES
        else contextlib.nullcontext(files)
    )
    with bar as files:
        for file in files:
            with _input_errors(str(file)):
                report = api.analyze_dump_file(file, cost_model, chip, user_packages=packages)
                if model_flops is not None:
                    report = report.with_model_flops(model_flops)
            reports[api.module_key(file)] = report
    _emit(reports, fmt, top, csv_path, json_path, logdir, run or path.stem, plot_path)
