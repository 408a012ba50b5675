"""On-disk cache of optimized HLO, so a step compiled once is not compiled again.

Why: a compile-only TPU compile of a real training step takes minutes on a small machine, and every
``analyze``, CLI run, ``check --from`` and ``assert_roofline`` would pay it again. The cache maps
everything the compiler's output depends on to the optimized HLO text:

- the lowered program, with its locations (they end up in the HLO metadata);
- the target and its devices (and, for NVIDIA targets, the packaged GPU target config);
- compiler options from the environment (``XLA_FLAGS``, ``LIBTPU_INIT_ARGS``);
- the versions of jax, jaxlib, libtpu and the CUDA plugin.

Entries live in ``~/.cache/hlo_roofline/hlo`` (``$XDG_CACHE_HOME`` is honoured), or wherever
``HLO_ROOFLINE_CACHE_DIR`` points. An entry is ``KEY.hlo.txt`` (the HLO) and ``KEY.meta.json``
(the key it was stored under, the memory figures and a SHA-256 of both), written atomically, the
metadata last. Nothing read back is trusted: an entry whose text, figures or key do not match its
metadata is a miss that compiles again, with a warning naming the file. A per-entry file lock
makes a second process wait for the first one's compile instead of repeating it; the wait has an
end (:data:`LOCK_TIMEOUT_S`, or at once when the holder is a stopped process), after which the
step compiles without the cache and a warning names the lock file and the holder's pid. Special
files (a FIFO, a device) where an entry should be are refused, never opened. The cache keeps
itself under :data:`DEFAULT_MAX_BYTES` by dropping the least recently used entries;
``hlo-roofline cache`` shows, prunes or clears it. A cache that cannot be written (read-only home)
is skipped with a log message: the compile still happens, it is only not kept.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import importlib.metadata
import json
import logging
import os
import re
import shutil
import stat
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from hlo_roofline import targets
from hlo_roofline._atomic import is_remote, is_temporary, remove_stale_temporaries, write_atomic

__all__ = [
    "CACHE_ENV",
    "DEFAULT_MAX_BYTES",
    "CacheWarning",
    "Program",
    "clear",
    "compile_program",
    "default_dir",
    "key",
    "prune",
    "usage",
]

log = logging.getLogger(__name__)

CACHE_ENV = "HLO_ROOFLINE_CACHE_DIR"
# bump when what is stored changes (3: a checksummed metadata file per entry; 4: a Pallas TPU
# kernel's constants printed)
FORMAT = "4"
_VERSIONED = ("jax", "jaxlib", "libtpu", "jax-cuda13-plugin", "jax-cuda13-pjrt")
HLO_SUFFIX = ".hlo.txt"
META_SUFFIX = ".meta.json"
LOCK_SUFFIX = ".lock"
KEY_LENGTH = 32  # hex digits of a key (see key): an entry's files are named <key><suffix>
_ENTRY_NAME = re.compile(
    rf"([0-9a-f]{{{KEY_LENGTH}}})({re.escape(HLO_SUFFIX)}|{re.escape(META_SUFFIX)}|{re.escape(LOCK_SUFFIX)})"
)
DEFAULT_MAX_BYTES = 4 << 30  # a few hundred real training steps
LOCK_TIMEOUT_S = 1800.0  # longer than any compile we have seen on a small machine
_LOCK_POLL_S = 0.2
# A memory figure beyond this (1 PiB) is not a real program's: the entry was damaged.
_MAX_MEMORY_BYTES = 1 << 50


class CacheWarning(UserWarning):
    """A cache entry or lock could not be used as it was; the step was compiled regardless."""


def default_dir() -> Path:
    """``$HLO_ROOFLINE_CACHE_DIR``, else ``$XDG_CACHE_HOME/hlo_roofline/hlo`` (``~/.cache``)."""
    if os.environ.get(CACHE_ENV):
        return folder(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "hlo_roofline" / "hlo"


class CacheFolderError(NotADirectoryError):
    """The cache's folder named is no local folder (a URL, a file, a FIFO)."""


def folder(directory: str | os.PathLike | None) -> Path:
    """The cache's folder: ``directory`` (None: :func:`default_dir`). The cache is a local folder
    of entries and their lock files, never ``./gs:/...``: a URL, or a path that is there and is
    no folder (a file, a FIFO, a device), is a :class:`CacheFolderError`."""
    if directory is None:
        return default_dir()
    if is_remote(directory):
        raise CacheFolderError(
            errno.ENOTDIR, "the compile cache is a local folder, not a URL", str(directory)
        )
    path = Path(directory).expanduser()
    if path.exists() and not path.is_dir():
        raise CacheFolderError(errno.ENOTDIR, "Not a directory", str(path))
    return path


