"""What two or more commands share: errors as one-line messages, the options, saving and printing
reports, and loading and compiling a `FILE.py:NAME` entry (`analyze` and `check --from`). A command
imports from here and from `render`, never from another command."""

from __future__ import annotations

import contextlib
import difflib
import importlib.util
import inspect
import json
import logging
import re
import sys
import traceback
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import click

from hlo_roofline import api, cache, chips, cost, entries, measured, targets
from hlo_roofline._atomic import is_remote, unwritable
from hlo_roofline.check import PERCENT_RANGES, RuleError, percent_error, read_toml
from hlo_roofline.cli.render import modules_table, report_text, step_time
from hlo_roofline.compile import jitted
from hlo_roofline.diff import NotClassifiedError
from hlo_roofline.hlo import HloParseError
from hlo_roofline.report import Report, ReportError
from hlo_roofline.text import one_line

PROGRESS_MIN_FILES = 4
PACKAGE_DIR = Path(__file__).resolve().parent.parent
COST_MODELS = cost.COST_MODELS  # the names --cost-model takes
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class InputError(click.ClickException):
    """Unreadable input or an impossible request: printed as one line, exit code 2."""

    exit_code = 2


class EntryError(ValueError):
    """A ``file.py:NAME`` entry point that cannot be loaded or does not follow the convention."""


def parsed_entry(entry: str) -> entries.EntryName:
    """``entry`` read by :func:`hlo_roofline.entries.parse_entry`, its refusal an EntryError."""
    try:
        return entries.parse_entry(entry)
    except ValueError as exc:
        raise EntryError(str(exc)) from None


def entry_file(entry: str) -> Path:
    """The Python file that defines ``entry``'s NAME (a module's, once it is imported)."""
    named = parsed_entry(entry)
    module = None if named.is_file else sys.modules.get(named.where)
    return Path(getattr(module, "__file__", None) or named.where)


@contextlib.contextmanager
def input_errors(what: str = "") -> Iterator[None]:
    """Turn the library's input errors into one-line exit-2 messages."""
    prefix = f"{what}: " if what else ""
    try:
        yield
    except HloParseError as exc:
        message = exc.message.removeprefix(f"{what}: ")
        where = f"{exc.line}:{exc.column}:" if exc.line else ""
        raise InputError(f"{what}:{where} {message}" if what else message) from None
    except (ReportError, RuleError, NotClassifiedError, EntryError, chips.UnknownChipError) as exc:
        raise InputError(prefix + one_line(exc)) from None
    except OSError as exc:
        raise InputError(f"{prefix}{exc.strerror or exc}") from None


