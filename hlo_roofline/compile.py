"""Lowering and compiling a step: jit it, lower it on the caller's thread with the caller's frames
kept out of the HLO (a patch of a private JAX function), compile it through the on-disk cache
(:mod:`hlo_roofline.cache`), and the report of a program the compiler refused for want of memory."""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import re
import sys
import threading
import types
from collections.abc import Iterator

import jax

from hlo_roofline import chips, targets
from hlo_roofline.cache import Program, compile_program
from hlo_roofline.judge import memory
from hlo_roofline.placement import loaded
from hlo_roofline.report import Report

log = logging.getLogger(__name__)


def local_chip():
    """The chip of the local default device, when the database knows it (None on a CPU)."""
    device = jax.devices()[0]
    if device.platform == "cpu":
        return None
    try:
        return chips.get(device.device_kind)
    except chips.UnknownChipError:
        log.warning("local device %r is not in the chip database", device.device_kind)
        return None


def jitted(fn, jit_kwargs: dict):
    if not callable(fn):
        raise TypeError(
            f"expected a function (plain or jitted) to analyze, got {type(fn).__name__}"
        )
    if hasattr(fn, "lower"):
        if jit_kwargs:
            raise TypeError(f"{fn} is already jitted: pass {sorted(jit_kwargs)} to jax.jit instead")
        return fn
    return jax.jit(fn, **jit_kwargs)


def lower(step, args: tuple, kwargs: dict):
    """``step.lower`` of arguments already placed, on the caller's thread (so in the caller's JAX
    context: its mesh, axis rules, config), with the caller's own frames kept out of the HLO."""
    with _callers_hidden(sys._getframe()), _abstract_arrays_seen_as_arrays(step):
        lowered = step.lower(*args, **kwargs)  # this frame and every one above it hidden
    return _jax_lowered(step, lowered)


def _jax_lowered(step, lowered) -> jax.stages.Lowered:
    """The ``jax.stages.Lowered`` a framework's wrapper returns inside its own (Flax NNX's
    ``nnx.jit``, Equinox's ``filter_jit``: both keep it as ``.lowered``)."""
    if isinstance(lowered, jax.stages.Lowered):
        return lowered
    inner = getattr(lowered, "lowered", None)
    if isinstance(inner, jax.stages.Lowered):
        return inner
    raise TypeError(
        f"{_wrapper_name(step)}.lower() returned a {type(lowered).__module__}."
        f"{type(lowered).__qualname__}, not a jax.stages.Lowered (nor one holding it as "
        "`.lowered`), so its program cannot be read. Analyze the function it wraps, jitted with "
        "jax.jit (or pass the plain function: analyze jits it), or its optimized HLO with "
        "analyze_hlo(lowered.compile().as_text())"
    )


def _wrapper_name(step) -> str:
    kind = type(step)
    name = getattr(step, "__name__", None) or getattr(step, "fn", None) or "step"
    return f"{name} ({kind.__module__}.{kind.__qualname__})"


_EQUINOX_FILTER = threading.Lock()


@contextlib.contextmanager
def _abstract_arrays_seen_as_arrays(step) -> Iterator[None]:
    """While ``step`` (an Equinox ``filter_jit``) is lowered, its filter takes an abstract array
    (``jax.ShapeDtypeStruct``) for the array it stands for: traced, not static. Equinox's filter
    sees only concrete arrays, and the arguments placed for a compile-only target, or given as
    shapes, are abstract; without this they would be closed over as constants and fail."""
    equinox_jit = loaded("equinox._jit")
    if equinox_jit is None or not isinstance(step, getattr(equinox_jit, "_JitWrapper", ())):
        yield
        return
    concrete = getattr(equinox_jit, "is_array", None)
    if not callable(concrete):
        raise TypeError(
            f"this Equinox ({getattr(loaded('equinox'), '__version__', '?')}) filters "
            f"{_wrapper_name(step)}'s arguments in a way hlo_roofline does not know: analyze "
            "the function it wraps (step.__wrapped__) with jax.jit, its arrays as arguments"
        )

    def is_array(x) -> bool:
        return isinstance(x, jax.ShapeDtypeStruct) or concrete(x)

    with _EQUINOX_FILTER:
        equinox_jit.is_array = is_array
        try:
            yield
        finally:
            equinox_jit.is_array = concrete