class Program(NamedTuple):
    """What a compile leaves behind that the analysis needs."""

    text: str  # the optimized HLO
    memory: dict | None  # Compiled.memory_analysis() as {field: bytes}, where the backend has it


MEMORY_FIELDS = (
    "argument_size_in_bytes",
    "output_size_in_bytes",
    "alias_size_in_bytes",
    "temp_size_in_bytes",
    "generated_code_size_in_bytes",
)


def compile_program(
    lowered,
    target: targets.Target | None,
    cache: bool | str | os.PathLike = True,
    max_bytes: int | None = DEFAULT_MAX_BYTES,
) -> Program:
    """Compile a ``jax.stages.Lowered`` program for ``target`` (None: here), or find it in the cache.

    ``cache``: True for :func:`default_dir`, a directory, or False to compile without the cache.
    ``max_bytes``: the cache's size after this entry is written (None: no limit).
    Compile errors (a program too big for the target's memory, say) propagate and leave no entry.
    """
    if cache is False or cache is None:
        return _compile(lowered)
    directory = folder(None if cache is True else cache)
    entry_key = key(lowered, target)
    path = directory / f"{entry_key}{HLO_SUFFIX}"
    written = False
    with _locked(directory / f"{entry_key}{LOCK_SUFFIX}") as usable:
        program = _read(path, entry_key) if usable else None
        if program is None:
            program = _compile(lowered)
            written = usable and _write(path, entry_key, program)
    if written and max_bytes is not None:  # only a write grows the cache: a hit scans nothing
        with contextlib.suppress(OSError):
            prune(directory, max_bytes, keep=entry_key)
    return program


def _compile(lowered) -> Program:
    compiled = lowered.compile()
    try:
        stats = compiled.memory_analysis()
    except Exception:  # some backends have none
        stats = None
    memory = None
    if stats is not None:
        memory = {f: int(getattr(stats, f, 0) or 0) for f in MEMORY_FIELDS}
    return Program(optimized_text(compiled), memory)


def optimized_text(compiled) -> str:
    """``compiled.as_text()``, with the constants it elides (``{...}``: over 10 elements) printed
    where a Pallas TPU kernel may read them: splash attention's block mask says which blocks it
    computes (cost/attention_kernels.py). Other programs' text stays as ``as_text()`` writes it."""
    text = compiled.as_text()
    if "tpu_custom_call" not in text or "{...}" not in text:
        return text
    try:
        from jaxlib import _hlo

        options = _hlo.HloPrintOptions()
        options.print_large_constants = True
        return compiled.runtime_executable().hlo_modules()[0].to_string(options)
    except (ImportError, AttributeError, IndexError, RuntimeError):  # a jaxlib without them
        return text


def key(lowered, target: targets.Target | str | None) -> str:
    """A digest of everything the optimized HLO depends on (see the module docstring). The
    analysis passes its :class:`~hlo_roofline.targets.Target`; a string is parsed here."""
    target = targets.parse_target(target) if target is not None else None
    digest = hashlib.sha256(f"hlo_roofline cache {FORMAT}\0".encode())
    digest.update(lowered.as_text(debug_info=True).encode())
    digest.update(f"\0{target}\0".encode())
    for flags in ("XLA_FLAGS", "LIBTPU_INIT_ARGS"):  # compiler options from the environment
        digest.update(f"{flags}={os.environ.get(flags, '')}\0".encode())
    for dist in _VERSIONED:
        try:
            digest.update(f"{dist}={importlib.metadata.version(dist)}\0".encode())
        except importlib.metadata.PackageNotFoundError:
            digest.update(f"{dist}=none\0".encode())
    if target is not None:
        if target.platform == "cuda":
            digest.update(targets.gpu_target_config(target.chip).encode())
        digest.update(repr([(d.id, str(d)) for d in target.devices]).encode())
    return digest.hexdigest()[:KEY_LENGTH]


# -- an entry: written with its checksum, read back only if everything agrees ---------------------


def _checksum(entry_key: str, text: str, memory: dict | None) -> str:
    """SHA-256 over the key, the memory figures and the HLO: a change to any of them shows."""
    digest = hashlib.sha256(f"{FORMAT}\0{entry_key}\0".encode())
    digest.update(json.dumps(memory, sort_keys=True).encode())
    digest.update(b"\0")
    digest.update(text.encode())
    return digest.hexdigest()


def _meta_path(path: Path) -> Path:
    return path.with_name(path.name.removesuffix(HLO_SUFFIX) + META_SUFFIX)


class _Damaged(Exception):
    """An entry that exists but cannot be trusted; the message says why."""


