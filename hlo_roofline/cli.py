"""The ``hlo-roofline`` command: a thin face over :mod:`~hlo_roofline.api`, reports, checks and diffs.

Exit codes: 0 success, 1 a check (or ``diff --fail-on-regression``) failed, 2 bad usage or
unreadable input. Errors are one line on stderr, never a traceback. Data goes to stdout; notes on
files written go to stderr, so ``--format csv|json`` output can be piped.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib.util
import inspect
import json
import re
import shutil
import sys
import traceback
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import click

import hlo_roofline._jax_env  # noqa: F401  (before anything starts jax: see the module)
from hlo_roofline import chips, memory
from hlo_roofline.check import (
    REQUIRABLE,
    CheckResult,
    RuleError,
    Rules,
    check,
    format_seconds,
    format_table,
    pyproject_rules,
    read_rules,
)
from hlo_roofline.diff import Diff, NotClassifiedError, compare, judged_alike
from hlo_roofline.hlo import HloParseError
from hlo_roofline.report import Report, ReportError

PROGRESS_MIN_FILES = 4
PACKAGE_DIR = Path(__file__).resolve().parent
COST_MODELS = ("roofline", "xla")


class InputError(click.ClickException):
    """Unreadable input or an impossible request: printed as one line, exit code 2."""

    exit_code = 2


class EntryError(ValueError):
    """A ``file.py:NAME`` entry point that cannot be loaded or does not follow the convention."""


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@contextlib.contextmanager
def _input_errors(what: str = "") -> Iterator[None]:
    """Turn the library's input errors into one-line exit-2 messages."""
    prefix = f"{what}: " if what else ""
    try:
        yield
    except HloParseError as exc:
        message = exc.message.removeprefix(f"{what}: ")
        where = f"{exc.line}:{exc.column}:" if exc.line else ""
        raise InputError(f"{what}:{where} {message}" if what else message) from None
    except (ReportError, RuleError, NotClassifiedError, EntryError, chips.UnknownChipError) as exc:
        raise InputError(prefix + _one_line(exc)) from None
    except OSError as exc:
        raise InputError(f"{prefix}{exc.strerror or exc}") from None


# -- options shared by several commands ------------------------------------------------------------


def _chip(ctx: click.Context, param: click.Parameter, value: str | None) -> chips.Chip | None:
    if value is None:
        return None
    try:
        return chips.get(value)
    except chips.UnknownChipError as exc:
        raise click.BadParameter(_one_line(exc)) from None


