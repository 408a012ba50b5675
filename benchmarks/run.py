"""Speed and memory of hlo_roofline against XLA's own C++ parser and cost analysis, in one run.

    .venv/bin/python benchmarks/run.py                      # everything (a few minutes)
    .venv/bin/python benchmarks/run.py --targets cpu        # only the GPT step, compiled for the CPU
    .venv/bin/python benchmarks/run.py --quick              # fewer repeats, no compile, 20k module

It prints the machine, then these figures:

(a) our parse + analysis ÷ XLA's parse + cost analysis (``jaxlib._hlo.hlo_module_from_text`` +
    ``jaxlib._jax.hlo_module_cost_analysis`` on the CPU client), on every committed fixture and on
    the modules the examples compile to: the GPT step for the CPU and for TPU v5e, and the conv net
    for TPU v5e, the largest module any example produces;
(b) our analysis of each of those steps (parse + ``analyze_hlo`` of ``compiled.as_text()``) ÷ the
    ``jit(step).lower(...).compile()`` time of that step;
(c) a generated 100k-instruction module (``benchmarks/generate.py``): time, and peak RSS measured
    in fresh subprocesses (``resource.getrusage``) against the size of the text;
(d) ``hlo_roofline.analyze`` of each example step in a new process with an empty compile cache, then
    in another new process: the cached second analysis as a fraction of the first.

Every time is the minimum over ``--repeat`` runs, ours and XLA's interleaved so that both see the same
machine load (the load average is printed: on a shared machine absolute times move, ratios less).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

TARGETS = {"a": 1.0, "b": 0.05, "c_seconds": 3.0, "c_rss": 4.0}


# -- the machine --------------------------------------------------------------------------------


def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import jax
    import jaxlib

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "os": platform.platform(),
        "load_average": os.getloadavg(),
    }


# -- timing -------------------------------------------------------------------------------------


def _timed(steps) -> list[tuple[float, float]]:
    """Run the callables in order; (wall, CPU) seconds of each (CPU: this process, all threads)."""
    out = []
    for step in steps:
        wall, cpu = time.perf_counter(), time.process_time()
        step()
        out.append((time.perf_counter() - wall, time.process_time() - cpu))
    return out


def _ours(text: str) -> list[tuple[float, float]]:
    """(wall, CPU) seconds of hlo_roofline's parse, then of its analysis, on ``text``."""
    from hlo_roofline import analyze_hlo
    from hlo_roofline.hlo import parse_module

    gc.collect()
    module = []
    return _timed([lambda: module.append(parse_module(text)), lambda: analyze_hlo(module[0])])


def _table_time(text: str) -> float:
    """Wall seconds ``analyze_hlo`` spends building the report's pandas table (timed apart)."""
    from hlo_roofline import cost
    from hlo_roofline.hlo import parse_module
    from hlo_roofline.report import Report

    module = parse_module(text)
    ops = cost.walk(module, pad_to_tiles=True)  # as analyze_hlo does for the roofline model
    columns = cost.rows(module, ops, pad_to_tiles=True)
    summary = cost.summarize(ops, "roofline")
    start = time.perf_counter()
    Report.from_columns(columns, summary, module.name)
    return time.perf_counter() - start


def _xla(text: str) -> list[tuple[float, float]]:
    """(wall, CPU) seconds of XLA's C++ parse, then of its cost analysis, on ``text``."""
    import jax
    from jaxlib import _hlo, _jax

    client = jax.devices("cpu")[0].client
    module = []
    return _timed([
        lambda: module.append(_hlo.hlo_module_from_text(text)),
        lambda: _jax.hlo_module_cost_analysis(client, module[0]),
    ])  # fmt: skip


def compare(text: str, repeat: int) -> dict:
    """Best-of-``repeat`` wall times of ours and XLA's on one text (runs interleaved), and the
    ratio of the best CPU times too (less disturbed by other processes on a shared machine)."""
    keys = ("parse", "analysis", "xla_parse", "xla_cost")
    best = dict.fromkeys(keys, float("inf"))
    cpu = dict.fromkeys(keys, float("inf"))
    for _ in range(repeat):
        for key, (wall_s, cpu_s) in zip(keys, _ours(text) + _xla(text), strict=True):
            best[key] = min(best[key], wall_s)
            cpu[key] = min(cpu[key], cpu_s)
    best["table"] = min(_table_time(text) for _ in range(repeat))
    ours, xla = best["parse"] + best["analysis"], best["xla_parse"] + best["xla_cost"]
    cpu_ratio = (cpu["parse"] + cpu["analysis"]) / (cpu["xla_parse"] + cpu["xla_cost"])
    return {
        **best, "ours": ours, "xla": xla, "ratio": ours / xla, "cpu_ratio": cpu_ratio,
        "ours_cpu": cpu["parse"] + cpu["analysis"], "xla_cpu": cpu["xla_parse"] + cpu["xla_cost"],
    }  # fmt: skip