def _read(path: Path, entry_key: str) -> Program | None:
    """A complete entry that matches its checksum, or None (compiled again).

    A missing entry is a plain miss; a damaged one (edited, truncated, stored under another key,
    a special file) is a miss with a :class:`CacheWarning` naming the file."""
    meta_path = _meta_path(path)
    try:
        if not _is_regular(path) and not _is_regular(meta_path):
            return None
        text = _read_regular(path)
        meta = json.loads(_read_regular(meta_path))
        program = _verified(meta, text, entry_key)
        with contextlib.suppress(OSError):
            os.utime(meta_path)  # its last use, for pruning the least recently used
        return program
    except FileNotFoundError as exc:
        # The HLO without its metadata: a writer killed between its two renames.
        _warn_damaged(Path(exc.filename or path), "incomplete entry (a writer was interrupted)")
    except _Damaged as exc:
        _warn_damaged(path, str(exc))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        _warn_damaged(path, f"unreadable ({exc.__class__.__name__}: {exc})")
    return None


def _verified(meta, text: str, entry_key: str) -> Program:
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise _Damaged("metadata of another format or not an object")
    if meta.get("key") != entry_key:
        raise _Damaged(f"stored under key {meta.get('key')!r}, not {entry_key!r}")
    memory = meta.get("memory")
    _check_memory(memory)
    if meta.get("sha256") != _checksum(entry_key, text, memory):
        raise _Damaged("its content does not match its checksum (changed or truncated)")
    if not text.startswith("HloModule "):
        raise _Damaged("not HLO text")
    return Program(text, memory)


def _check_memory(memory) -> None:
    if memory is None:
        return
    if not isinstance(memory, dict) or set(memory) != set(MEMORY_FIELDS):
        raise _Damaged(f"memory figures are not the fields {list(MEMORY_FIELDS)}")
    for field, value in memory.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Damaged(f"memory figure {field} = {value!r} is not a whole number of bytes")
        if not 0 <= value <= _MAX_MEMORY_BYTES:
            raise _Damaged(f"memory figure {field} = {value} is out of range")


def _warn_damaged(path: Path, why: str) -> None:
    warnings.warn(
        f"HLO cache entry {path} not used: {why}; compiling the step again "
        f"(the entry is replaced; `hlo-roofline cache clear` empties the cache)",
        CacheWarning,
        stacklevel=4,
    )


def _is_regular(path: Path) -> bool:
    """True for a regular file; False if absent; a special file is refused (never opened)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(mode):
        raise _Damaged(f"{path} is not a regular file")
    return True


def _read_regular(path: Path) -> str:
    """The text of a regular file, opened without blocking (a FIFO swapped in meanwhile)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise _Damaged(f"{path} is not a regular file")
        return handle.read().decode("utf-8")


def _write(path: Path, entry_key: str, program: Program) -> bool:
    """The HLO first, the metadata last: an entry exists once its metadata does. Whether it was
    written."""
    meta = {
        "format": FORMAT,
        "key": entry_key,
        "memory": program.memory,
        "sha256": _checksum(entry_key, program.text, program.memory),
    }
    try:
        for target in (path, _meta_path(path)):  # a special file there is refused
            if os.path.lexists(target):
                _is_regular(target)
        write_atomic(path, program.text)
        write_atomic(_meta_path(path), json.dumps(meta))
    except (OSError, _Damaged) as exc:
        log.info("HLO cache entry %s not written: %s", path, exc)
        return False
    return True


# -- the lock: a wait with an end ------------------------------------------------------------------


@contextlib.contextmanager
def _locked(path: Path, timeout_s: float | None = None) -> Iterator[bool]:
    """Hold the entry's lock; yields False when the cache cannot be used (compile without it)."""
    timeout_s = LOCK_TIMEOUT_S if timeout_s is None else timeout_s
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW, 0o666)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
            _warn(f"HLO cache lock {path} is not a regular file: compiling without the cache")
        else:
            log.info("HLO cache %s not usable (%s): compiling without it", path.parent, exc)
        yield False
        return
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        _warn(f"HLO cache lock {path} is not a regular file: compiling without the cache")
        yield False
        return
    with os.fdopen(fd, "r+b", buffering=0) as handle:
        if not _acquire(handle, path, timeout_s):
            yield False
            return
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(f"{os.getpid()}\n".encode())
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _acquire(handle, path: Path, timeout_s: float) -> bool:
    """Wait for the lock until ``timeout_s``, or not at all when its holder is stopped."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            pass
        holder = _holder(path)
        state = _process_state(holder) if holder else None
        if state in ("T", "t"):
            _warn(
                f"HLO cache lock {path} is held by process {holder}, which is stopped: "
                "compiling without the cache"
            )
            return False
        if time.monotonic() >= deadline:
            who = f"process {holder}" if holder else "another process"
            _warn(
                f"HLO cache lock {path} still held by {who} after {timeout_s:.0f} s: "
                "compiling without the cache"
            )
            return False
        time.sleep(_LOCK_POLL_S)


def _holder(path: Path) -> int | None:
    try:
        return int(path.read_text().strip() or 0) or None
    except (OSError, ValueError):
        return None


def _process_state(pid: int) -> str | None:
    """The state letter of ``/proc/PID/stat`` (R, S, D, T, Z, ...), None where unknown."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rpartition(")")[2].split()[0] if ")" in text else None