def _target(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None or value == "local":
        return value
    from hlo_roofline import targets

    try:
        return targets.parse_target(value).spec
    except targets.TargetError as exc:
        raise click.BadParameter(_one_line(exc)) from None


def _regex(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None:
        try:
            re.compile(value)
        except re.error as exc:
            raise click.BadParameter(f"bad regex {value!r}: {exc}") from None
    return value


def _image(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    if value is not None and value.suffix.lower() not in (".png", ".svg"):
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


def _format_option(*choices: str) -> Callable:
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


def _output_options(fn: Callable) -> Callable:
    """--csv/--json/--logdir/--run/--plot: where `analyze` and `hlo` save what they computed."""
    path = click.Path(dir_okay=False, path_type=Path)
    for option in reversed(
        [
            click.option("--csv", "csv_path", type=path, help="Write the report as CSV."),
            click.option("--json", "json_path", type=path, help="Write the report as JSON."),
            click.option(
                "--logdir",
                type=click.Path(file_okay=False, path_type=Path),
                help="Write the report for TensorBoard under LOGDIR/RUN.",
            ),
            click.option("--run", help="TensorBoard run name (with --logdir)."),
            click.option(
                "--plot",
                "plot_path",
                type=path,
                callback=_image,
                help="Draw the roofline chart (.png or .svg).",
            ),
        ]
    ):
        fn = option(fn)
    return fn


CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group(context_settings=CONTEXT)
@click.version_option(package_name="hlo_roofline", prog_name="hlo-roofline")
def main() -> None:
    """Per-op roofline analysis of the optimized HLO XLA compiles for your step.

    Exit codes: 0 pass, 1 check failed, 2 bad usage or unreadable input.

    \b
    Example:
      $ hlo-roofline chips
      $ hlo-roofline analyze steps.py:matmul_step --chip v5e
      $ hlo-roofline check large.json --select dot_general --require compute
    """
    warnings.showwarning = _show_warning


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Python warnings (a chip judged against another's program, HLO before optimization) as
    one-line messages on stderr, like the command's other notes."""
    click.echo(f"warning: {message}", err=True)


# -- analyze ---------------------------------------------------------------------------------------


def load_entry(entry: str) -> tuple[Callable, tuple, dict]:
    """``path/to/file.py:NAME`` → (step, args, jit kwargs), from ``NAME()``'s return value.

    ``NAME`` takes no arguments and returns ``(step, args)`` or ``(step, args, jit_kwargs)``:
    ``args`` a tuple of arrays / ``jax.ShapeDtypeStruct`` / pytrees, ``jit_kwargs`` a dict for
    ``jax.jit`` (``static_argnums``, ``donate_argnums``, ``in_shardings``, ...).
    """
    file, sep, name = entry.rpartition(":")
    if not sep or not file or not name.isidentifier():
        raise EntryError(f"{entry!r} is not FILE.py:NAME (e.g. steps.py:matmul_step)")
    path = Path(file)
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
    try:
        returned = factory()
    except Exception as exc:
        raise EntryError(f"{entry}() raised {_user_error(exc, path)}") from None
    return _unpack(entry, returned)


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
    entry: str, chip, target, cost_model: str, steps: int = 0, no_cache: bool = False
) -> Report:
    """Load ``entry`` and analyze it (``steps`` > 0: run and measure it); errors become messages."""
    from hlo_roofline import (  # targets first: it sets up jax for compile-only
        api,
        measured,
        targets,
    )

    with _input_errors():
        step, args, kwargs = load_entry(entry)
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
            isolate_trace=True,  # `analyze` and `check --from` then share cache entries
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


@main.command(context_settings=CONTEXT, short_help="Compile a JAX step; print its per-op roofline.")
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
):
    """Compile a JAX step and print its per-op roofline.

    NAME is a function of no arguments in FILE.py that returns (step, args) or
    (step, args, jit_kwargs); the step is compiled as
    hlo_roofline.analyze(step, *args, chip=..., target=..., **jit_kwargs). Args may be
    jax.ShapeDtypeStruct: nothing is allocated or run.

    \b
    Example:
      $ hlo-roofline analyze steps.py:matmul_step --chip v5e
      $ hlo-roofline analyze steps.py:matmul_step --target v5e:2x2 --json large.json --top 3
      $ hlo-roofline analyze steps.py:elementwise_step --chip v5e --format csv
    """
    _check_run(logdir, run)
    report = _compile(entry, chip, target, cost_model, steps if measure else 0, no_cache)
    name = entry.rpartition(":")[2]
    _emit({name: report}, fmt, top, csv_path, json_path, logdir, run or name, plot_path)


# -- hlo -------------------------------------------------------------------------------------------


@main.command(
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
def hlo_command(path, chip, cost_model, module_regex, csv_path, json_path, logdir, run, plot_path,
                fmt, top):  # fmt: skip
    """Analyze optimized HLO text, or every optimized module of an --xla_dump_to directory.

    With several modules, --csv/--json/--plot insert the module name before the suffix and
    --logdir writes one run per module under RUN/.

    \b
    Example:
      $ hlo-roofline hlo fixtures/mlp_bf16/tpu_v5e.hlo.txt --chip v5e --top 5
      $ hlo-roofline hlo fixtures/mlp_bf16/tpu_v5e.hlo.txt --chip v5e --json mlp.json
    """
    from hlo_roofline import api

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
    reports = {}
    bar = (
        click.progressbar(files, label="analyzing", file=sys.stderr, show_pos=True)
        if len(files) >= PROGRESS_MIN_FILES
        else contextlib.nullcontext(files)
    )
    with bar as files:
        for file in files:
            with _input_errors(str(file)):
                report = api.analyze_hlo(file, cost_model, chip)
            reports[api.module_key(file)] = report
    _emit(reports, fmt, top, csv_path, json_path, logdir, run or path.stem, plot_path)


# -- showing reports -------------------------------------------------------------------------------


def _check_run(logdir: Path | None, run: str | None) -> None:
    if run is not None and logdir is None:
        raise click.UsageError("--run needs --logdir")


def _with_key(path: Path, key: str, many: bool) -> Path:
    return path.with_name(f"{path.stem}.{key}{path.suffix}") if many else path


def _emit(
    reports: dict[str, Report], fmt, top, csv_path, json_path, logdir, run, plot_path
) -> None:
    """Save each report where asked (notes on stderr), then print them to stdout."""
    many = len(reports) > 1
    if fmt == "csv" and many:
        raise click.UsageError("--format csv prints one report: pass --module or use --csv")
    if plot_path is not None and any(r.chip is None for r in reports.values()):
        raise click.UsageError("--plot needs a chip to judge against: pass --chip")
    for key, report in reports.items():
        if csv_path:
            report.to_csv(_with_key(csv_path, key, many))
            _note(f"wrote {_with_key(csv_path, key, many)}")
        if json_path:
            report.to_json(_with_key(json_path, key, many))
            _note(f"wrote {_with_key(json_path, key, many)}")
        if logdir:
            _note(f"wrote {report.write_tensorboard(logdir, f'{run}/{key}' if many else run)}")
        if plot_path:
            _note(f"wrote {report.plot(_with_key(plot_path, key, many))}")
    if fmt == "json":
        data = {k: r.to_dict() for k, r in reports.items()}
        click.echo(json.dumps(data if many else next(iter(data.values())), allow_nan=False))
    elif fmt == "csv":
        click.echo(next(iter(reports.values())).to_csv(), nl=False)
    else:
        if many:
            click.echo(_modules_table(reports) + "\n")
        for key, report in sorted(reports.items(), key=_step_time, reverse=True):
            click.echo(_report_text(report, key if many else "", top))


def _note(text: str) -> None:
    click.echo(text, err=True)


def _step_time(item: tuple[str, Report]) -> float:
    summary = item[1].summary
    return float(summary.get("step_time_lower_s") or summary.get("bytes_accessed") or 0.0)


def _percent(x: float | None) -> str:
    return "—" if x is None else f"{x:.1%}"


def _number(x: float) -> str:
    return "—" if x != x else f"{x:.3g}"  # NaN: no bytes, no intensity


def _modules_table(reports: dict[str, Report]) -> str:
    rows = []
    for key, r in sorted(reports.items(), key=_step_time, reverse=True):
        s = r.summary
        rows.append(
            {
                "module": key,
                "ops": len(r.ops),
                "step ≥": format_seconds(s["step_time_lower_s"]) if r.chip else "—",
                "MFU ≤": _percent(s.get("mfu_upper_bound")) if r.chip else "—",
                "memory": _percent(s["time_share"]["memory"]) if r.chip else "—",
                "FLOPs": f"{s.get('flops', 0):.3g}",
                "bytes": f"{s.get('bytes_accessed', 0):.3g}",
                "coverage": _percent(s.get("coverage", 1.0)),
            }
        )
    return format_table(rows, right=("ops", "step ≥", "MFU ≤", "memory", "FLOPs", "bytes"))


def ops_table(report: Report, top: int = 10, width: int | None = None) -> str:
    """The top ops by predicted time (or by bytes, for a report not judged against a chip).

    Each op names the user's line that produced it and its op_name; those two are cut in the
    middle (a path's file name and line survive) to fit ``width`` (default: the terminal's).
    """
    ops = report.top(top or len(report.ops))
    rows = []
    if report.chip:
        ops = ops[ops["t_roofline_s"] > 0]
        for op in ops.itertuples():
            rows.append(
                {
                    "op": op.name,
                    "opcode": op.opcode,
                    "bound": op.bound,
                    "time": format_seconds(op.t_roofline_s),
                    "share": _percent(op.share),
                    "FLOP/B": _number(op.intensity),
                    "ridge": f"{op.critical_intensity:.0f}",
                    **_measured_cells(op),
                    **_where_cells(op),
                    "hint": op.hint,
                }
            )
        right = ("time", "share", "FLOP/B", "ridge", "measured", "eff.")
    else:
        for op in ops.itertuples():
            rows.append(
                {
                    "op": op.name,
                    "opcode": op.opcode,
                    "FLOPs": f"{op.flops:.3g}",
                    "bytes": f"{op.bytes_accessed:.3g}",
                    "FLOP/B": _number(
                        op.flops / op.bytes_accessed if op.bytes_accessed else float("nan")
                    ),
                    **_where_cells(op),
                }
            )
        right = ("FLOPs", "bytes", "FLOP/B")
    _fit(rows, ("user line", "op_name"), width or shutil.get_terminal_size((120, 24)).columns)
    return format_table(rows, right=right)


_MIN_WIDTH = {"user line": 32, "op_name": 20}


def _where_cells(op) -> dict[str, str]:
    """The user's line (its path relative to the working directory when inside it) and op_name."""
    user_source = getattr(op, "user_source", "")  # reports written before user_source lack it
    return {"user line": user_source.removeprefix(f"{Path.cwd()}/"), "op_name": op.op_name}


def _fit(rows: list[dict[str, str]], flexible: tuple[str, ...], width: int) -> None:
    """Shorten the ``flexible`` columns' cells so that the table fits ``width`` (each column keeps
    at least its minimum)."""
    if not rows:
        return
    widths = {h: max(len(h), *(len(str(r[h])) for r in rows)) for h in rows[0]}
    fixed = sum(w for h, w in widths.items() if h not in flexible) + 2 * (len(widths) - 1)
    wanted = {h: widths[h] for h in flexible}
    spare, total = width - fixed, sum(wanted.values())
    if total <= spare:
        return
    for h in flexible:  # room in proportion to what each column wants
        allowed = max(_MIN_WIDTH[h], spare * wanted[h] // total)
        shorten = shorten_path if h == "user line" else cut_middle
        for row in rows:
            row[h] = shorten(row[h], allowed)


def cut_middle(text: str, width: int) -> str:
    """``text`` shortened to ``width`` characters by an ellipsis in the middle; the end, where an
    op_name has its innermost scopes and a path its file, keeps three quarters."""
    if len(text) <= width:
        return text
    head = (width - 1) // 4
    return text[:head] + "…" + text[len(text) - (width - 1 - head) :]


def shorten_path(where: str, width: int) -> str:
    """``dir/file.py:line (function)`` in ``width`` characters: the directories are cut first, in
    their middle, so the file, line and function stay readable."""
    if len(where) <= width:
        return where
    directory, _, last = where.rpartition("/")
    if len(last) + 2 <= width:
        keep = width - len(last) - 2  # "…/" between what is kept of the directories and the file
        return f"{directory[:keep]}…/{last}"
    file_line, paren, function = last.partition(" (")
    room = width - len(file_line) - 5  # "…/", " (" and ")" around a function cut in the middle
    if not paren or room < 5:
        return cut_middle(where, width)
    return f"…/{file_line} ({cut_middle(function.removesuffix(')'), room)})"


def _measured_cells(op) -> dict[str, str]:
    """Measured time and roofline efficiency, for a report joined with a profile."""
    measured = getattr(op, "measured_s", None)
    if measured is None:
        return {}
    efficiency = getattr(op, "efficiency", float("nan"))
    cells = {"measured": format_seconds(measured) if measured == measured else "—"}
    cells["eff."] = _percent(efficiency) if efficiency == efficiency else "—"
    if efficiency == efficiency and efficiency > 1:
        cells["eff."] += " (above DRAM roof: cache-resident)"
    return cells


def summary_text(report: Report) -> str:
    """Step time bounds, MFU bound, time per bound, coverage and what was compiled for what."""
    s = report.summary
    lines = [f"module: {report.module}  ({len(report.ops)} ops, cost model {s.get('cost_model')})"]
    if s.get("compiled_for"):
        lines.append(f"compiled for: {s['compiled_for']}")
    if s.get("ops_before_optimization"):
        lines.append(
            "ops: the program before optimization (the compiler refused it): FLOPs are right, "
            "bytes and times are upper bounds (nothing fused)"
        )
    if report.chip:
        lines += [
            f"chip: {s.get('chip_name', report.chip)} ({report.chip}, {s.get('chip_profile')})",
            f"step time: ≥ {format_seconds(s['step_time_lower_s'])} (perfect overlap), "
            f"≤ {format_seconds(s['step_time_upper_s'])} (no overlap)",
            *_scheduled_lines(s),
            f"MFU bound: ≤ {_percent(s['mfu_upper_bound'])} of the {s.get('mfu_dtype', 'bf16')} peak",
            "time per bound: "
            + ", ".join(f"{b} {_percent(v)}" for b, v in s["time_share"].items()),
        ]
    else:
        lines.append("chip: none (pass --chip for verdicts and times)")
    if s.get("measured_step_s"):
        lines.append(
            f"measured step: {format_seconds(s['measured_step_s'])} "
            f"(per-op times cover {_percent(s.get('measured_coverage', 0.0))} of it)"
        )
        if s.get("measured_overlap"):
            lines.append(
                "warning: ops overlapped in the trace; capture on one core for clean times"
            )
    lines.append(f"FLOPs: {s.get('flops', 0):.4g}  bytes: {s.get('bytes_accessed', 0):.4g}")
    lines += memory.describe(s)
    coverage = f"coverage: {_percent(s.get('coverage', 1.0))} of ops priced"
    if s.get("unknown_ops"):
        coverage += f" (unknown: {', '.join(map(str, s['unknown_ops'][:5]))})"
    lines.append(coverage)
    return "\n".join(lines)


def _scheduled_lines(s: dict) -> list[str]:
    """The step as XLA scheduled it, and the communication it leaves exposed (newer reports)."""
    if s.get("step_time_scheduled_s") is None:
        return []
    lines = [f"step time as scheduled: {format_seconds(s['step_time_scheduled_s'])}"]
    if s.get("comm_time_s"):
        lines.append(
            f"communication: {format_seconds(s['comm_time_s'])}, exposed "
            f"{format_seconds(s['exposed_comm_s'])} ({_percent(s['exposed_comm_share'])} of the "
            "scheduled step)"
        )
    return lines


def _report_text(report: Report, heading: str, top: int) -> str:
    head = f"== {heading} ==\n" if heading else ""
    return f"{head}{ops_table(report, top)}\n\n{summary_text(report)}\n"


# -- chips -----------------------------------------------------------------------------------------


@main.command("chips", context_settings=CONTEXT, short_help="List chips, or show one with sources.")
@click.argument("name", required=False)
@_format_option("table", "json")
def chips_command(name, fmt):
    """List the chip database, or show one chip with every number and its source.

    \b
    Example:
      $ hlo-roofline chips
      $ hlo-roofline chips v5e
      $ hlo-roofline chips "TPU v5 lite" --format json
    """
    if name is None:
        rows = [
            {
                "key": c.key,
                "name": c.name,
                "bf16 FLOP/s": f"{c.peak_flops('bf16'):.4g}",
                "HBM B/s": f"{c.hbm_bandwidth:.4g}",
                "ridge FLOP/B": f"{c.critical_intensity('bf16'):.0f}",
            }
            for c in chips.all_chips()
        ]
        if fmt == "json":
            click.echo(json.dumps(rows))
        else:
            click.echo(format_table(rows, right=("bf16 FLOP/s", "HBM B/s", "ridge FLOP/B")))
        return
    try:
        chip = chips.get(name)
    except chips.UnknownChipError as exc:
        raise click.BadParameter(_one_line(exc), param_hint="NAME") from None
    rows = [
        {
            "field": path,
            "value": _value(sourced.value),
            "sources": ", ".join(sourced.keys),
            "note": sourced.note,
        }
        for path, sourced in sorted(chip.sources.items())
    ]
    cited = dict.fromkeys(k for s in chip.sources.values() for k in s.keys)
    table = chips.source_table()
    legend = {k: table[k] for k in cited if k in table}
    if fmt == "json":
        references = {k: {"title": s.title, "url": s.url} for k, s in legend.items()}
        click.echo(json.dumps({"key": chip.key, "name": chip.name, "numbers": rows,
                               "sources": references}))  # fmt: skip
        return
    ridges = ", ".join(
        f"{d} {chip.critical_intensity(d):.0f}" for d in ("bf16", "fp8", "int8") if chip.has_rate(d)
    )
    click.echo(f"{chip.name} ({chip.key}; aliases: {', '.join(chip.aliases) or '—'})")
    click.echo(f"ridge (FLOP per HBM byte): {ridges}\n")
    click.echo(format_table(rows))
    click.echo("\nsources:")
    for key, source in legend.items():
        click.echo(f"  {key}: {source.title}" + (f" <{source.url}>" if source.url else ""))


def _value(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


# -- check -----------------------------------------------------------------------------------------


def _load_report(path: Path, chip: chips.Chip | None) -> Report:
    with _input_errors():
        report = Report.read(path)
    return report.classify(chip) if chip is not None else report


@main.command(
    "check", context_settings=CONTEXT, short_help="CI gate: bounds, memory share, regression."
)
@click.argument("report_path", metavar="[REPORT]", required=False, type=click.Path(path_type=Path))
@click.option("--from", "entry", metavar="FILE.py:NAME", help="Compile this step instead.")
@chip_option
@target_option
@cost_model_option
@click.option("--rules", "rules_path", metavar="FILE",
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="TOML rules (top-level keys or [tool.hlo-roofline.check]).")  # fmt: skip
@click.option("--select", callback=_regex, metavar="REGEX",
              help="Ops whose name, opcode, op_name, source or user line matches.")  # fmt: skip
@click.option("--min-share", type=click.FloatRange(0, 100), metavar="PCT",
              help="Ops taking at least PCT% of the predicted step.")  # fmt: skip
@click.option("--require", type=click.Choice(REQUIRABLE),
              help="Every selected op must have this bound.")  # fmt: skip
@click.option("--max-memory-share", type=click.FloatRange(0, 100), metavar="PCT",
              help="Memory-bound selected ops take at most PCT% of the step.")  # fmt: skip
@click.option("--min-coverage", type=click.FloatRange(0, 100), metavar="PCT",
              help="At least PCT% of the ops have a known cost.")  # fmt: skip
@click.option("--max-exposed-comm", type=click.FloatRange(0, 100), metavar="PCT",
              help="Communication not hidden behind compute is at most PCT% of the scheduled "
                   "step.")  # fmt: skip
@click.option("--baseline", type=click.Path(path_type=Path), metavar="REPORT",
              help="Report to compare the predicted step time with.")  # fmt: skip
@click.option("--max-hbm", type=float, metavar="PCT",
              help="The step needs at most PCT% of one device's HBM (compile with --from to know "
              "its temporaries).")  # fmt: skip
@click.option("--max-regression", type=float, metavar="PCT",
              help="The step may be at most PCT% slower than --baseline.")  # fmt: skip
@no_cache_option
@_format_option("table", "json")
def check_command(
    report_path, entry, chip, target, cost_model, rules_path, no_cache, fmt, **flags
):
    """Gate CI on roofline rules: exit 0 pass, 1 with a table of violations, 2 bad input.

    Rules come from the flags, over --rules FILE, else over [tool.hlo-roofline.check] in the
    nearest pyproject.toml. REPORT is a CSV or JSON written by `analyze`/`hlo` (or a TensorBoard
    run directory); --chip re-judges it against another chip.

    \b
    Example:
      $ hlo-roofline check large.json --select dot_general --require compute
      $ hlo-roofline check --from steps.py:elementwise_step --chip v5e --require compute  # exit 1
      $ hlo-roofline check large.json --max-memory-share 50 --min-coverage 95
      $ hlo-roofline check large.json --baseline small.json --max-regression 10  # exit 1
    """
    if (report_path is None) == (entry is None):
        raise click.UsageError("give a REPORT or --from FILE.py:NAME (exactly one)")
    if target is not None and entry is None:
        raise click.UsageError("--target compiles a step: use it with --from FILE.py:NAME")
    with _input_errors():
        rules = _rules(rules_path, flags)
    if rules.empty:
        raise click.UsageError(
            "no rules: pass --require, --max-memory-share, --min-coverage, --max-hbm, "
            "--max-exposed-comm, --max-regression or --rules FILE, or add "
            "[tool.hlo-roofline.check] to pyproject.toml"
        )
    if entry is not None:
        report = _compile(entry, chip, target, cost_model, no_cache=no_cache)
    else:
        report = _load_report(report_path, chip)
    baseline = None
    if rules.baseline is not None:
        baseline = _load_report(Path(rules.baseline), None)
    with _input_errors():
        result = check(report, rules, baseline)
    _print_result(result, fmt, f"{len(result.selected)} ops selected")


def _rules(rules_path: Path | None, flags: dict) -> Rules:
    if rules_path is not None:
        base = read_rules(rules_path)
    else:
        found = pyproject_rules(Path.cwd())
        base = found[0] if found else Rules()
        if found:
            _note(f"rules from {found[1]}")
    try:
        return base.merged(**flags)
    except RuleError as exc:
        raise click.UsageError(_one_line(exc)) from None


def _print_result(result: CheckResult, fmt: str, passed_note: str) -> None:
    if fmt == "json":
        click.echo(
            json.dumps(
                {
                    "passed": result.passed,
                    "rules": result.rules.describe(),
                    "violations": [v.__dict__ for v in result.violations],
                }
            )
        )
    elif result.passed:
        click.echo(f"passed: {result.rules.describe()} ({passed_note})")
    else:
        click.echo(result.table())
        click.echo(f"\nfailed: {len(result.violations)} violation(s) of {result.rules.describe()}")
    if not result.passed:
        raise SystemExit(1)


# -- diff ------------------------------------------------------------------------------------------


@main.command("diff", context_settings=CONTEXT, short_help="Compare two reports op by op.")
@click.argument("a", type=click.Path(exists=True, path_type=Path), metavar="A")
@click.argument("b", type=click.Path(exists=True, path_type=Path), metavar="B")
@chip_option
@click.option("--fail-on-regression", type=float, metavar="PCT",
              help="Exit 1 if B's predicted step is more than PCT% slower than A's.")  # fmt: skip
@_format_option("table", "csv", "json")
@top_option
def diff_command(a, b, chip, fail_on_regression, fmt, top):
    """Compare two reports op by op: bound flips, time deltas, added and removed ops.

    Ops are matched by (op_name, source, opcode, shape), then without the shape, since fusion
    names change between compiles; duplicates pair up in program order. B is judged against A's
    chip (or both against --chip).

    \b
    Example:
      $ hlo-roofline diff small.json large.json
      $ hlo-roofline diff small.json large.json --format csv
      $ hlo-roofline diff small.json large.json --fail-on-regression 5  # exit 1
    """
    report_a, report_b = _load_report(a, chip), _load_report(b, chip)
    with _input_errors():
        diff = compare(report_a, report_b)
    if fmt == "json":
        click.echo(json.dumps(diff.to_dict(), default=float))
    elif fmt == "csv":
        click.echo(diff.ops.to_csv(index=False), nl=False)
    else:
        click.echo(_diff_text(diff, top))
    if fail_on_regression is not None:
        _, report_b, _ = judged_alike(report_a, report_b)
        rules = Rules(max_regression=fail_on_regression, baseline=str(a))
        result = check(report_b, rules, report_a)
        if not result.passed:
            if fmt == "table":
                click.echo("\n" + result.table())
            click.echo(f"failed: predicted step regressed more than {fail_on_regression:g}%",
                       err=fmt != "table")  # fmt: skip
            raise SystemExit(1)


def _diff_text(diff: Diff, top: int) -> str:
    changed = diff.ops[diff.ops["change"] != "same"]
    shown = changed.head(top) if top else changed
    rows = []
    for op in shown.itertuples():
        names = [n for n in (op.name_a, op.name_b) if isinstance(n, str)]
        bounds = [str(x) if isinstance(x, str) else "—" for x in (op.bound_a, op.bound_b)]
        rows.append(
            {
                "change": op.change,
                "op": " → ".join(dict.fromkeys(names)),
                "opcode": op.opcode,
                "bound": bounds[0] if bounds[0] == bounds[1] else " → ".join(bounds),
                "time A": format_seconds(op.t_roofline_s_a),
                "time B": format_seconds(op.t_roofline_s_b),
                "delta": ("+" if op.delta_s > 0 else "") + format_seconds(op.delta_s),
                "op_name": op.op_name,
            }
        )
    lines = [
        f"step: {format_seconds(diff.step_a)} → {format_seconds(diff.step_b)} "
        f"({diff.step_change:+.1%}) on {diff.chip}" + (f"; B {diff.note}" if diff.note else ""),
        f"flipped bound: {len(diff.flipped)}  added: {len(diff.added)}  "
        f"removed: {len(diff.removed)}  changed: {int((diff.ops['change'] == 'changed').sum())}",
    ]
    if diff.hbm_change is not None:
        lines.append(
            f"HBM per device: {diff.hbm_a / 1e9:.3g} GB → {diff.hbm_b / 1e9:.3g} GB "
            f"({diff.hbm_change:+.1%})"
        )
    if rows:
        lines += ["", format_table(rows, right=("time A", "time B", "delta"))]
    if len(shown) < len(changed):
        lines.append(f"… and {len(changed) - len(shown)} more (--top 0 for all)")
    return "\n".join(lines)


# -- plot ------------------------------------------------------------------------------------------


@main.command("plot", context_settings=CONTEXT, short_help="Draw a report's roofline chart.")
@click.argument("report_path", metavar="REPORT", type=click.Path(exists=True, path_type=Path))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=Path),
              callback=_image, help="The chart: .png or .svg.")  # fmt: skip
@chip_option
@click.option("--title", help="Chart title (default: module and chip).")
def plot_command(report_path, output, chip, title):
    """Draw a report's roofline chart: roofs per dtype, one point per op sized by its share.

    \b
    Example:
      $ hlo-roofline plot large.json -o roofline.png
      $ hlo-roofline plot mlp.json -o mlp.svg --chip v5p
    """
    report = _load_report(report_path, chip)
    if report.chip is None:
        raise click.UsageError("REPORT is not judged against a chip: pass --chip")
    _note(f"wrote {report.plot(output, title)}")


# -- trace -----------------------------------------------------------------------------------------


@main.command(
    "trace", context_settings=CONTEXT, short_help="Join a jax.profiler trace with its roofline."
)
@click.argument("path", type=click.Path(exists=True, path_type=Path), metavar="TRACE|DIR")
@chip_option
@_output_options
@_format_option("table", "csv", "json")
@top_option
def trace_command(path, chip, csv_path, json_path, logdir, run, plot_path, fmt, top):
    """Read a jax.profiler trace (an .xplane.pb or a directory holding one) and join the measured
    per-op times with the roofline of the optimized HLO embedded in it (nothing is recompiled).

    \b
    Example:
      $ hlo-roofline trace logs/ --chip host
    """
    from hlo_roofline import measured

    _check_run(logdir, run)
    try:
        result = measured.read_trace(path, chip=chip)
    except measured.TraceError as exc:
        raise InputError(_one_line(exc)) from None
    reports = result if isinstance(result, dict) else {path.stem: result}
    _emit(reports, fmt, top, csv_path, json_path, logdir, run or path.stem, plot_path)


if __name__ == "__main__":
    main(prog_name="hlo-roofline")
