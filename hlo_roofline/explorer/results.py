"""An exploration's result: the ranked table and each candidate's report (:class:`Exploration`),
its rows (:func:`row`), and its files: TensorBoard runs, CSV, JSON, read back by
:func:`read_table`."""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from hlo_roofline._atomic import write_atomic
from hlo_roofline.explorer.book import BookConstants, bound_of, pass_times, why
from hlo_roofline.explorer.layouts import Candidate, is_number
from hlo_roofline.explorer.ranking import knob_columns, rank_by
from hlo_roofline.explorer.status import FAILURES, STATUS_NO_FIT, status_of, status_text
from hlo_roofline.judge import memory
from hlo_roofline.text import one_line


@dataclass
class Exploration:
    """The candidates as a ranked DataFrame (``table``), each one's :class:`Report`
    (``reports[label]``, None where it did not compile), what was pruned, the book's constants,
    the compiler flags every candidate was compiled under (``flags``: ``xla``, ``libtpu``) and the
    exploration's ``name`` (its directory in a logdir).
    """

    table: pd.DataFrame
    reports: dict[str, Any]
    pruned: list[tuple[dict, str]]
    constants: BookConstants
    target: str
    axes: tuple[str, ...]
    flags: dict[str, list[str]] = field(default_factory=dict)
    name: str = ""
    knobs: tuple[str, ...] | None = None

    @property
    def failed(self) -> pd.DataFrame:
        """The rows the exploration has no answer for: errors, crashes, time-outs, never run."""
        return failed_rows(self.table)

    @property
    def complete(self) -> bool:
        """Whether every candidate has an answer (ok, does not fit, refused): a gate over an
        incomplete exploration may be comparing against a best that is missing."""
        return self.failed.empty

    def best(self) -> pd.Series:
        """The first-ranked candidate's row; a ValueError saying why there is none."""
        ranked = self.table[self.table["rank"].notna()] if "rank" in self.table else self.table[:0]
        if ranked.empty:
            raise ValueError(f"no candidate compiled and fits: {self.summary_text()}")
        return ranked.sort_values("rank", kind="stable").iloc[0]

    def summary_text(self) -> str:
        """What became of the candidates, in words: ``3 candidates: 2 ok, 1 crashed; 4 pruned``."""
        counts = (
            self.table["status"].map(status_of).value_counts().to_dict()
            if "status" in self.table else {}
        )  # fmt: skip
        parts = [f"{n} {status_text(code)}" for code, n in counts.items()]
        text = f"{len(self.table)} candidates" + (f": {', '.join(parts)}" if parts else "")
        if self.pruned:
            text += f"; {len(self.pruned)} layouts pruned (e.g. {self.pruned[0][1]})"
        return text

    def write_tensorboard(self, logdir: str | os.PathLike) -> list[Path]:
        """Every candidate's report into ``logdir/<name>`` (``logdir`` itself for an exploration
        without a name), one run per candidate label, and the ranked table beside them
        (``logdir.EXPLORE_JSON``, :meth:`document`): what the tab's exploration view reads. Each
        exploration keeps to its own directory: the runs of an earlier exploration written there
        under the same name that this one lacks are removed, so no row reads another's report.
        A URL logdir stays one (its earlier runs are left as they are)."""
        import shutil

        from hlo_roofline._atomic import is_remote, join, write_atomic
        from hlo_roofline.logdir import EXPLORE_JSON

        folder = join(logdir, self.name) if self.name else logdir
        old = join(folder, EXPLORE_JSON)
        if not is_remote(folder) and Path(old).is_file():
            import json

            folder = Path(folder)
            with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
                before = json.loads(Path(old).read_text(encoding="utf-8"))
                runs = {r.get("run") for r in before.get("rows", []) if isinstance(r, dict)}
                for run in runs - set(self.reports):
                    stale = folder / str(run)
                    if isinstance(run, str) and run and stale.parent == folder and stale.is_dir():
                        shutil.rmtree(stale, ignore_errors=True)
        written = [r.write_tensorboard(folder, label) for label, r in self.reports.items() if r]
        path = join(folder, EXPLORE_JSON)
        write_atomic(path, self.to_json(), mode=0o644)
        return [*written, path]

    def document(self) -> dict:
        """The exploration as one JSON-ready document (``FORMAT``, version ``VERSION``):

        ``target``, ``chip``, ``name``, ``axes``, ``knobs`` (names), ``rank_by`` (the column
        ranked on), ``flags`` (the compiler flags given: ``xla``, ``libtpu``), ``complete`` and
        ``failed`` (the labels of the candidates without an answer), ``constants`` (``C``, ``W``,
        ``ratio``: the book's C, W_ici or W_GPU, C/W), ``hbm_capacity`` (bytes per device: the
        line a step-vs-HBM plot draws), ``rows`` (the table's rows, NaN as null, each with
        ``run``: its report's run in the logdir, null where it did not compile) and ``pruned``
        (``sizes`` and ``why``).
        """

        from hlo_roofline import chips

        chip = chips.get(self.constants.chip)
        rows = [{k: _plain(v) for k, v in r.items()} for r in self.table.to_dict("records")]
        for r in rows:
            r["run"] = r["candidate"] if self.reports.get(r["candidate"]) is not None else None
        knob_names = self._knob_names()
        return {
            "format": FORMAT,
            "version": VERSION,
            "target": self.target,
            "chip": self.constants.chip,
            "name": self.name,
            "axes": list(self.axes),
            "knobs": knob_names,
            "rank_by": rank_by(self.table, knob_names) if len(self.table) else None,
            "flags": {k: list(v) for k, v in self.flags.items()},
            "complete": self.complete,
            "failed": [str(c) for c in self.failed["candidate"]] if len(self.failed) else [],
            "constants": {
                "C": self.constants.C,
                "W": self.constants.W_ici,
                "W_node": self.constants.W_node,
                "ratio": self.constants.ratio,
            },
            "hbm_capacity": chip.per_device().hbm_capacity,
            "rows": rows,
            "pruned": [{"sizes": sizes, "why": reason} for sizes, reason in self.pruned],
        }

    def _knob_names(self) -> list[str]:
        if self.knobs is not None:
            return list(self.knobs)
        return knob_columns(self.table, self.axes)

    def to_csv(self, path: str | os.PathLike | None = None) -> str:
        text = self.table.to_csv(index=False)
        if path is not None:
            write_atomic(path, text)
        return text

    def to_json(self, path: str | os.PathLike | None = None) -> str:
        """:meth:`document` as JSON text (written to ``path`` if given)."""
        import json

        text = json.dumps(self.document(), indent=1, allow_nan=False)
        if path is not None:
            write_atomic(path, text)
        return text