def _warn(message: str) -> None:
    log.warning("%s", message)
    warnings.warn(message, CacheWarning, stacklevel=4)


# -- size: show, prune, clear ----------------------------------------------------------------------


@dataclass(frozen=True)
class Usage:
    """What a cache directory holds."""

    directory: Path
    entries: int
    bytes: int
    leftovers: int  # lock and temporary files without an entry


def entry_key_of(name: str) -> str | None:
    """The key of a file named as an entry's (``<key>.hlo.txt``, ``.meta.json``, ``.lock``), else
    None: the cache commands touch no other file (a user's ``model.hlo.txt`` in ``--dir``)."""
    match = _ENTRY_NAME.fullmatch(name)
    return match.group(1) if match else None


def _entry_files(directory: Path) -> dict[str, list[Path]]:
    """Each key's files in ``directory``, by name alone (an unreadable folder: none)."""
    found: dict[str, list[Path]] = {}
    try:
        names = os.listdir(directory)
    except OSError:
        return found
    for name in names:
        entry_key = entry_key_of(name)
        if entry_key is not None:
            found.setdefault(entry_key, []).append(directory / name)
    return found


def _entries(directory: Path) -> list[tuple[float, int, str]]:
    """(last use, bytes, key) of every entry (its HLO or its metadata there), the least recently
    used first."""
    found = []
    for entry_key, paths in _entry_files(directory).items():
        files = [f for f in paths if not f.name.endswith(LOCK_SUFFIX)]
        if not files:
            continue
        with contextlib.suppress(OSError):
            infos = [os.lstat(f) for f in files if os.path.lexists(f)]
            found.append((max(i.st_mtime for i in infos), sum(i.st_size for i in infos), entry_key))
    return sorted(found)


def usage(directory: str | os.PathLike | None = None) -> Usage:
    directory = folder(directory)
    if not directory.is_dir():
        return Usage(directory, 0, 0, 0)
    entries = _entries(directory)
    keys = {k for _, _, k in entries}
    locks = [k for k in _entry_files(directory) if k not in keys]
    with contextlib.suppress(OSError):
        temporaries = [n for n in os.listdir(directory) if is_temporary(n)]
    return Usage(
        directory, len(entries), sum(b for _, b, _ in entries), len(locks) + len(temporaries)
    )


def prune(directory: str | os.PathLike | None, max_bytes: int, keep: str | None = None) -> int:
    """Drop the least recently used entries until the cache holds at most ``max_bytes``; entries
    another process holds the lock of are left alone. Returns the number of entries dropped."""
    directory = folder(directory)
    if not directory.is_dir():
        return 0
    entries = _entries(directory)
    total = sum(b for _, b, _ in entries)
    dropped = 0
    for _, size, entry_key in entries:
        if total <= max_bytes:
            break
        if entry_key != keep and _drop(directory, entry_key):
            total -= size
            dropped += 1
    for entry_key, files in _entry_files(directory).items():  # what is left of entries gone
        if not any(f.name.endswith(HLO_SUFFIX) for f in files):  # (a killed compile's lock)
            _drop(directory, entry_key)
    remove_stale_temporaries(directory)
    return dropped


def clear(directory: str | os.PathLike | None = None) -> int:
    """Drop every entry nobody holds, damaged ones too (a folder or a link where a file should
    be); returns how many were dropped. Only files named as entries are touched."""
    return prune(directory, 0)


def _drop(directory: Path, entry_key: str) -> bool:
    """Remove an entry and its lock file, if no other process holds that lock now."""
    lock = directory / f"{entry_key}{LOCK_SUFFIX}"
    if not os.path.lexists(lock) or _is_regular_quietly(lock):
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW, 0o666)
        except OSError:
            return False
        with os.fdopen(fd, "r+b", buffering=0) as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # held by a compile now (or a lock this system cannot take)
                return False
            _remove_entry(directory, entry_key)
        return True
    _remove_entry(directory, entry_key)  # the lock itself is damaged (a folder, a FIFO, a link)
    return True


def _is_regular_quietly(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _remove_entry(directory: Path, entry_key: str) -> None:
    """An entry's files, whatever they are: a folder named as one is removed with what it holds
    (the name is the cache's), a link without its target; an error leaves that file."""
    for suffix in (META_SUFFIX, HLO_SUFFIX, LOCK_SUFFIX):
        path = directory / f"{entry_key}{suffix}"
        try:
            if stat.S_ISDIR(os.lstat(path).st_mode):
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink()
        except OSError:
            continue
