"""The ``host`` chip: this machine's CPU peaks, measured, so a CPU run is judged by its own roofline.

A short micro-benchmark (≈1–3 s) times what XLA's CPU backend actually reaches on the cores this
process may use: large matmuls per dtype (f32, bf16) and a streaming read of an array larger than
the last-level cache. The result is cached in ``$XDG_CACHE_HOME/hlo_roofline/host_chip.json``
(default ``~/.cache/hlo_roofline``), keyed by CPU model, usable cores and jaxlib version, and
registered so ``chips.get("host")`` works after :func:`host_chip`.

These are achieved ceilings, not datasheet numbers: dots of the benchmark's size run near 1.0
efficiency; small or cache-resident ops can beat the DRAM roof (efficiency > 1, see
docs/measure.md).
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

from hlo_roofline import chips
from hlo_roofline.chips import Chip

__all__ = ["CACHE_FILE_NAME", "benchmark", "cache_path", "host_chip"]

CACHE_FILE_NAME = "host_chip.json"
MATMUL_SIZE = 1024  # 2.1 GFLOP per f32 product: long enough to time, short enough for the budget
STREAM_BYTES = 128 * 2**20  # well above common last-level caches
_BUDGET_S = 0.35  # per measurement, after compilation


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


def benchmark() -> dict:
    """Measure matmul FLOP/s per dtype and streaming read bandwidth with XLA on this CPU."""
    import jax
    import jax.numpy as jnp

    cpu = jax.devices("cpu")[0]
    n = MATMUL_SIZE
    matmul = jax.jit(lambda a, b: a @ b)
    flops = {}
    for name, dtype in (("f32", jnp.float32), ("bf16", jnp.bfloat16)):
        a = jax.device_put(jnp.full((n, n), 0.5, dtype), cpu)
        flops[name] = 2 * n**3 / _best_time(matmul, a, a)
    elements = STREAM_BYTES // 4
    x = jax.device_put(jnp.ones((elements,), jnp.float32), cpu)
    read = jax.jit(lambda v: jnp.sum(v))
    bandwidth = STREAM_BYTES / _best_time(read, x)
    return {"flops": flops, "bandwidth": bandwidth, "measured_at": time.time()}


def _load_cache(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _store_cache(path: Path, data: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home only costs a re-measurement next time


def host_chip(refresh: bool = False) -> Chip:
    """The ``host`` chip for this CPU and the cores this process may use (measured once, cached)."""
    path = cache_path()
    key = _fingerprint()
    cache = _load_cache(path)
    entry = cache.get(key)
    valid = isinstance(entry, dict) and {"flops", "bandwidth"} <= set(entry)
    if refresh or not valid:
        entry = benchmark()
        cache[key] = entry
        _store_cache(path, cache)
    cores = _usable_cores()
    flops = {d: float(v) for d, v in entry["flops"].items()}
    chip = Chip.custom(
        f"host CPU ({_cpu_model()}, {cores} core{'s' if cores > 1 else ''})",
        key="host",
        kind="cpu",
        peak_flops=flops,
        hbm_bandwidth=float(entry["bandwidth"]),
        vpu_flops=flops["f32"],  # elementwise work: a roof at the f32 rate
        cores={"cpu": cores},
        source="host-benchmark",
    )
    return chips.register(chip)
