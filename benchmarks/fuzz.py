"""Semantic fuzzing campaign: real fixtures mutated in valid syntax, through parse, both cost models
and verdicts on three chips, each input under a time limit. Failures are counted by kind.

    .venv/bin/python benchmarks/fuzz.py                        # 100,000 inputs, 2 processes
    .venv/bin/python benchmarks/fuzz.py --inputs 2000 --jobs 1 --seconds 5
    .venv/bin/python benchmarks/fuzz.py --replay 4711          # one input, with its traceback

The property: ``parse_module`` returns a module or raises ``HloParseError``; analysis of a
module raises nothing, under either cost model, and its report is sane (no NaN or negative costs,
coverage in [0, 1], a known bound for every row on every chip, JSON that can be written). An input
that breaks it is an *escape* (kind: exception type and the line of hlo_roofline that raised it);
one that runs past ``--seconds`` is a *hang* (kind: where it was when stopped; a worker that does
not answer within twice the limit is killed and replaced). Input *i* is reproduced from
``--seed`` and *i* alone (``--replay i``); ``--save DIR`` keeps the first mutants of every kind.
Exit status 0 when nothing escaped or hung, 1 otherwise.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import signal
import sys
import time
import traceback
from collections import Counter
from multiprocessing.connection import wait
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from mutate import mutate  # noqa: E402

MAX_FIXTURE_BYTES = 40_000  # larger modules make each input slower without new kinds of ops
PACKAGE = str(ROOT / "hlo_roofline")


class Hang(Exception):
    """An input ran past its time limit."""


def seeds() -> list[tuple[str, str]]:
    """(name, text) of every committed fixture small enough to mutate quickly."""
    paths = sorted(ROOT.glob("fixtures/*/*.hlo.txt"))
    return [
        (f"{p.parent.name}/{p.name}", p.read_text())
        for p in paths
        if p.stat().st_size <= MAX_FIXTURE_BYTES
    ]


def make_input(texts: list[tuple[str, str]], seed: int, index: int) -> tuple[str, str, list[str]]:
    """Input ``index`` of the campaign ``seed``: (fixture name, mutant text, mutations)."""
    rng = random.Random(f"{seed}:{index}")
    name, text = texts[rng.randrange(len(texts))]
    mutant, done = mutate(text, rng)
    return name, mutant, done


def judging_chips():
    from hlo_roofline import chips

    only_bf16 = chips.Chip.custom("fuzz-bf16-only", peak_flops={"bf16": 1e12}, hbm_bandwidth=1e11)
    return ["v5e", "h100", only_bf16]


def check(text: str, chips_to_judge=None) -> str:
    """Run one input; "rejected" (a parse error) or "analyzed". Raises on a broken property."""
    import math

    from hlo_roofline import HloParseError, analyze_hlo
    from hlo_roofline.hlo import parse_module
    from hlo_roofline.schema import BOUNDS

    try:
        module = parse_module(text)
    except HloParseError as exc:
        if not str(exc):
            raise AssertionError("HloParseError without a message") from None
        return "rejected"
    reports = [analyze_hlo(module, cost_model=model) for model in ("roofline", "xla")]
    for report in reports:
        ops = report.ops
        for column in ("flops", "transcendentals", "bytes_accessed", "comm_bytes", "count"):
            values = ops[column]
            if values.isna().any() or (values < 0).any():
                raise AssertionError(f"{column} has NaN or negative values")
        coverage = report.summary["coverage"]
        if not 0.0 <= coverage <= 1.0:
            raise AssertionError(f"coverage {coverage}")
    for chip in chips_to_judge if chips_to_judge is not None else judging_chips():
        judged = reports[0].classify(chip)
        if not set(judged.ops["bound"]) <= set(BOUNDS):
            raise AssertionError(f"bounds {set(judged.ops['bound'])}")
        times = judged.ops["t_expected_s"]
        if times.isna().any() or (times < 0).any():
            raise AssertionError("t_expected_s has NaN or negative values")
        if math.isnan(judged.summary["step_time_serial_s"]):
            raise AssertionError("step time is NaN")
    reports[0].to_json()
    return "analyzed"


def _where(tb) -> str:
    """The innermost frame of hlo_roofline in a traceback (else the innermost frame)."""
    frames = traceback.extract_tb(tb)
    ours = [f for f in frames if f.filename.startswith(PACKAGE)] or frames
    if not ours:
        return "?"
    frame = ours[-1]
    return f"{os.path.relpath(frame.filename, ROOT)}:{frame.lineno} ({frame.name})"


def classify_failure(exc: BaseException) -> str:
    kind = "hang" if isinstance(exc, Hang) else type(exc).__name__
    return f"{kind} at {_where(exc.__traceback__)}"


def run_input(texts, seed: int, index: int, seconds: float, chips_to_judge) -> tuple[str, str]:
    """(outcome, detail): outcome "rejected", "analyzed" or "escape: <kind>"."""

    def expire(signum, frame):
        raise Hang(f"no result after {seconds} s")

    _, text, _ = make_input(texts, seed, index)
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return check(text, chips_to_judge), ""
    except Exception as exc:  # the campaign's whole point: anything that escapes is counted
        return "escape: " + classify_failure(exc), f"{type(exc).__name__}: {exc}"[:300]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _worker(conn, seed: int, indices: range, seconds: float) -> None:
    import warnings

    warnings.simplefilter("ignore")  # mutants of real modules warn (unoptimized, overlaps): noise
    import hlo_roofline.api  # noqa: F401  imported before an input's clock starts: no hang
    texts = seeds()
    chips_to_judge = judging_chips()
    for index in indices:
        conn.send(("start", index))
        outcome, detail = run_input(texts, seed, index, seconds, chips_to_judge)
        conn.send(("done", index, outcome, detail))
    conn.send(("finished",))


class Campaign:
    """Workers over interleaved input indices; a stuck worker is killed and replaced."""

    def __init__(self, inputs: int, jobs: int, seed: int, seconds: float, save: Path | None):
        self.inputs, self.jobs, self.seed, self.seconds, self.save = (
            inputs,
            jobs,
            seed,
            seconds,
            save,
        )
        self.counts: Counter[str] = Counter()
        self.examples: dict[str, tuple[int, str]] = {}
        self.saved: Counter[str] = Counter()
        self.texts = seeds()
        self.context = multiprocessing.get_context("fork")

    def _start(self, first: int):
        parent, child = self.context.Pipe()
        indices = range(first, self.inputs, self.jobs)
        process = self.context.Process(
            target=_worker, args=(child, self.seed, indices, self.seconds), daemon=True
        )
        process.start()
        child.close()
        return {"conn": parent, "process": process, "index": None, "since": time.monotonic()}

    def record(self, index: int, outcome: str, detail: str) -> None:
        self.counts[outcome] += 1
        if outcome.startswith(("escape", "hang")):
            self.examples.setdefault(outcome, (index, detail))
            if self.save is not None and self.saved[outcome] < 3:
                self.saved[outcome] += 1
                self.save.mkdir(parents=True, exist_ok=True)
                _, text, done = make_input(self.texts, self.seed, index)
                header = (
                    f"// fuzz seed {self.seed} input {index}: {', '.join(done)}\n// {outcome}\n"
                )
                (self.save / f"input-{index}.hlo.txt").write_text(header + text)

    def run(self, progress: bool = True) -> float:
        start = time.monotonic()
        workers = [self._start(w) for w in range(min(self.jobs, self.inputs))]
        hard_limit = 2 * self.seconds + 5
        done = 0
        while workers:
            ready = wait([w["conn"] for w in workers], timeout=1.0)
            now = time.monotonic()
            for w in list(workers):
                if w["conn"] in ready:
                    try:
                        message = w["conn"].recv()
                    except EOFError:  # the worker died (killed by the OS, a crash in C code)
                        message = ("died",)
                    if message[0] == "start":
                        w["index"], w["since"] = message[1], now
                    elif message[0] == "done":
                        self.record(message[1], message[2], message[3])
                        w["index"] = None
                        done += 1
                        if progress and done % 1000 == 0:
                            rate = done / (now - start)
                            print(f"  {done} inputs, {rate:.0f}/s, {self._failures()} failures",
                                  file=sys.stderr)  # fmt: skip
                    else:
                        workers.remove(w)
                        if message[0] == "died" and w["index"] is not None:
                            self._replace(workers, w, "escape: worker died")
                elif w["index"] is not None and now - w["since"] > hard_limit:
                    self._replace(workers, w, "hang (killed: no answer to its time limit)")
                    done += 1
        return time.monotonic() - start

    def _replace(self, workers: list, w: dict, outcome: str) -> None:
        """Record the input a worker was stuck on, stop it, and go on after that input."""
        index = w["index"]
        w["process"].kill()
        w["process"].join()
        if w in workers:
            workers.remove(w)
        self.record(index, outcome, f"killed after {2 * self.seconds + 5:.0f} s")
        if index + self.jobs < self.inputs:
            workers.append(self._start(index + self.jobs))

    def _failures(self) -> int:
        return sum(n for k, n in self.counts.items() if k.startswith(("escape", "hang")))

    def report(self, seconds: float) -> None:
        total = sum(self.counts.values())
        print(f"semantic fuzz: {total} inputs (seed {self.seed}) from {len(self.texts)} fixtures "
              f"in {seconds:.0f} s ({total / max(seconds, 1e-9):.0f}/s), "
              f"limit {self.seconds:g} s per input")  # fmt: skip
        print(f"  rejected by the parser (HloParseError): {self.counts['rejected']}")
        print(f"  analyzed (two cost models, three chips): {self.counts['analyzed']}")
        failures = {k: n for k, n in self.counts.items() if k not in ("rejected", "analyzed")}
        escapes = sum(n for k, n in failures.items() if not k.startswith("hang"))
        hangs = sum(n for k, n in failures.items() if k.startswith("hang"))
        print(f"  escapes: {escapes}, hangs: {hangs}")
        for kind, n in sorted(failures.items(), key=lambda kv: -kv[1]):
            index, detail = self.examples[kind]
            print(f"    {n:6d}  {kind}\n            e.g. --replay {index}: {detail}")


def replay(seed: int, index: int, seconds: float) -> int:
    texts = seeds()
    name, text, done = make_input(texts, seed, index)
    print(f"input {index} of seed {seed}: {name} with {', '.join(done)}", file=sys.stderr)
    print(text)
    outcome, detail = run_input(texts, seed, index, seconds, judging_chips())
    print(f"{outcome} {detail}", file=sys.stderr)
    if outcome.startswith("escape"):
        check(text)  # again, unguarded: the traceback
    return 0 if not outcome.startswith(("escape", "hang")) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=100_000)
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--seconds", type=float, default=10.0, help="time limit per input")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save", type=Path, help="write the first mutants of each failure here")
    parser.add_argument("--replay", type=int, metavar="INDEX", help="run one input, verbosely")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    args = parser.parse_args(argv)
    if args.replay is not None:
        return replay(args.seed, args.replay, args.seconds)
    campaign = Campaign(args.inputs, max(args.jobs, 1), args.seed, args.seconds, args.save)
    seconds = campaign.run(progress=not args.quiet)
    campaign.report(seconds)
    return 1 if campaign._failures() else 0


if __name__ == "__main__":
    sys.exit(main())