def failed_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of an explorer table without an answer (:data:`FAILURES`)."""
    if "status" not in table or table.empty:
        return table[:0]
    return table[table["status"].map(status_of).isin(FAILURES)]


def _plain(value):
    """A table cell as JSON holds it, every digit kept: None for NaN and NA, numpy scalars as
    Python's."""
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return None
    return value.item() if hasattr(value, "item") else value


FORMAT, VERSION = "hlo_roofline.exploration", 1


class ExplorationError(ValueError):
    """A file that is not an exploration the gate can read (:func:`read_table`)."""


def find_exploration(path: str | os.PathLike) -> Path:
    """The exploration file ``path`` names: the file itself, a directory's ``EXPLORE_JSON``, or
    the one exploration in a logdir's subdirectories (each exploration writes its own); several
    there is an :class:`ExplorationError` naming them."""
    from hlo_roofline.logdir import EXPLORE_JSON

    path = Path(path)
    if not path.is_dir():
        return path
    if (path / EXPLORE_JSON).is_file():
        return path / EXPLORE_JSON
    found = sorted(p for p in path.glob(f"*/{EXPLORE_JSON}") if p.is_file())
    if len(found) > 1:
        names = ", ".join(str(p.parent) for p in found[:6])
        raise ExplorationError(f"{path} holds {len(found)} explorations ({names}): name one")
    return found[0] if found else path / EXPLORE_JSON