# -- (a) fixtures -------------------------------------------------------------------------------


def bench_fixtures(repeat: int) -> dict:
    results = {}
    for path in sorted(ROOT.glob("fixtures/*/*.hlo.txt")):
        text = path.read_text()
        results[f"{path.parent.name}/{path.name.removesuffix('.hlo.txt')}"] = {
            "bytes": len(text),
            **compare(text, repeat),
        }
    ratios = [r["ratio"] for r in results.values()]
    return {
        "files": results,
        "total_ours": sum(r["ours"] for r in results.values()),
        "total_xla": sum(r["xla"] for r in results.values()),
        "total_table": sum(r["table"] for r in results.values()),
        "total_cpu_ratio": sum(r["ours_cpu"] for r in results.values())
        / sum(r["xla_cpu"] for r in results.values()),
        "median_ratio": statistics.median(ratios),
        "max_ratio": max(ratios),
    }


# -- (a) and (b) on the examples ----------------------------------------------------------------


def _default_cases() -> list[tuple[str, str]]:
    """(example, target): the GPT step for the CPU and TPU v5e, the conv net (the largest module
    the examples produce, 774 KB) for TPU v5e."""
    import importlib.util

    cases = [("gpt", "cpu")]
    if importlib.util.find_spec("libtpu") is not None:
        cases += [("gpt", "v5e:2x2"), ("convnet", "v5e:2x2")]
    return cases


def bench_examples(cases: list[tuple[str, str]], repeat: int) -> dict:
    """Compile each example step for its target; time the compile and analyze its text."""
    import jax

    jax.config.update("jax_enable_compilation_cache", False)
    from hlo_roofline.api import place_args
    from hlo_roofline.examples.convnet import convnet_step
    from hlo_roofline.examples.gpt import gpt_step

    steps = {"gpt": gpt_step, "convnet": convnet_step}
    results = {}
    for example, target in cases:
        step, args, jit_kwargs = steps[example]()
        t0 = time.perf_counter()
        lowered = jax.jit(step, **jit_kwargs).lower(
            *place_args(args, None if target == "cpu" else target)
        )
        compiled = lowered.compile()
        t1 = time.perf_counter()
        text = compiled.as_text()
        t2 = time.perf_counter()
        timing = compare(text, repeat)
        results[f"{example} {target}"] = {
            "bytes": len(text),
            "instructions": sum(1 for line in text.splitlines() if " = " in line),
            "compile": t1 - t0,
            "as_text": t2 - t1,
            **timing,
            "analysis_over_compile": timing["ours"] / (t1 - t0),
        }
        del compiled, lowered
    return results


# -- (d) the compile cache: the same step analyzed again, in a new process -----------------------

_CACHE_CHILD = """
import json, sys, time
t0 = time.perf_counter()
import hlo_roofline
from hlo_roofline.examples import get
example, target, cache = sys.argv[1:4]
step, args, jit_kwargs = get(example).load(None if target == "cpu" else target)
t1 = time.perf_counter()
report = hlo_roofline.analyze(
    step, *args, target="local" if target == "cpu" else target, cache=cache, **jit_kwargs
)
t2 = time.perf_counter()
print(json.dumps({"imports": t1 - t0, "analyze": t2 - t1, "ops": len(report.ops)}))
"""


def bench_cache(cases: list[tuple[str, str]]) -> dict:
    """``hlo_roofline.analyze`` of each step in a fresh process with an empty cache, then again in
    another fresh process: the second finds the optimized HLO on disk and only traces and lowers."""
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for example, target in cases:
            runs = []
            for _ in ("cold", "cached"):
                t0 = time.perf_counter()
                done = subprocess.run(
                    [sys.executable, "-c", _CACHE_CHILD, example, target, tmp],
                    capture_output=True, text=True, check=True,
                )  # fmt: skip
                runs.append({**json.loads(done.stdout), "process": time.perf_counter() - t0})
            cold, cached = runs
            results[f"{example} {target}"] = {
                "cold": cold, "cached": cached,
                "analyze_ratio": cached["analyze"] / cold["analyze"],
                "process_ratio": cached["process"] / cold["process"],
            }  # fmt: skip
    return results


