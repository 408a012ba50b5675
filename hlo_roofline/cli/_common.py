"""What the commands share: errors as one-line messages, the options, saving and printing reports."""

from __future__ import annotations

import contextlib
import json
import logging
import re
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import click

from hlo_roofline import chips, targets
from hlo_roofline.check import RuleError, read_toml
from hlo_roofline.cli.render import modules_table, report_text, step_time
from hlo_roofline.diff import NotClassifiedError
from hlo_roofline.hlo import HloParseError
from hlo_roofline.report import Report, ReportError

PROGRESS_MIN_FILES = 4
PACKAGE_DIR = Path(__file__).resolve().parent.parent
COST_MODELS = ("roofline", "xla")
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


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


@contextlib.contextmanager
def _output_errors(path: Path | str) -> Iterator[None]:
    """A file that cannot be written (a read-only folder, a file where a folder should be,
    ``/proc``) or a run outside its logdir: a one-line exit-2 message, never a traceback."""
    try:
        yield
    except OSError as exc:
        where = exc.filename or path
        raise InputError(f"cannot write {where}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise InputError(f"cannot write {path}: {_one_line(exc)}") from None


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


USER_PACKAGES_KEY = "user-packages"


def pyproject_user_packages(start: Path) -> tuple[str, ...]:
    """``user-packages`` of ``[tool.hlo-roofline]`` in the nearest ``pyproject.toml`` at or above
    ``start``: packages whose frames are the user's code even where installed."""
    here = start.resolve()
    for directory in (here, *here.parents):
        path = directory / "pyproject.toml"
        if not path.is_file():
            continue
        with _input_errors():
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
        raise click.BadParameter(_one_line(exc)) from None


def _target(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None or value == "local":
        return value
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


user_package_option = click.option(
    "--user-package",
    "user_packages",
    multiple=True,
    metavar="NAME",
    help="Count this package (name or directory) as your code in user_source even if installed "
    "(e.g. maxtext). Repeatable; also [tool.hlo-roofline] user-packages in pyproject.toml.",
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


# -- saving and printing reports ------------------------------------------------------------------


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
            with _output_errors(_with_key(csv_path, key, many)):
                report.to_csv(_with_key(csv_path, key, many))
            _note(f"wrote {_with_key(csv_path, key, many)}")
        if json_path:
            with _output_errors(_with_key(json_path, key, many)):
                report.to_json(_with_key(json_path, key, many))
            _note(f"wrote {_with_key(json_path, key, many)}")
        if logdir:
            with _output_errors(logdir):
                written = report.write_tensorboard(logdir, f"{run}/{key}" if many else run)
            _note(f"wrote {written}")
        if plot_path:
            with _output_errors(_with_key(plot_path, key, many)):
                chart = report.plot(_with_key(plot_path, key, many))
            _note(f"wrote {chart}")
    if fmt == "json":
        data = {k: r.to_dict() for k, r in reports.items()}
        click.echo(json.dumps(data if many else next(iter(data.values())), allow_nan=False))
    elif fmt == "csv":
        click.echo(next(iter(reports.values())).to_csv(), nl=False)
    else:
        if many:
            click.echo(modules_table(reports) + "\n")
        for key, report in sorted(reports.items(), key=step_time, reverse=True):
            click.echo(report_text(report, key if many else "", top))


def _note(text: str) -> None:
    click.echo(text, err=True)


def _load_report(path: Path, chip: chips.Chip | None) -> Report:
    with _input_errors():
        report = Report.read(path)
    if chip is not None:
        with _input_errors():
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