def read_table(path: str | os.PathLike) -> pd.DataFrame:
    """The ranked table of an exploration written by :meth:`Exploration.to_json` (or
    ``explore --json``), :meth:`Exploration.to_csv` (``--csv``) or ``write_tensorboard`` (the
    logdir itself, the exploration's directory in it, or its ``logdir.EXPLORE_JSON``). Anything
    else is an :class:`ExplorationError` saying what is wrong."""
    import json

    path = find_exploration(path)
    if not path.is_file():
        raise ExplorationError(f"no exploration at {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ExplorationError(f"cannot read {path}: {exc}") from None
    if path.suffix == ".csv":
        import io

        try:
            table = pd.read_csv(io.StringIO(text))
        except (ValueError, pd.errors.ParserError) as exc:
            raise ExplorationError(f"{path} is not a CSV table: {one_line(exc)}") from None
    else:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ExplorationError(f"{path} is not JSON: {exc}") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ExplorationError(f'{path} is not an exploration (no "format": "{FORMAT}")')
        if doc.get("version") != VERSION or not isinstance(doc.get("rows"), list):
            raise ExplorationError(
                f"{path}: exploration version {doc.get('version')!r}, this reads {VERSION}"
            )
        table = pd.DataFrame(doc["rows"])
    missing = {"candidate", "status", "rank", "gap_to_best"} - set(table.columns)
    if missing:
        raise ExplorationError(
            f"{path} lacks the column(s) {', '.join(sorted(missing))}: not an explorer table "
            "(or written before gap_to_best; run explore again)"
        )
    table["status"] = table["status"].map(status_of)
    return table


def step_seconds(summary: Mapping) -> float | None:
    """The step time a candidate is ranked on, from its report's summary: the one place that
    names the key (the expected step as XLA scheduled it)."""
    value = summary.get("step_expected_s")
    return float(value) if is_number(value) else None


def flags_text(flags: Mapping[str, str]) -> str:
    """A report's compiler flags as one table cell (``XLA_FLAGS=--a --b``; "" for none)."""
    return "; ".join(f"{var}={flags[var]}" for var in sorted(flags) if flags[var])


def row(candidate: Candidate, result: dict, report, constants: BookConstants, **given) -> dict:
    """One candidate's row: axis sizes, knobs, the report summary's times and MFU, the work and
    throughput, the book's per-pass quantities, the fit, and why (see ``why``). Nothing here
    re-derives what the summary holds.

    ``given``: ``tokens_per_step`` and ``hidden`` (numbers or functions of the knobs), ``flags``
    (the exploration's compiler flags as a cell, for a row that never reached a compiler)."""
    sizes, knobs = dict(candidate.sizes), dict(candidate.knobs)
    out: dict[str, Any] = {"candidate": candidate.label, **sizes, **knobs}
    out.update({f"n_axes_{axis}": n for axis, n in candidate.n_axes})
    out.update({f"nodes_{axis}": n for axis, n in candidate.nodes})
    work = result.get("work") or {}
    tokens = _given(given.get("tokens_per_step"), knobs) or work.get("tokens")
    hidden = _given(given.get("hidden"), knobs)
    devices = math.prod(sizes.values())
    flags = result.get("flags")
    out.update(
        status=result["status"],
        error=result["error"],
        traceback=result.get("traceback") or "",
        compile_s=result["compile_s"],
        flags=flags_text(flags) if flags is not None else given.get("flags", ""),
        tokens_per_step=float(tokens) if tokens else math.nan,
    )
    if report is None:
        words = status_text(result["status"])
        out["why"] = f"{words}: {result['error']}" if result["error"] else words
        return out
    s = report.summary
    ops = report.ops
    program = len(ops) > 0  # a program the compiler refused has no ops: nothing to time
    step = step_seconds(s) if program else None
    compute = float(ops["t_compute_s"].sum()) if program and "t_compute_s" in ops else math.nan
    memory_t = float(ops["t_memory_s"].sum()) if program and "t_memory_s" in ops else math.nan
    comm = s.get("comm_time_s", math.nan) if program else math.nan
    fit = s.get("memory_fit") or {}
    mem = s.get("memory") or {}
    model_flops = s.get("model_flops")
    per_chip = (lambda amount: amount / step) if step else (lambda amount: math.nan)
    out.update(
        step_s=step if step is not None else math.nan,
        # the bound no run beats (a report from before the split: its perfect-overlap step)
        lower_s=_number(s.get("step_bound_s", s.get("step_time_min_s"))) if program else math.nan,
        upper_s=_number(s.get("step_time_upper_s")) if program else math.nan,
        compute_s=compute,
        memory_s=memory_t,
        comm_s=_number(comm),
        exposed_comm_s=_number(s.get("exposed_comm_s")) if program else math.nan,
        exposed_comm_share=_number(s.get("exposed_comm_share")) if program else math.nan,
        **pass_times(ops),
        mfu_upper_bound=_number(s.get("mfu_upper_bound")) if program else math.nan,
        mfu_model=_number(s.get("mfu_model")) if program else math.nan,
        model_flops=model_flops * devices if is_number(model_flops) else math.nan,
        tokens_per_s_per_chip=per_chip(tokens / devices) if tokens else math.nan,
        model_flops_per_s_per_chip=per_chip(model_flops) if is_number(model_flops) else math.nan,
        flops_per_s_per_chip=per_chip(s["flops"]) if is_number(s.get("flops")) else math.nan,
        hbm_per_device=fit.get("need_bytes", mem.get("need_bytes")),
        fit=memory.verdict_of(fit),
        bound=bound_of(compute, memory_t, comm) if program else "unknown",
    )
    if memory.verdict_of(fit) == memory.DOES_NOT_FIT:
        out["status"] = STATUS_NO_FIT
    out["why"] = why(out, candidate, constants, tokens, hidden)
    return out


def _number(value) -> float:
    """A summary number, NaN where the summary has none (``mfu_model`` without model FLOPs)."""
    return math.nan if value is None else float(value)


def _given(value, knobs: dict):
    return value(**knobs) if callable(value) else value


def per_device(model_flops: float | None, candidate: Candidate) -> float | None:
    """The step's model FLOPs (all devices) as :func:`hlo_roofline.analyze` takes them: per
    device, so the summary's ``mfu_model`` is the row's."""
    if model_flops is None:
        return None
    return float(model_flops) / math.prod(s for _, s in candidate.sizes)