# -- (c) the generated module -------------------------------------------------------------------


def _rss() -> tuple[int, int]:
    """(current, peak) resident set size in bytes.

    ``getrusage``'s peak would do, but on Linux a child inherits its parent's peak across
    fork + exec (this script's is hundreds of MB, jax loaded), so there the kernel's own counters are
    read instead, after resetting the peak (``/proc/self/clear_refs``).
    """
    try:
        status = Path("/proc/self/status").read_text()
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        return int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        return peak, peak


def _child(path: str) -> None:
    """Run in a fresh interpreter: parse + analyze one file, print times and peak RSS (JSON)."""
    import hlo_roofline  # noqa: F401  (imports counted in the baseline, not in the module's memory)
    from hlo_roofline import analyze_hlo
    from hlo_roofline.hlo import parse_module

    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")  # start the peak from here
    baseline, _ = _rss()
    text = Path(path).read_text()
    module, report = [], []
    (parse, parse_cpu), (analysis, analysis_cpu) = _timed([
        lambda: module.append(parse_module(text)), lambda: report.append(analyze_hlo(module[0])),
    ])  # fmt: skip
    _, peak = _rss()
    instructions = sum(len(c.instructions) for c in module[0].computations.values())
    print(json.dumps({
        "parse": parse, "analysis": analysis, "cpu": parse_cpu + analysis_cpu,
        "rows": len(report[0].ops), "bytes": len(text), "instructions": instructions,
        "baseline_rss": baseline, "peak_rss": peak,
    }))  # fmt: skip


