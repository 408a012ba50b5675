"""Where an analysis spends its time, by phase and by source file, on a representative set.

    .venv/bin/python benchmarks/phases.py                  # the default set, both tables
    .venv/bin/python benchmarks/phases.py --top 30 gpt2_small/tpu_v5e.hlo.txt.gz
    .venv/bin/python benchmarks/phases.py --chip v5e       # the judging too

``benchmarks/run.py`` says how far ours is from XLA's C++; this says where ours goes, so a change
aimed at one phase can be measured on that phase. Two tables:

1. per module, the CPU time of each phase of ``analyze_hlo`` as it runs them (the least of
   ``--repeat`` runs): parse (``hlo.parse_module``), price (``cost.priced``, the rules), rows
   (``cost.rows``, the extractors), frame (the summary and ``Report.from_columns``, which leaves
   the pandas frames to be built when first read) and, with ``--chip``, judge
   (``Report.classify``: the one frame it judges, built from the columns, included);
2. one cProfile of parse + ``analyze_hlo`` over every module, its own time summed by source file
   (the package's files by their path in it, the others by name) and its most costly functions.
   cProfile slows small functions more than large ones: read its shares as where to look, and
   measure a change with the first table or ``run.py``.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# One of each kind the speed targets name: a large and a mid-size TPU module, a GPU module and a
# dump's, a CPU module, and one of the median size of the committed modules (4 KB).
DEFAULT_SET = (
    "published/v5e_16b.hlo.txt.gz",
    "tpu_programs/llama_train.v5e.hlo.txt.gz",
    "moe_tiny/h100.hlo.txt",
    "memory_dump/gpu_h100/module_0001.jit_step.sm_9.0a_gpu_after_optimizations.txt",
    "gpt_tiny/cpu.hlo.txt",
    "tpu_estimates/fp8_matmul_b4096.v5e.hlo.txt",
)
PHASES = ("parse", "price", "rows", "frame", "judge")


def phase_times(text: str, chip: str | None, repeat: int) -> dict[str, float]:
    """CPU seconds of each phase of an analysis of ``text``, the least of ``repeat`` runs."""
    runs = [_one_run(text, chip) for _ in range(repeat)]
    return {phase: min(run[phase] for run in runs) for phase in PHASES}


def _one_run(text: str, chip: str | None) -> dict[str, float]:
    """CPU seconds of each phase of one analysis, the phases as ``api.analyze_hlo`` runs them
    (garbage collection paused as there)."""
    from hlo_roofline import cost
    from hlo_roofline._gc import gc_paused
    from hlo_roofline.hlo import parse_module
    from hlo_roofline.judge import memory
    from hlo_roofline.report import Report

    marks = [time.process_time()]
    with gc_paused():
        module = parse_module(text)
        marks.append(time.process_time())
        ops = list(cost.priced(module, pad_to_tiles=True))
        marks.append(time.process_time())
        columns = cost.rows(module, ops, pad_to_tiles=True)
        marks.append(time.process_time())
        summary = {**cost.summarize(ops, "roofline"), "memory": memory.from_module(module)}
        report = Report.from_columns(columns, {**summary, "missing": []}, module.name)
        marks.append(time.process_time())
        if chip is not None:
            report.classify(chip)
        marks.append(time.process_time())
    return {phase: b - a for phase, a, b in zip(PHASES, marks[:-1], marks[1:], strict=True)}


def profile(texts: list[str], chip: str | None) -> pstats.Stats:
    """One cProfile of parse + ``analyze_hlo`` of each text (after a first, unprofiled run)."""
    from hlo_roofline import analyze_hlo
    from hlo_roofline.hlo import parse_module

    for text in texts:
        analyze_hlo(parse_module(text), chip=chip)
    profiler = cProfile.Profile()
    for text in texts:
        profiler.enable()
        analyze_hlo(parse_module(text), chip=chip)
        profiler.disable()
    return pstats.Stats(profiler)


def by_file(stats: pstats.Stats) -> Counter:
    """Own time summed by source file: ``cost/base.py`` for the package's, the file's name for
    the others, ``<built-in>`` for C functions."""
    files: Counter = Counter()
    for (path, _, _), (_, _, own, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        if path == "~":
            files["<built-in>"] += own
        elif "hlo_roofline/" in path:
            files[path.rsplit("hlo_roofline/", 1)[1]] += own
        else:
            files[Path(path).name] += own
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help="paths under fixtures/ (default: a set)")
    parser.add_argument("--chip", help="judge each report against this chip too")
    parser.add_argument("--repeat", type=int, default=5, help="runs per phase time (least kept)")
    parser.add_argument("--top", type=int, default=20, help="files and functions listed")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")  # a dump's missing tiling, warned each run
    from hlo_roofline.hlo.files import read_text

    names = args.modules or list(DEFAULT_SET)
    texts = {name: read_text(ROOT / "fixtures" / name) for name in names}
    print("CPU ms per phase (the least of each's runs):")
    width = max(map(len, texts))
    print(f"    {'module':{width}} {'KB':>6} " + " ".join(f"{p:>8}" for p in PHASES))
    for name, text in texts.items():
        times = phase_times(text, args.chip, args.repeat)
        cells = " ".join(f"{times[p] * 1e3:8.2f}" for p in PHASES)
        print(f"    {name:{width}} {len(text) / 1024:6.0f} {cells}")
    stats = profile(list(texts.values()), args.chip)
    files = by_file(stats)
    total = sum(files.values())
    print(f"\ncProfile of parse + analyze_hlo over the {len(texts)} modules, own time by file:")
    for path, own in files.most_common(args.top):
        print(f"    {own / total:6.1%} {own * 1e3:9.1f} ms  {path}")
    print("\nthe functions of most own time:")
    stats.sort_stats("tottime").print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
