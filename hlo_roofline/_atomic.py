"""Write a file atomically, with the permissions the user's umask gives a new file.

One writer for every file the tool leaves behind (reports, TensorBoard files, the HLO cache, the
host's measured rates): readers never see half a file, and the file is as readable as any other the
user creates (0644 under umask 022). ``tempfile.mkstemp`` would create it 0600 whatever the umask;
``os.open(..., 0o666)`` lets the kernel apply the umask, with no racy ``os.umask`` read.

A writer killed between its write and its rename leaves its temporary file behind; the file's name
carries the writer's pid, so the next writer in that folder removes those whose writer is gone
(:func:`remove_stale_temporaries`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import time
from pathlib import Path

TMP_SUFFIX = ".tmp"
STALE_TMP_S = 3600.0  # a temporary file this old belongs to a writer that died or hung


def write_atomic(path: str | os.PathLike, text: str, mode: int | None = None) -> None:
    """Write ``text`` to a new file beside ``path`` and rename it over ``path``.

    ``mode``: permissions the file gets whatever the umask (``Report.write_tensorboard`` gives
    0644: a TensorBoard running as another user must read it); None: 0666 less the umask.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path.parent)
    tmp, fd = _open_temporary(path)
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _open_temporary(path: Path) -> tuple[Path, int]:
    """A new temporary file beside ``path``, named with the writer's pid (see the module)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):  # a name another writer took between our choice and the open: another
        tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(6)}{TMP_SUFFIX}"
        try:
            return tmp, os.open(tmp, flags, 0o666)
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {path}")


def unwritable(directory: str | os.PathLike) -> str | None:
    """Why files cannot be written in ``directory`` (None if they can), found by creating it and a
    temporary file there as :func:`write_atomic` would: asked before minutes of work, not after."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tmp, fd = _open_temporary(directory / ".probe")
        os.close(fd)
        tmp.unlink()
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def remove_stale_temporaries(directory: Path) -> None:
    """Remove the temporary files of writers that are gone (killed mid-write) or an hour old."""
    now = time.time()
    try:
        candidates = list(directory.glob(f".*{TMP_SUFFIX}"))
    except OSError:
        return
    for tmp in candidates:
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int(tmp.name.removesuffix(TMP_SUFFIX).rsplit(".", 2)[1])
            info = os.lstat(tmp)
            stale = now - info.st_mtime > STALE_TMP_S or not _alive(pid)
            if stale and stat.S_ISREG(info.st_mode):
                tmp.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True
