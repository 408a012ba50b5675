"""``cache [show|prune|clear]``: the compile cache's size, and keeping it in bounds."""

from __future__ import annotations

import os
import re

import click

from hlo_roofline import cache
from hlo_roofline._json import dumps
from hlo_roofline.cli._common import CONTEXT, InputError, format_option


def _named(directory: str | None) -> str:
    """The cache folder an error names (the environment's, where it is not a folder)."""
    return directory or os.environ.get(cache.CACHE_ENV) or str(cache.default_dir())


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)


def _bytes(text: str) -> int:
    """``500M``, ``2G``, ``1.5GiB``, ``1000`` → bytes (powers of 1024)."""
    match = _SIZE.match(text)
    if not match:
        raise InputError(f"--max-size {text!r} is not a size such as 500M, 2G or 1000000")
    number, unit = float(match.group(1)), match.group(2).upper()
    return int(number * 1024 ** " KMGT".index(unit or " "))


def _size(count: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"


_dir_option = click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False),
    default=None,
    help=f"the cache directory (default: ${cache.CACHE_ENV} or ~/.cache/hlo_roofline/hlo)",
)


@click.group(
    "cache",
    context_settings=CONTEXT,
    invoke_without_command=True,
    short_help="Show, prune or clear the compile cache.",
)
@click.pass_context
def cache_command(ctx):
    """The compile cache: optimized HLO of every step compiled, so none is compiled twice.

    It keeps itself under 4 GiB, dropping the least recently used entries.

    \b
    Example:
      $ hlo-roofline cache
      $ hlo-roofline cache prune --max-size 1G
      $ hlo-roofline cache clear
    """
    if ctx.invoked_subcommand is None:
        ctx.invoke(show)


@cache_command.command("show", context_settings=CONTEXT)
@_dir_option
@format_option("text", "json")
def show(directory, fmt):
    """Where the cache is, how many entries and bytes it holds."""
    try:
        used = cache.usage(directory)
    except OSError as exc:
        raise InputError(f"cannot read {_named(directory)}: "
                         f"{exc.strerror or exc}") from None  # fmt: skip
    if fmt == "json":
        fields = {
            "directory": str(used.directory),
            "entries": used.entries,
            "bytes": used.bytes,
            "max_bytes": cache.DEFAULT_MAX_BYTES,
            "leftovers": used.leftovers,
        }
        click.echo(dumps(fields))
        return
    click.echo(f"directory  {used.directory}")
    click.echo(f"entries    {used.entries}")
    click.echo(f"size       {_size(used.bytes)} (kept under {_size(cache.DEFAULT_MAX_BYTES)})")
    if used.leftovers:
        click.echo(f"leftovers  {used.leftovers} lock/temporary files (prune removes stale ones)")


@cache_command.command("prune", context_settings=CONTEXT)
@_dir_option
@click.option("--max-size", default="4G", show_default=True, help="size to bring the cache under")
def prune_command(directory, max_size):
    """Drop the least recently used entries until the cache is under --max-size."""
    try:
        dropped = cache.prune(directory, _bytes(max_size))
        used = cache.usage(directory)
    except OSError as exc:
        raise InputError(f"cannot prune {_named(directory)}: "
                         f"{exc.strerror or exc}") from None  # fmt: skip
    click.echo(f"dropped {dropped} entries; {used.entries} left, {_size(used.bytes)}")


@cache_command.command("clear", context_settings=CONTEXT)
@_dir_option
def clear_command(directory):
    """Drop every entry, damaged ones too (an entry another process is compiling right now is
    left); files not named as entries are never touched."""
    try:
        dropped = cache.clear(directory)
        used = cache.usage(directory)
    except OSError as exc:
        raise InputError(f"cannot clear {_named(directory)}: "
                         f"{exc.strerror or exc}") from None  # fmt: skip
    note = f"; {used.entries} in use left" if used.entries else ""
    click.echo(f"dropped {dropped} entries{note}")
