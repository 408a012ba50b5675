"""Every committed fixture's report, written to a folder, so two checkouts' reports can be compared
byte for byte: a refactor that must not change a number is checked by writing both and diffing.

    .venv/bin/python benchmarks/fixture_reports.py OUT [--limit N]
    # in another checkout (or after the change): ... fixture_reports.py OUT2; diff -r OUT OUT2

Each ``fixtures/**/*.hlo.txt[.gz]`` is analyzed (``analyze_file``) and judged on the chip its path
names (``v5e``, ``h100``, ...; a CPU module unjudged; v5e where none is named), its rows written as
CSV (the public columns and the model internals together: ``Report.model_frame``, so a change
that moves a column between the two leaves the file as it was) and its summary as sorted JSON. A
module that fails writes its error instead, so a change in how it fails shows too.
"""

from __future__ import annotations

import argparse
import json
import re
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHIPS = ("v5e", "v5p", "v6e", "v4", "7x", "h100", "h200", "a100", "b200")


def chip_of(path: Path) -> str | None:
    """The chip a fixture's path names (``tpu_v5e.hlo.txt`` → v5e), None for a CPU module; read
    below the checkout, whose own folder name (``gpu-tools/``) says nothing."""
    name = str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path).lower()
    for chip in CHIPS:
        if re.search(rf"(^|[^a-z0-9]){chip}([^0-9]|$)", name):
            return chip
    if "gpu" in name or "cuda" in name:
        return "h100"
    return None if "cpu" in name else "v5e"


def write_all(out: Path, limit: int | None = None) -> int:
    import hlo_roofline as hr

    out.mkdir(parents=True, exist_ok=True)
    files = sorted((ROOT / "fixtures").rglob("*.hlo.txt*"))[:limit]
    for path in files:
        key = str(path.relative_to(ROOT)).replace("/", "__")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                report = hr.analyze_file(path, chip=chip_of(path))
            report.model_frame().to_csv(out / f"{key}.csv", index=False)  # public + internals
            summary = json.dumps(report.summary, sort_keys=True, default=str, indent=0)
            (out / f"{key}.summary.json").write_text(summary)
        except Exception as exc:  # a fixture that fails must fail the same way
            (out / f"{key}.error").write_text(f"{type(exc).__name__}: {exc}")
    return len(files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the folder to write the reports to")
    parser.add_argument("--limit", type=int, help="only the first N fixtures (sorted by path)")
    args = parser.parse_args()
    print(f"{write_all(args.out, args.limit)} fixture reports written to {args.out}")


if __name__ == "__main__":
    main()
