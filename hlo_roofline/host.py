"""The ``host`` chip: this machine's CPU peaks, measured, so a CPU run is judged by its own roofline.

A short micro-benchmark (≈2–5 s) times what XLA's CPU backend actually reaches on the cores this
process may use: large matmuls per dtype (f32, bf16) and a streaming read of an array larger than
the last-level cache. It runs ``TRIALS`` passes a moment apart and keeps each figure's best: a busy
neighbour can only make a pass slower, so the best pass is the closest to the machine's roof.
Every measurement is cached in ``$XDG_CACHE_HOME/hlo_roofline/host_chip.json`` (default
``~/.cache/hlo_roofline``), keyed by CPU model, usable cores and jaxlib version, with the
conditions it was taken under (load average, cores, time); the roof is the best figure of the
measurements kept there, so measuring again (``host_chip(refresh=True)``, or ``measure()`` when
an op beats the roof) can only raise it. The chip is registered so ``chips.get("host")`` works
after :func:`host_chip`; it carries the last-level cache as an on-chip memory (``"llc"``), which
the measured join reads to tell a cache-resident op from a roof measured too low
(docs/measure.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import time
from pathlib import Path

from hlo_roofline import chips
from hlo_roofline._atomic import write_atomic
from hlo_roofline.chips import Chip

__all__ = [
    "CACHE_FILE_NAME", "benchmark", "cache_path", "host_chip", "last_level_cache_bytes",
    "measurements",
]  # fmt: skip

CACHE_FILE_NAME = "host_chip.json"
MATMUL_SIZE = 1024  # 2.1 GFLOP per f32 product: long enough to time, short enough for the budget
STREAM_BYTES = 128 * 2**20  # well above common last-level caches
TRIALS = 3  # passes over the three figures, a moment apart; each figure's best is kept
KEPT_MEASUREMENTS = 8  # per machine in the cache: the roof is the best figure among them
_BUDGET_S = 0.2  # per figure and pass, after compilation
_PAUSE_S = 0.25  # between passes: a burst of load on the machine may be over by the next one


def cache_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "hlo_roofline" / CACHE_FILE_NAME


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _fingerprint() -> str:
    import jaxlib

    return f"{_cpu_model()} | cores={_usable_cores()} | jaxlib={jaxlib.__version__}"


def _best_time(fn, *args) -> float:
    """Fastest of repeated calls within the time budget (the first call compiles and is dropped).

    On a single usable core the process's CPU time is used when it is shorter than the wall time:
    time the core spent on other processes is then left out, so a busy machine does not lower the
    peak. (With several cores CPU time adds up over threads, so wall time is the only measure.)
    """
    import jax

    jax.block_until_ready(fn(*args))
    one_core = _usable_cores() == 1
    best, spent, runs = float("inf"), 0.0, 0
    while runs < 3 or (spent < _BUDGET_S and runs < 20):
        wall, cpu = time.perf_counter(), time.process_time()
        jax.block_until_ready(fn(*args))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        elapsed = min(wall, cpu) if one_core and cpu > 0 else wall
        best, spent, runs = min(best, elapsed), spent + wall, runs + 1
    return best


def benchmark(trials: int = TRIALS) -> dict:
    """Measure matmul FLOP/s per dtype and streaming read bandwidth with XLA on this CPU: the best
    of ``trials`` passes, with the conditions they ran under."""
    import jax
    import jax.numpy as jnp

    cpu = jax.devices("cpu")[0]
    n = MATMUL_SIZE
    matmul = jax.jit(lambda a, b: a @ b)
    operands = {
        name: jax.device_put(jnp.full((n, n), 0.5, dtype), cpu)
        for name, dtype in (("f32", jnp.float32), ("bf16", jnp.bfloat16))
    }
    x = jax.device_put(jnp.ones((STREAM_BYTES // 4,), jnp.float32), cpu)
    read = jax.jit(lambda v: jnp.sum(v))
    load_before = _load_average()
    flops = dict.fromkeys(operands, 0.0)
    bandwidth = 0.0
    for trial in range(max(trials, 1)):
        if trial:
            time.sleep(_PAUSE_S)
        for name, a in operands.items():
            flops[name] = max(flops[name], 2 * n**3 / _best_time(matmul, a, a))
        bandwidth = max(bandwidth, STREAM_BYTES / _best_time(read, x))
    return {
        "flops": flops,
        "bandwidth": bandwidth,
        "measured_at": time.time(),
        "conditions": {
            "load_average": [load_before, _load_average()],  # 1-minute, before and after
            "usable_cores": _usable_cores(),
            "cpus": os.cpu_count(),
            "trials": max(trials, 1),
        },
    }


def _load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:  # not available on this system
        return None


def last_level_cache_bytes() -> int | None:
    """Size of the CPU's largest cache (Linux sysfs), or None where it cannot be read."""
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip().upper()
        except OSError:
            continue
        unit = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * unit)
    return max(sizes, default=None)


def _load_cache(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _store_cache(path: Path, data: dict) -> None:
    with contextlib.suppress(OSError):  # a read-only home only costs a re-measurement next time
        write_atomic(path, json.dumps(data, indent=1, sort_keys=True))


def _valid(entry) -> bool:
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("flops"), dict)
        and "f32" in entry["flops"]
        and isinstance(entry.get("bandwidth"), (int, float))
    )


def measurements() -> list[dict]:
    """This machine's cached measurements (figures and conditions), oldest first."""
    entry = _load_cache(cache_path()).get(_fingerprint())
    if not isinstance(entry, dict):
        return []
    kept = entry.get("measurements")
    if isinstance(kept, list):
        return [m for m in kept if _valid(m)]
    return [entry] if _valid(entry) else []  # a cache written before measurements were kept


def _best(kept: list[dict]) -> dict:
    """Each figure's best over the measurements kept (a roof is never lower than one reached)."""
    flops: dict[str, float] = {}
    for m in kept:
        for dtype, value in m["flops"].items():
            flops[dtype] = max(flops.get(dtype, 0.0), float(value))
    return {"flops": flops, "bandwidth": max(float(m["bandwidth"]) for m in kept)}


def host_chip(refresh: bool = False) -> Chip:
    """The ``host`` chip for this CPU and the cores this process may use: measured on first use,
    then from the cache; ``refresh`` measures again and keeps the best of old and new."""
    path = cache_path()
    key = _fingerprint()
    kept = measurements()
    if refresh or not kept:
        kept = [*kept, benchmark()][-KEPT_MEASUREMENTS:]
        cache = _load_cache(path)
        cache[key] = {**_best(kept), "measurements": kept}
        _store_cache(path, cache)
    best = _best(kept)
    cores = _usable_cores()
    flops = best["flops"]
    llc = last_level_cache_bytes()
    chip = Chip.custom(
        f"host CPU ({_cpu_model()}, {cores} core{'s' if cores > 1 else ''})",
        key="host",
        kind="cpu",
        peak_flops=flops,
        hbm_bandwidth=best["bandwidth"],
        vpu_flops=flops["f32"],  # elementwise work: a roof at the f32 rate
        cores={"cpu": cores},
        memory={"llc": chips.MemorySpace("llc", "chip", 1, capacity=llc)} if llc else {},
        source="host-benchmark",
    )
    return chips.register(chip)


chips.provide(chips.HOST, host_chip)  # chips.get("host") measures this machine
