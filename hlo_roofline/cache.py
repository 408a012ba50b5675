"""On-disk cache of optimized HLO, so a step compiled once is not compiled again.

Why: a compile-only TPU compile of a real training step takes minutes on a small machine, and every
``analyze``, CLI run, ``check --from`` and ``assert_roofline`` would pay it again. The cache maps
everything the compiler's output depends on to the optimized HLO text:

- the lowered program, with its locations (they end up in the HLO metadata);
- the target and its devices (and, for NVIDIA targets, the packaged GPU target config);
- compiler options from the environment (``XLA_FLAGS``, ``LIBTPU_INIT_ARGS``);
- the versions of jax, jaxlib, libtpu and the CUDA plugin.

Entries live in ``~/.cache/hlo_roofline/hlo`` (``$XDG_CACHE_HOME`` is honoured), or wherever
``HLO_ROOFLINE_CACHE_DIR`` points. Writes are atomic (a temporary file renamed into place) and a
per-entry file lock makes a second process wait for the first one's compile instead of repeating it.
A cache that cannot be written (read-only home) is skipped with a log message: the compile still
happens, it is only not kept.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from hlo_roofline import targets
from hlo_roofline._atomic import write_atomic

__all__ = ["CACHE_ENV", "Program", "compile_program", "default_dir", "key"]

log = logging.getLogger(__name__)

CACHE_ENV = "HLO_ROOFLINE_CACHE_DIR"
FORMAT = "2"  # bump when what is stored changes (2: memory figures beside the HLO)
_VERSIONED = ("jax", "jaxlib", "libtpu", "jax-cuda13-plugin", "jax-cuda13-pjrt")


def default_dir() -> Path:
    """``$HLO_ROOFLINE_CACHE_DIR``, else ``$XDG_CACHE_HOME/hlo_roofline/hlo`` (``~/.cache``)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "hlo_roofline" / "hlo"


class Program(NamedTuple):
    """What a compile leaves behind that the analysis needs."""

    text: str  # the optimized HLO
    memory: dict | None  # Compiled.memory_analysis() as {field: bytes}, where the backend has it


_MEMORY_FIELDS = (
    "argument_size_in_bytes",
    "output_size_in_bytes",
    "alias_size_in_bytes",
    "temp_size_in_bytes",
    "generated_code_size_in_bytes",
)


def compile_program(lowered, target: str | None, cache: bool | str | os.PathLike = True) -> Program:
    """Compile a ``jax.stages.Lowered`` program for ``target`` (None: here), or find it in the cache.

    ``cache``: True for :func:`default_dir`, a directory, or False to compile without the cache.
    Compile errors (a program too big for the target's memory, say) propagate and leave no entry.
    """
    if cache is False or cache is None:
        return _compile(lowered)
    directory = default_dir() if cache is True else Path(cache)
    path = directory / f"{key(lowered, target)}.hlo.txt"
    with _locked(path.with_suffix(".lock")) as usable:
        program = _read(path) if usable else None
        if program is None:
            program = _compile(lowered)
            if usable:
                _write(path, program)
    return program


def _compile(lowered) -> Program:
    compiled = lowered.compile()
    try:
        stats = compiled.memory_analysis()
    except Exception:  # some backends have none
        stats = None
    memory = None
    if stats is not None:
        memory = {f: int(getattr(stats, f, 0) or 0) for f in _MEMORY_FIELDS}
    return Program(compiled.as_text(), memory)


def key(lowered, target: str | None) -> str:
    """A digest of everything the optimized HLO depends on (see the module docstring)."""
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
        spec = targets.parse_target(target)
        if spec.platform == "cuda":
            digest.update(targets.gpu_target_config(spec.chip).encode())
        digest.update(repr([(d.id, str(d)) for d in targets.devices(spec)]).encode())
    return digest.hexdigest()[:32]


def _read(path: Path) -> Program | None:
    """A complete entry, or None (missing, unreadable, or not HLO: compiled again)."""
    try:
        text = path.read_text()
        memory = json.loads(path.with_suffix(".memory.json").read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not text.startswith("HloModule ") or not isinstance(memory, dict | None):
        return None
    return Program(text, memory)


def _write(path: Path, program: Program) -> None:
    """The memory figures first, the HLO last: an entry exists once its text does."""
    try:
        write_atomic(path.with_suffix(".memory.json"), json.dumps(program.memory))
        write_atomic(path, program.text)
    except OSError as exc:
        log.info("HLO cache entry %s not written: %s", path, exc)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[bool]:
    """Hold the entry's lock; yields False when the cache directory cannot be used."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a")  # noqa: SIM115  (closed below, after the lock is released)
    except OSError as exc:
        log.info("HLO cache %s not usable (%s): compiling without it", path.parent, exc)
        yield False
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
