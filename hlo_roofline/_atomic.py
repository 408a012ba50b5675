"""Write a file atomically, with the permissions the user's umask gives a new file.

One writer for every file the tool leaves behind (reports, TensorBoard files, the HLO cache, the
host's measured rates): readers never see half a file, and the file is as readable as any other the
user creates (0644 under umask 022). ``tempfile.mkstemp`` would create it 0600 whatever the umask;
``os.open(..., 0o666)`` lets the kernel apply the umask, with no racy ``os.umask`` read.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def write_atomic(path: str | os.PathLike, text: str, mode: int | None = None) -> None:
    """Write ``text`` to a new file beside ``path`` and rename it over ``path``.

    ``mode``: permissions the file gets whatever the umask (``Report.write_tensorboard`` gives
    0644: a TensorBoard running as another user must read it); None: 0666 less the umask.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):  # a name another writer took between our choice and the open: another
        tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(tmp, flags, 0o666)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(f"no free temporary name beside {path}")
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
