"""Input files: the one reader of every file the tool is given (HLO text, reports, rules), and HLO
from a file (the parser itself reads text only; ``hlo.parse`` keeps text and paths apart).

A path that is not a regular file (a FIFO, a device, a directory, a socket) is refused before it
is opened: opening a FIFO waits for a writer forever. A gzipped file (``*.hlo.txt.gz``, how the
project's own fixtures are stored) is read as its text, whatever its name.
"""

from __future__ import annotations

import errno
import gzip
import os
import stat
import zlib
from pathlib import Path

from hlo_roofline.hlo.errors import HloParseError
from hlo_roofline.hlo.ir import Module
from hlo_roofline.hlo.parser import parse_module

GZIP_MAGIC = b"\x1f\x8b"
GZIP_SUFFIX = ".gz"


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def regular_file(path: str | os.PathLike) -> Path:
    """``path``, a regular file (a link to one is one); else an ``OSError`` saying what it is,
    raised without opening it."""
    path = Path(path)
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        code = errno.EISDIR if stat.S_ISDIR(mode) else errno.EINVAL
        kind = _kind(mode)
        raise OSError(code, f"is {kind}, not a regular file" if kind[0] == "a" else kind, str(path))
    return path


def read_bytes(path: str | os.PathLike) -> bytes:
    """A regular file's bytes, gunzipped where the file is gzip (by its first bytes): an
    ``OSError`` for anything else, a damaged gzip file included."""
    with open(regular_file(path), "rb") as f:
        return unzipped(f.read(), path)


def unzipped(data: bytes, path: str | os.PathLike) -> bytes:
    """``data`` gunzipped where it is gzip (by its first bytes); a damaged gzip an ``OSError``
    naming ``path``."""
    if data[:2] != GZIP_MAGIC:
        return data
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as exc:
        raise OSError(errno.EINVAL, f"not a readable gzip file ({exc})", str(path)) from None


def read_text(path: str | os.PathLike, errors: str = "strict") -> str:
    """A regular file's text (UTF-8; gunzipped where it is gzip); see :func:`read_bytes`."""
    return read_bytes(path).decode("utf-8", errors=errors)


def shown(path: str | os.PathLike) -> str:
    """A path as an error message names it: a very long one cut."""
    text = str(path)
    return text if len(text) <= 200 else f"{text[:200]}… ({len(text)} characters)"


def parse_file(path: str | Path) -> Module:
    """Parse an HLO text file (gzipped or not); a parse error names the file."""
    path = Path(path)
    try:
        text = read_text(path, errors="replace")
    except OSError as exc:
        raise HloParseError(f"cannot read {shown(path)}: {exc.strerror or exc}") from None
    try:
        return parse_module(text)
    except HloParseError as exc:
        exc.message = f"{path}: {exc.message}"
        raise exc from None