@contextlib.contextmanager
def output_errors(path: Path | str) -> Iterator[None]:
    """A file that cannot be written (a read-only folder, a file where a folder should be,
    ``/proc``) or a run outside its logdir: a one-line exit-2 message, never a traceback."""
    try:
        yield
    except OSError as exc:
        where = exc.filename or path
        raise InputError(f"cannot write {where}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise InputError(f"cannot write {path}: {one_line(exc)}") from None


# JAX's own compile-time modules: its persistent compilation cache reports a cache it cannot read
# or write, or an entry it skips, as log records and Python warnings; printed by the CLI (which
# shows warnings as `warning: ...` lines) they would read as this tool's.
JAX_NOISE_MODULES = ("jax._src.compilation_cache", "jax._src.compiler", "jax._src.cache_key")


def quiet_jax_cache_logs() -> None:
    """Keep JAX's compilation-cache and compiler log records and warnings off the CLI's stderr."""
    for name in JAX_NOISE_MODULES:
        logger = logging.getLogger(name)
        logger.setLevel(logging.CRITICAL + 1)
        logger.propagate = False
        warnings.filterwarnings("ignore", module=re.escape(name) + "$")


# The remote filesystems' own loggers: gcsfs logs each retry of an unreachable bucket with its
# traceback; the CLI's message for the write or read that failed says what happened, once.
REMOTE_NOISE_MODULES = ("gcsfs", "s3fs", "fsspec", "aiobotocore", "botocore")


def quiet_remote_logs() -> None:
    """Keep the remote filesystems' log records (tracebacks of retries) off the CLI's stderr."""
    for name in REMOTE_NOISE_MODULES:
        logger = logging.getLogger(name)
        logger.setLevel(logging.CRITICAL + 1)
        logger.propagate = False


USER_PACKAGES_KEY = "user-packages"


def pyproject_user_packages(start: Path) -> tuple[str, ...]:
    """``user-packages`` of ``[tool.hlo-roofline]`` in the nearest ``pyproject.toml`` at or above
    ``start``: packages whose frames are the user's code even where installed."""
    here = start.resolve()
    for directory in (here, *here.parents):
        path = directory / "pyproject.toml"
        if not path.is_file():
            continue
        with input_errors():
            data = read_toml(path)
        table = data.get("tool")
        table = table.get("hlo-roofline") if isinstance(table, dict) else None
        value = table.get(USER_PACKAGES_KEY, []) if isinstance(table, dict) else []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise InputError(
                f"{path}: [tool.hlo-roofline] {USER_PACKAGES_KEY} must be a list of package "
                f"names or directories, not {value!r}"
            )
        return tuple(value)
    return ()


# -- options shared by several commands ------------------------------------------------------------


def _chip(ctx: click.Context, param: click.Parameter, value: str | None) -> chips.Chip | None:
    if value is None:
        return None
    try:
        return chips.get(value)
    except chips.UnknownChipError as exc:
        raise click.BadParameter(one_line(exc)) from None


def _target(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> targets.Target | str | None:
    """The parsed :class:`~hlo_roofline.targets.Target` (or "local"): the commands pass it on,
    so the string is read once."""
    if value is None or value == "local":
        return value
    try:
        return targets.parse_target(value)
    except targets.TargetError as exc:
        raise click.BadParameter(one_line(exc)) from None


def regex_callback(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None:
        try:
            re.compile(value)
        except re.error as exc:
            raise click.BadParameter(f"bad regex {value!r}: {exc}") from None
    return value


def image_callback(
    ctx: click.Context, param: click.Parameter, value: Path | str | None
) -> Path | str | None:
    if value is not None and not str(value).lower().endswith((".png", ".svg")):
        raise click.BadParameter(f"{value} must end in .png or .svg")
    return value


chip_option = click.option(
    "--chip",
    callback=_chip,
    metavar="NAME",
    help="Judge ops against this chip (key, alias or jax device_kind; see `hlo-roofline chips`).",
)


target_option = click.option(
    "--target",
    callback=_target,
    metavar="SPEC",
    help="Compile compile-only for this target (v5e:2x2, v5p:2x2x1, h100, ...) or 'local'. "
    "Default: the chip's target, else the local backend.",
)


cost_model_option = click.option(
    "--cost-model",
    type=click.Choice(COST_MODELS),
    default="roofline",
    show_default=True,
    help="'xla' reproduces XLA's HloCostAnalysis; 'roofline' corrects loops, async pairs, "
    "library calls and collectives.",
)


no_cache_option = click.option(
    "--no-cache",
    is_flag=True,
    help="Compile even if this step's optimized HLO is in the cache (~/.cache/hlo_roofline/hlo, "
    "or $HLO_ROOFLINE_CACHE_DIR).",
)


user_package_option = click.option(
    "--user-package",
    "user_packages",
    multiple=True,
    metavar="NAME",
    help="Count this package (name or directory) as your code in user_source even if installed "
    "(e.g. maxtext). Repeatable; also [tool.hlo-roofline] user-packages in pyproject.toml.",
)


model_flops_option = click.option(
    "--model-flops",
    type=click.FloatRange(min=0, min_open=True),
    metavar="FLOPS",
    help="Your model's FLOPs per device and step (MaxText: calculate_tflops_training_per_device "
    "× 1e12): the summary adds the MFU against them at the step as scheduled.",
)


def format_option(*choices: str) -> Callable:
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(choices),
        default=choices[0],
        show_default=True,
        help="Output format on stdout.",
    )


top_option = click.option(
    "--top",
    type=click.IntRange(min=0),
    default=10,
    show_default=True,
    help="Rows in the table (0: all).",
)


class PathOrUrl(click.Path):
    """Where a command reads or writes: a local path (a ``Path``, checked as ``click.Path``
    checks it: a file where a folder is expected, or the reverse, refused at once) or a URL
    (``gs://``, ``s3://``, ``memory://``: kept as text and read or written there through its
    filesystem), refused at once where no filesystem for it is installed."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and is_remote(value):
            problem = unwritable(value)
            if problem is not None:
                self.fail(f"{value}: {problem}", param, ctx)
            return value
        return super().convert(value, param, ctx)


def output_options(fn: Callable) -> Callable:
    """--csv/--json/--logdir/--run/--plot: where `analyze` and `hlo` save what they computed."""
    path = PathOrUrl(dir_okay=False, path_type=Path)
    for option in reversed(
        [
            click.option("--csv", "csv_path", type=path, help="Write the report as CSV."),
            click.option("--json", "json_path", type=path, help="Write the report as JSON."),
            click.option(
                "--logdir",
                type=PathOrUrl(file_okay=False, path_type=Path),
                help="Write the report for TensorBoard under LOGDIR/RUN.",
            ),
            click.option("--run", help="TensorBoard run name (with --logdir)."),
            click.option(
                "--plot",
                "plot_path",
                type=path,
                callback=image_callback,
                help="Draw the roofline chart (.png or .svg).",
            ),
        ]
    ):
        fn = option(fn)
    return fn


# -- saving and printing reports ------------------------------------------------------------------


def check_run(logdir: Path | None, run: str | None) -> None:
    if run is not None and logdir is None:
        raise click.UsageError("--run needs --logdir")


def _with_key(path: Path | str, key: str, many: bool) -> Path | str:
    if not many:
        return path
    if isinstance(path, str):  # a URL: the key before its last suffix
        head, dot, suffix = path.rpartition(".")
        return f"{head}.{key}.{suffix}" if dot and "/" not in suffix else f"{path}.{key}"
    return path.with_name(f"{path.stem}.{key}{path.suffix}")


def emit(
    reports: dict[str, Report], fmt, top, csv_path, json_path, logdir, run, plot_path,
    trace_path: Path | None = None,
) -> None:  # fmt: skip
    """Save each report where asked (notes on stderr), then print them to stdout."""
    many = len(reports) > 1
    if fmt == "csv" and many:
        raise click.UsageError("--format csv prints one report: pass --module or use --csv")
    for option, path, what in (
        ("--plot", plot_path, "judge against"), ("--trace-out", trace_path, "schedule on")
    ):  # fmt: skip
        if path is not None and any(r.chip is None for r in reports.values()):
            raise click.UsageError(f"{option} needs a chip to {what}: pass --chip")
    for key, report in reports.items():
        if csv_path:
            with output_errors(_with_key(csv_path, key, many)):
                report.to_csv(_with_key(csv_path, key, many))
            note(f"wrote {_with_key(csv_path, key, many)}")
        if json_path:
            with output_errors(_with_key(json_path, key, many)):
                report.to_json(_with_key(json_path, key, many))
            note(f"wrote {_with_key(json_path, key, many)}")
        if logdir:
            with output_errors(logdir):
                written = report.write_tensorboard(logdir, f"{run}/{key}" if many else run)
            note(f"wrote {written}")
        if plot_path:
            with output_errors(_with_key(plot_path, key, many)):
                chart = report.plot(_with_key(plot_path, key, many))
            note(f"wrote {chart}")
        if trace_path:
            with output_errors(_with_key(trace_path, key, many)):
                report.to_trace(_with_key(trace_path, key, many))
            note(f"wrote {_with_key(trace_path, key, many)}")
    if fmt == "json":
        if many:
            data = {k: r.to_dict() for k, r in reports.items()}
            click.echo(json.dumps(data, allow_nan=False))
        else:  # one report, signed as its file would be: `check` reads it back
            click.echo(next(iter(reports.values())).to_json())
    elif fmt == "csv":
        click.echo(next(iter(reports.values())).to_csv(), nl=False)
    else:
        if many:
            click.echo(modules_table(reports) + "\n")
        for key, report in sorted(reports.items(), key=step_time, reverse=True):
            click.echo(report_text(report, key if many else "", top))


trace_out_option = click.option(
    "--trace-out",
    "trace_path",
    type=PathOrUrl(dir_okay=False, path_type=Path),
    metavar="PATH",
    help="Also write the step as scheduled as Chrome trace-event JSON (open it in Perfetto or "
    "XProf's trace viewer); with several modules, the module name goes before the suffix.",
)


def note(text: str) -> None:
    click.echo(text, err=True)


trust_option = click.option(
    "--trust-unsigned",
    is_flag=True,
    help="Read reports without a checksum (written by hand or by an older version), or whose "
    "checksum fails; their rows and summary are still held to each other.",
)


def load_report(path: Path, chip: chips.Chip | None, trust_unsigned: bool = False) -> Report:
    """The report at ``path`` through the one reader (``Report.read``), judged on ``chip``."""
    with input_errors():
        report = Report.read(path, trust_unsigned=trust_unsigned)
    if chip is not None:
        with input_errors():
            try:
                return report.classify(chip)
            except KeyError as exc:  # a column the verdict needs
                raise ReportError(f"{path}: cannot judge it, missing column {exc}") from None
    missing = report.missing_verdicts()
    if missing:
        raise InputError(
            f"{path}: judged on {report.chip} but missing column(s) {missing}; "
            "pass --chip to judge it again"
        )
    return report


class Percent(click.ParamType):
    """A percent rule's value, accepted by the one range of :data:`check.PERCENT_RANGES`."""

    name = "percent"

    def __init__(self, rule: str) -> None:
        self.rule = rule

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            return value
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of percent", param, ctx)
        error = percent_error(self.rule, number)
        if error is not None:
            self.fail(error, param, ctx)
        return number


def percent_option(flag: str, help: str, rule: str | None = None):
    """A percent flag whose accepted range is its rule's (``rule``: default the flag's name)."""
    rule = rule or flag.removeprefix("--").replace("-", "_")
    assert rule in PERCENT_RANGES, rule
    return click.option(flag, type=Percent(rule), metavar="PCT", help=help)


# -- FILE.py:NAME entry points: loading, compiling (the analyze and check commands) -----------


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
    """The file and the function of no arguments that ``FILE.py:NAME`` (or
    ``package.module:NAME``, its module's file) names."""
    if Path(entry).is_dir():
        raise EntryError(
            f"{entry} is a directory: use `hlo-roofline hlo {entry}` for an --xla_dump_to "
            f"directory, or name a step as {entries.FORMS}"
        )
    named = parsed_entry(entry)
    file, name = named.where, named.name
    if named.is_file:
        path = Path(file)
        if path.is_dir():
            raise EntryError(f"{file} is a directory, not a Python file (FILE.py:NAME)")
        if not path.is_file():
            raise EntryError(f"no such file: {file}")
        module = _import_file(path)
    else:
        try:
            module = named.import_module()
        except Exception as exc:  # its own ImportError, or what its top level raised
            raise EntryError(f"cannot import {file}: {type(exc).__name__}: {one_line(exc)}") from None
        path = entry_file(entry)
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
        name = parsed_entry(entry).name
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
    return f"{type(exc).__name__}: {one_line(exc)}{where}"


def compile_entry(
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
    with input_errors(), opened_entry(entry) as (step, args, kwargs):  # errors: one line
        return _analyze_entry(
            entry, step, args, kwargs, chip, target, cost_model, steps, no_cache, user_packages
        )


def _analyze_entry(
    entry, step, args, kwargs, chip, target, cost_model, steps, no_cache, user_packages
) -> Report:
    packages = (*pyproject_user_packages(entry_file(entry).parent), *user_packages)
    try:
        if steps:
            if target is not None:
                raise InputError("--measure runs the step here: it cannot use --target")
            return measured.measure(jitted(step, kwargs), *args, steps=steps, chip=chip)
        return api.analyze(
            step,
            *args,
            chip=chip,
            target=target,
            cost_model=cost_model,
            cache=not no_cache,
            user_packages=packages,
            jit_kwargs=kwargs,
        )
    except InputError:
        raise
    except (targets.TargetError, targets.TargetUnavailableError, measured.TraceError) as exc:
        raise InputError(one_line(exc)) from None
    except cache.CacheFolderError as exc:  # $HLO_ROOFLINE_CACHE_DIR a URL or a file
        raise InputError(f"cache folder {exc.filename}: {exc.strerror}") from None
    except Exception as exc:
        path = entry_file(entry)
        innermost = traceback.extract_tb(exc.__traceback__)[-1]
        if Path(innermost.filename).resolve().is_relative_to(PACKAGE_DIR):
            where = f"{Path(innermost.filename).name}:{innermost.lineno}"
            raise InputError(
                f"internal error analyzing {entry} at {where} (please report it): "
                f"{type(exc).__name__}: {one_line(exc)}"
            ) from None
        raise InputError(f"compiling {entry} failed: {_user_error(exc, path)}") from None
