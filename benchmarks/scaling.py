"""Analysis time and memory per instruction, from 1k to 1M instructions: flat means linear.

    .venv/bin/python benchmarks/scaling.py                          # 1k, 10k, 100k, 1M
    .venv/bin/python benchmarks/scaling.py --sizes 1000,10000 --repeat 3
    .venv/bin/python benchmarks/scaling.py --sizes 200000 --stages     # where the memory goes

Each size is a module from ``benchmarks/generate.py`` (an unrolled sharded transformer step:
loops, fusions, collectives, tiled layouts, metadata on every line), parsed and analyzed
(``analyze_hlo``: every op priced, the report's table built) in a fresh interpreter, as
``benchmarks/run.py`` does for its figure (c). Printed per size: wall and CPU time per
instruction (best of ``--repeat``; the 1M module is run once), and the peak resident memory the
module adds, per instruction and per byte of text. The last line is the ratio of the largest
per-instruction time to the smallest: 1.0 is perfectly linear. Nothing here is asserted.

With ``--stages`` each size is also run once more, step by step as ``analyze_hlo`` runs it (read,
parse, the walk and its rows, table), printing the resident memory after each step and its peak so far, as
multiples of the text: where the bytes per instruction go.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from generate import generate_module  # noqa: E402

RUN = ROOT / "benchmarks" / "run.py"  # its --child mode parses and analyzes one file
STAGES = ("read", "parse", "rows", "table")  # the walk is priced as its rows are made

# The steps of ``analyze_hlo`` one by one (its cost model, no chip), in a fresh interpreter: the
# resident memory after each (``/proc/self/status``: now, and the peak since the imports).
_STAGE_CHILD = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from hlo_roofline import cost
from hlo_roofline.judge import memory
from hlo_roofline._gc import gc_paused
from hlo_roofline.hlo import parse_module
from hlo_roofline.report import Report

def rss():
    status = dict(l.split(":", 1) for l in Path("/proc/self/status").read_text().splitlines() if ":" in l)
    return [int(status[k].split()[0]) * 1024 for k in ("VmRSS", "VmHWM")]

Path("/proc/self/clear_refs").write_text("5")
base = rss()[0]
marks = []
text = Path(sys.argv[1]).read_text()
marks.append(rss())
module = parse_module(text)
marks.append(rss())
with gc_paused():
    totals = {}
    ops = cost.tallied(cost.priced(module, "roofline", pad_to_tiles=True), "roofline", totals)
    columns = cost.rows(module, ops, pad_to_tiles=True)
    summary = {**totals, "memory": memory.from_module(module)}
    marks.append(rss())
    report = Report.from_columns(columns, summary, module.name)
    del columns
    marks.append(rss())
print(json.dumps({"bytes": len(text), "marks": [[now - base, peak - base] for now, peak in marks]}))
"""


def measure(instructions: int, repeat: int) -> dict:
    """Best of ``repeat`` fresh-interpreter runs of parse + analysis on a generated module."""
    text = generate_module(instructions)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "generated.hlo.txt"
        path.write_text(text)
        size = len(text)
        del text
        runs = []
        for _ in range(repeat):
            out = subprocess.run(
                [sys.executable, str(RUN), "--child", str(path)],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    best = min(runs, key=lambda r: r["parse"] + r["analysis"])
    n = best["instructions"]
    added = max(r["peak_rss"] for r in runs) - min(r["baseline_rss"] for r in runs)
    return {
        "instructions": n,
        "bytes": size,
        "rows": best["rows"],
        "parse_s": best["parse"],
        "analysis_s": best["analysis"],
        "us_per_instruction": (best["parse"] + best["analysis"]) / n * 1e6,
        "cpu_us_per_instruction": min(r["cpu"] for r in runs) / n * 1e6,
        "rss_added": added,
        "rss_bytes_per_instruction": added / n,
        "rss_over_text": added / size,
    }


def stages(instructions: int) -> dict:
    """Resident memory after each step of one analysis, ÷ the text: (now, peak so far) a step."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "generated.hlo.txt"
        path.write_text(generate_module(instructions))
        out = subprocess.run(
            [sys.executable, "-c", _STAGE_CHILD, str(path), str(ROOT)],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
    found = json.loads(out.stdout.strip().splitlines()[-1])
    size = found["bytes"]
    return {
        stage: (now / size, peak / size)
        for stage, (now, peak) in zip(STAGES, found["marks"], strict=True)
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000,1000000")
    parser.add_argument("--repeat", type=int, default=3, help="runs per size below 1M (best kept)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--stages", action="store_true", help="also the memory after each step")
    args = parser.parse_args(argv)
    results = []
    print(f"load average at start {os.getloadavg()[0]:.1f}", file=sys.stderr)
    print(f"{'instructions':>12} {'MB':>7} {'parse':>8} {'analysis':>9} {'µs/instr':>9} "
          f"{'CPU µs/instr':>13} {'RSS MB':>8} {'B/instr':>8} {'RSS/text':>9}")  # fmt: skip
    for size in (int(s) for s in args.sizes.split(",")):
        r = measure(size, 1 if size >= 1_000_000 else args.repeat)
        results.append(r)
        print(f"{r['instructions']:>12} {r['bytes'] / 1e6:>7.1f} {r['parse_s']:>7.2f}s "
              f"{r['analysis_s']:>8.2f}s {r['us_per_instruction']:>9.2f} "
              f"{r['cpu_us_per_instruction']:>13.2f} {r['rss_added'] / 1e6:>8.0f} "
              f"{r['rss_bytes_per_instruction']:>8.0f} {r['rss_over_text']:>8.1f}x",
              flush=True)  # fmt: skip
        if args.stages:
            r["stages"] = stages(size)
            print("    RSS ÷ text after " + ", ".join(
                f"{stage} {now:.2f}x (peak {peak:.2f}x)" for stage, (now, peak) in r["stages"].items()
            ), flush=True)  # fmt: skip
    per = [r["us_per_instruction"] for r in results]
    cpu = [r["cpu_us_per_instruction"] for r in results]
    print(f"time per instruction, largest ÷ smallest: wall {max(per) / min(per):.2f}, "
          f"CPU {max(cpu) / min(cpu):.2f} (1.00 = linear); load average at end "
          f"{os.getloadavg()[0]:.1f}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