def bench_generated(instructions: int, repeat: int) -> dict:
    from generate import generate_module

    text = generate_module(instructions)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "generated.hlo.txt"
        path.write_text(text)
        runs = []
        for _ in range(repeat):
            out = subprocess.run(
                [sys.executable, __file__, "--child", str(path)],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    xla = compare(text, 1)  # XLA's parser takes seconds here: once is enough for a reference
    best = min(runs, key=lambda r: r["parse"] + r["analysis"])
    peak = max(r["peak_rss"] for r in runs)
    baseline = min(r["baseline_rss"] for r in runs)
    return {
        **{k: best[k] for k in ("parse", "analysis", "rows", "bytes", "instructions")},
        "seconds": best["parse"] + best["analysis"],
        "cpu_seconds": min(r["cpu"] for r in runs),
        "peak_rss": peak,
        "baseline_rss": baseline,
        "rss_over_text": (peak - baseline) / len(text),
        "xla_parse": xla["xla_parse"],
        "xla_cost": xla["xla_cost"],
    }


# -- report -------------------------------------------------------------------------------------


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 10 else f"{seconds:.1f} s"


def _met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def report(results: dict) -> None:
    m = results["machine"]
    print(f"machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}, jax {m['jax']}, "
          f"jaxlib {m['jaxlib']}; load average at start {m['load_average'][0]:.1f}, "
          f"at end {results['load_average_end'][0]:.1f}")  # fmt: skip
    print()
    fx = results["fixtures"]
    print("(a) parse + analysis, ours ÷ XLA's C++ (best of runs):")
    print(f"    {'module':34} {'KB':>7} {'ours':>10} {'XLA':>10} {'ratio':>6}")
    worst = sorted(fx["files"].items(), key=lambda kv: -kv[1]["ratio"])[:3]
    largest = sorted(fx["files"].items(), key=lambda kv: -kv[1]["bytes"])[:3]
    for name, r in dict(largest + worst).items():
        print(f"    {name:34} {r['bytes'] / 1024:7.0f} {_ms(r['ours']):>10} {_ms(r['xla']):>10} "
              f"{r['ratio']:6.2f}")  # fmt: skip
    total = fx["total_ours"] / fx["total_xla"]
    print(f"    all {len(fx['files'])} fixtures: {_ms(fx['total_ours'])} vs {_ms(fx['total_xla'])}"
          f" = {total:.2f}x (CPU time {fx['total_cpu_ratio']:.2f}x; median file "
          f"{fx['median_ratio']:.2f}x, worst {fx['max_ratio']:.2f}x)  target <= 1.0: "
          f"{_met(total <= TARGETS['a'])}")  # fmt: skip
    untabled = (fx["total_ours"] - fx["total_table"]) / fx["total_xla"]
    print(f"    of which building the pandas tables: {_ms(fx['total_table'])}; without them "
          f"{untabled:.2f}x")  # fmt: skip
    examples = results.get("examples", {})
    for case, r in examples.items():
        print(f"    {case:17} ({r['bytes'] / 1024:.0f} KB, {r['instructions']} instr): "
              f"parse {_ms(r['parse'])} + analysis {_ms(r['analysis'])} = {_ms(r['ours'])} vs "
              f"XLA {_ms(r['xla_parse'])} + {_ms(r['xla_cost'])} = {_ms(r['xla'])}: "
              f"{r['ratio']:.2f}x (CPU time {r['cpu_ratio']:.2f}x)  target <= 1.0: "
              f"{_met(r['ratio'] <= TARGETS['a'])}")  # fmt: skip
    print()
    print("(b) our analysis ÷ jit(step).lower(...).compile() of the same step:")
    for case, r in examples.items():
        print(f"    {case:17}: {_ms(r['ours'])} / {_ms(r['compile'])} = "
              f"{r['analysis_over_compile']:.2%} (as_text() {_ms(r['as_text'])})  target <= 5%: "
              f"{_met(r['analysis_over_compile'] <= TARGETS['b'])}")  # fmt: skip
    g = results.get("generated")
    if g:
        print()
        print(f"(c) generated module: {g['instructions']} instructions, {g['bytes'] / 1e6:.1f} MB "
              f"of text, {g['rows']} rows")  # fmt: skip
        print(f"    parse {_ms(g['parse'])} + analysis {_ms(g['analysis'])} = {_ms(g['seconds'])}"
              f" (CPU time {_ms(g['cpu_seconds'])})  target <= 3 s: "
              f"{_met(g['seconds'] <= TARGETS['c_seconds'])}"
              f"   (XLA: parse {_ms(g['xla_parse'])} + cost {_ms(g['xla_cost'])})")  # fmt: skip
        print(f"    peak RSS {g['peak_rss'] / 1e6:.0f} MB, {g['baseline_rss'] / 1e6:.0f} MB of it "
              f"before reading the file (Python, numpy, pandas): the module costs "
              f"{(g['peak_rss'] - g['baseline_rss']) / 1e6:.0f} MB = {g['rss_over_text']:.1f}x its "
              f"text  target <= 4x: {_met(g['rss_over_text'] <= TARGETS['c_rss'])}")  # fmt: skip


def report_cache(results: dict) -> None:
    print()
    print("(d) the same step analyzed again in a new process (the optimized HLO from the cache):")
    for case, r in results.items():
        cold, cached = r["cold"], r["cached"]
        print(f"    {case:17}: analyze() {_ms(cold['analyze'])} -> {_ms(cached['analyze'])} "
              f"({r['analyze_ratio']:.1%}); whole process {_ms(cold['process'])} -> "
              f"{_ms(cached['process'])} ({r['process_ratio']:.1%})")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement (best kept)")
    parser.add_argument("--instructions", type=int, default=100_000, help="generated module size")
    parser.add_argument("--targets", help="only the GPT step, for these targets: cpu,v5e:2x2,...")
    parser.add_argument("--no-compile", action="store_true", help="skip the example steps")
    parser.add_argument("--quick", action="store_true", help="--repeat 2 --no-compile, 20k module")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child)
        return 0
    if args.quick:
        args.repeat, args.no_compile, args.instructions = 2, True, 20_000
    results: dict = {"machine": machine()}
    print("measuring the fixtures ...", file=sys.stderr)
    results["fixtures"] = bench_fixtures(args.repeat)
    if not args.no_compile:
        cases = [("gpt", t) for t in args.targets.split(",")] if args.targets else _default_cases()
        names = ", ".join(f"{example} for {target}" for example, target in cases)
        print(f"compiling {names} ...", file=sys.stderr)
        results["examples"] = bench_examples(cases, args.repeat)
        print("analyzing them twice in new processes (compile cache) ...", file=sys.stderr)
        results["cache"] = bench_cache(cases)
    print(f"measuring a generated {args.instructions}-instruction module ...", file=sys.stderr)
    results["generated"] = bench_generated(args.instructions, max(args.repeat // 2, 1) + 1)
    results["load_average_end"] = os.getloadavg()
    report(results)
    if "cache" in results:
        report_cache(results["cache"])
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
