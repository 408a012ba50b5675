"""Write a file atomically, with the permissions the user's umask gives a new file.

One writer for every file the tool leaves behind (reports, TensorBoard files, the HLO cache, the
host's measured rates): readers never see half a file, and the file is as readable as any other the
user creates (0644 under umask 022). ``tempfile.mkstemp`` would create it 0600 whatever the umask;
``os.open(..., 0o666)`` lets the kernel apply the umask, with no racy ``os.umask`` read.

A writer killed between its write and its rename leaves its temporary file behind; the file's name
carries the writer's pid, so the next writer in that folder removes those whose writer is gone
(:func:`remove_stale_temporaries`).

A URL (``gs://``, ``s3://``, ``memory://``: anything fsspec, or TensorBoard's gfile, has a
filesystem for) is written there, never to a local folder named ``gs:``; where no filesystem for it
is installed, :class:`RemoteUnavailableError` says which package would give one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
import time
from pathlib import Path

TMP_SUFFIX = ".tmp"
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
# A temporary file of this writer: ``.<name>.<pid>.<hex>.tmp`` (see _open_temporary).
_TEMPORARY = re.compile(rf"\..+\.(\d+)\.[0-9a-f]+{re.escape(TMP_SUFFIX)}")


def is_temporary(name: str) -> bool:
    """``name`` is one of this writer's temporary files (no other tool's ``.tmp``)."""
    return _TEMPORARY.fullmatch(name) is not None


STALE_TMP_S = 3600.0  # a temporary file this old belongs to a writer that died or hung


class RemoteUnavailableError(OSError):
    """A URL whose filesystem is not installed (or that it refuses)."""


def is_remote(path: str | os.PathLike) -> bool:
    """``path`` is a URL (``scheme://...``), not a local path (a ``Path`` never is one: it would
    have folded the ``//``)."""
    return isinstance(path, str) and _URL.match(path) is not None


def join(directory: str | os.PathLike, *names: str) -> str | Path:
    """``directory / name / ...``: a URL joined with ``/``, a local path as a ``Path``."""
    if is_remote(directory):
        return "/".join([str(directory).rstrip("/"), *names])
    return Path(directory).joinpath(*names)


def write_atomic(path: str | os.PathLike, text: str | bytes, mode: int | None = None) -> None:
    """Write ``text`` to a new file beside ``path`` and rename it over ``path``; a URL through
    its filesystem (:func:`write_remote`).

    ``mode``: permissions the file gets whatever the umask (``Report.write_tensorboard`` gives
    0644: a TensorBoard running as another user must read it); None: 0666 less the umask.

    A symbolic link is written through (its file replaced, the link kept). What is no regular
    file (``/dev/null``, ``/dev/stdout``, a FIFO a reader waits on) is written into as it is:
    renamed over, a device would be replaced by a file (root may rename over ``/dev/null``).
    """
    data = text.encode() if isinstance(text, str) else text
    if is_remote(path):
        write_remote(str(path), data)
        return
    path = Path(path)
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    try:
        kind = os.stat(path).st_mode
    except OSError:  # not there yet (or not to be looked at): the rename below says
        kind = stat.S_IFREG
    if not (stat.S_ISREG(kind) or stat.S_ISDIR(kind)):  # a directory: the rename refuses
        with open(path, "wb") as f:
            f.write(data)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path.parent)
    tmp, fd = _open_temporary(path)
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def remote_filesystem(url: str):
    """The filesystem that writes ``url``: fsspec's for its scheme, else TensorBoard's gfile
    (``write(url, data)``); :class:`RemoteUnavailableError` where neither is installed."""
    scheme = url.split("://", 1)[0].lower()
    reason = f"no filesystem for {scheme}:// is installed"
    try:
        import fsspec

        return fsspec.filesystem(scheme)
    except ImportError as exc:  # fsspec knows the scheme; its package is missing
        reason = f"{reason} ({str(exc).splitlines()[0]})"
    except (ValueError, TypeError, OSError):  # a scheme fsspec does not know
        pass
    try:
        from tensorboard.compat import tf

        tf.io.gfile.get_filesystem(url)  # raises where it has none
        return tf.io.gfile
    except Exception:
        raise RemoteUnavailableError(errno.EPROTONOSUPPORT, reason, url) from None


def write_remote(url: str, data: str | bytes) -> None:
    """``data`` written at ``url`` (an object store writes the whole object when it is closed:
    readers never see half of it)."""
    fs = remote_filesystem(url)
    payload = data.encode() if isinstance(data, str) else data
    try:
        if hasattr(fs, "pipe_file"):  # fsspec
            parent = url.rsplit("/", 1)[0]
            with contextlib.suppress(Exception):
                fs.makedirs(parent, exist_ok=True)
            fs.pipe_file(url, payload)
        else:
            with fs.GFile(url, "wb") as f:
                f.write(payload)
    except OSError:
        raise
    except Exception as exc:
        raise RemoteUnavailableError(errno.EIO, f"cannot write it ({exc})", url) from None


def read_remote(url: str) -> bytes:
    """The object at ``url``, through the filesystem that writes it (:func:`remote_filesystem`):
    ``FileNotFoundError`` where there is none, :class:`RemoteUnavailableError` where no
    filesystem for its scheme is installed."""
    fs = remote_filesystem(url)
    try:
        if hasattr(fs, "cat_file"):  # fsspec
            return fs.cat_file(url)
        if not fs.exists(url):
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", url)
        with fs.GFile(url, "rb") as f:
            return f.read()
    except OSError:
        raise
    except Exception as exc:
        raise RemoteUnavailableError(errno.EIO, f"cannot read it ({exc})", url) from None


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
    temporary file there as :func:`write_atomic` would: asked before minutes of work, not after.
    A URL: whether a filesystem for it is installed."""
    if is_remote(directory):
        try:
            remote_filesystem(str(directory))
        except RemoteUnavailableError as exc:
            return exc.strerror
        return None
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
        candidates = [directory / n for n in os.listdir(directory) if is_temporary(n)]
    except OSError:
        return
    for tmp in candidates:
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int(_TEMPORARY.fullmatch(tmp.name).group(1))
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