# Code objects that were on the stack when a step was lowered: what called the analysis (a script,
# a test, the CLI) is not where the step's ops come from. Their frames are left out of the stack
# each op records in the HLO, so the HLO, and with it the compile cache's key, does not depend on
# who asked. The set only grows: a step traced once is lowered again from jax's trace cache with
# the stacks of its first caller, whose frames must go too.
_CALLER_CODES: set[types.CodeType] = set()
_hiding = threading.local()


@contextlib.contextmanager
def _callers_hidden(frame: types.FrameType | None) -> Iterator[None]:
    while frame is not None:
        _CALLER_CODES.add(frame.f_code)
        frame = frame.f_back
    if not _install_frame_filter():
        yield
        return
    before = getattr(_hiding, "active", False)
    _hiding.active = True
    try:
        yield
    finally:
        _hiding.active = before


@functools.cache
def _install_frame_filter() -> bool:
    """Wrap jax's choice of the frames an MLIR location records (per code object) so that, only
    while this thread is inside :func:`_callers_hidden`, callers' frames are left out. False where
    this jax has no such hook: the HLO then holds the callers' frames (only cache hits suffer)."""
    try:
        from jax._src.interpreters import mlir
    except ImportError:
        return False
    original = getattr(mlir, "_code_to_filename", None)
    if not callable(original):
        return False

    def code_to_filename(code):
        if getattr(_hiding, "active", False) and code in _CALLER_CODES:
            return None
        return original(code)

    mlir._code_to_filename = code_to_filename
    return True


def compile_lowered(
    lowered, target: targets.Target | None, cache
) -> tuple[Program | None, str]:
    """``(program, "")``: the optimized program, from the cache or compiled for ``target`` (None:
    here) and kept there; ``(None, error)`` where the compiler refused it for want of memory (its
    message says how much). Any other compile error propagates."""
    try:
        return compile_program(lowered, target, cache), ""
    except Exception as exc:
        if not memory.is_out_of_memory(str(exc)):
            raise
        return None, str(exc)


def refused(
    lowered, as_lowered: Report, error: str, inputs, donatable: int, target: targets.Target | None
) -> Report:
    """The report of a program the compiler would not build: the memory figures from its error;
    the ops of the program as lowered (before fusion, ``as_lowered``: its text analyzed) when it
    runs on one device, none otherwise: before partitioning, a sharded program's ops have global
    shapes, not one device's, so its ops, FLOPs, bytes and coverage are unknown (absent from the
    summary), not a global count."""
    compiled_for = chips.get(target.chip) if target is not None else local_chip()
    capacity = compiled_for.per_device().hbm_capacity if compiled_for else None
    sharded = any(b.shape != b.global_shape for b in inputs)
    ops = as_lowered.ops.iloc[0:0] if sharded else as_lowered.ops
    summary = dict(as_lowered.summary)
    if sharded:
        for key in _PER_DEVICE_UNKNOWN:
            summary.pop(key, None)
        summary["unknown_ops"] = []
    slices = None
    if target is not None:
        try:
            slices = targets.slice_shapes(target)
        except (targets.TargetError, KeyError):
            slices = None
    summary["memory"] = memory.from_error(
        error, inputs, donatable, capacity, _devices(lowered), slices
    )
    summary["ops_before_optimization"] = not sharded
    internals = None if sharded else as_lowered.internals  # the rows as lowered, or none
    return Report(ops.reset_index(drop=True), summary, as_lowered.module, internals)


# What the refused program's lowered text cannot say per device once it is sharded.
_PER_DEVICE_UNKNOWN = (
    "flops", "transcendentals", "bytes_accessed", "comm_bytes", "coverage", "notes",
)  # fmt: skip


def _devices(lowered) -> int | None:
    """The lowered program's device count (``mhlo.num_partitions`` × ``mhlo.num_replicas``)."""
    try:
        text = lowered.as_text()
    except Exception:  # a count we can do without
        return None
    counts = [
        int(m.group(1)) if (m := re.search(rf"mhlo\.{name} = (\d+)", text)) else 1
        for name in ("num_partitions", "num_replicas")
    ]
    return math.prod(counts)
