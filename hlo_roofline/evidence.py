"""What a report read back must prove before a gate reads it: that it is the file the tool wrote
(a checksum over every byte a gate reads) and that its summary agrees with its rows.

A report file carries its checksum in front: ``{"sha256": "<hex>", ...}``, the SHA-256 of the
rest of the file as it was written (the key removed: ``{`` and the text after ``", "``); a CSV's
``.meta.json`` carries the checksum of its own text and the CSV's together, so neither the rows
nor the summary can change alone. The summary's totals, coverage, shares and step are found again
from the rows as ``schema`` declares them (``SUMMARY_SUMS``, ``SUMMARY_RATIOS``, ``ROW_SHARES``,
``SUMMARY_SCHEDULE``, ``BOUND_TIMES``): a renamed or added total is a line there, not code here.
"""

from __future__ import annotations

import hashlib
import math
import re

import numpy as np
import pandas as pd

from hlo_roofline import chips, schema
from hlo_roofline.cost.base import BOOKKEEPING
from hlo_roofline.judge import memory, verdict

SIGNATURE_KEY = "sha256"
_SIGNED = re.compile(r'\{"sha256": "([0-9a-f]{64})", ')
UNSIGNED = "unsigned"  # what :func:`verify` says of a file written without a checksum
REL_TOLERANCE = 1e-6  # sums over rows in another order than the writer's differ in the last bits


def _digest(body: str, covered: tuple[str, ...]) -> str:
    h = hashlib.sha256(body.encode())
    for text in covered:
        h.update(b"\0")
        h.update(text.encode())
    return h.hexdigest()


def sign(body: str, *covered: str) -> str:
    """``body`` (a JSON object's text) with the checksum of it and of ``covered`` (the texts it
    stands for, such as the CSV beside a ``.meta.json``) as its first key."""
    if not body.startswith("{") or body == "{}":
        raise ValueError("only a non-empty JSON object is signed")
    return f'{{"{SIGNATURE_KEY}": "{_digest(body, covered)}", {body[1:]}'


def verify(text: str, *covered: str) -> str | None:
    """None where ``text`` is as :func:`sign` wrote it (with ``covered``); else why not:
    :data:`UNSIGNED`, or what differs."""
    match = _SIGNED.match(text)
    if match is None:
        return UNSIGNED
    body = "{" + text[match.end() :].rstrip(
        "\r\n"
    )  # a line end after it (a shell's echo) is none of it
    if _digest(body, covered) != match.group(1):
        what = " or the CSV beside it" if covered else ""
        return f"its checksum does not match: the file{what} changed after it was written"
    return None


# -- the summary against the rows ------------------------------------------------------------------


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOLERANCE, abs_tol=0.0)


def _shown(value: float) -> str:
    return f"{value:.6g}"


def refusal(summary: dict) -> str | None:
    """The compiler's reason when it refused the step (out of memory for its target), else None.
    Such a report has no program, so no rows: the gates fail it with the reason."""
    memory = summary.get("memory") or {}
    if not isinstance(memory, dict) or memory.get("source") != "compiler error":
        return None
    return memory.get("compiler_error") or "the compiler refused the program"


def contradictions(ops: pd.DataFrame, summary: dict) -> list[str]:
    """What the summary says that its rows do not (empty: they agree): each total, the coverage and
    unknown ops, each share and ratio, each row's bound against its times, and the step as
    scheduled walked again from the rows where the chip is known. Keys or columns a report lacks
    (older or unjudged reports) are not checked; nor is a refused step's (no rows, by design: its
    totals are the source program's)."""
    if refusal(summary) is not None and ops.empty:
        return []
    found: list[str] = []
    collective = ops["collective"].to_numpy() != "" if "collective" in ops else None
    for key, (column, rows) in schema.SUMMARY_SUMS.items():
        if not _number(summary.get(key)) or column not in ops:
            continue
        values = ops[column].to_numpy(dtype=float)
        if rows == "collective":
            if collective is None:
                continue
            values = values[collective]
        total = float(np.nansum(values))
        if not _close(summary[key], total):
            found.append(
                f"summary {key} = {_shown(summary[key])} but its rows' {column} sum to "
                f"{_shown(total)}"
            )
    found += _coverage(ops, summary)
    for key, (part, whole) in schema.SUMMARY_RATIOS.items():
        if not all(_number(summary.get(k)) for k in (key, part, whole)):
            continue
        ratio = summary[part] / summary[whole] if summary[whole] else 0.0
        if not _close(summary[key], ratio):
            found.append(
                f"summary {key} = {_shown(summary[key])} but {part} / {whole} = {_shown(ratio)}"
            )
    for column, (part, key) in schema.ROW_SHARES.items():
        if column in ops and part in ops and _number(summary.get(key)) and len(ops):
            whole = summary[key]
            want = ops[part].to_numpy(dtype=float) / whole if whole else np.zeros(len(ops))
            found += _rows_differ(ops, column, ops[column].to_numpy(dtype=float), want,
                                  f"{part} / summary {key}")  # fmt: skip
    found += _never_run(ops)
    found += _bounds(ops)
    found += _schedule(ops, summary)
    found += _memory_fit(summary)
    return found


# What a row that runs no time a step (``count`` 0: a branch or a loop body never entered) costs.
_RUN_COSTS = ("flops", "transcendentals", "bytes_accessed", "comm_bytes", "t_bound_s", "t_expected_s")


def _never_run(ops: pd.DataFrame) -> list[str]:
    """A row run 0 times a step costs nothing: coverage leaves it out, so its cost would be an
    unpriced op's hidden from the coverage gate."""
    if "count" not in ops or ops.empty:
        return []
    never = ops["count"].to_numpy(dtype=float) == 0
    if not never.any():
        return []
    for column in _RUN_COSTS:
        if column in ops:
            costly = never & (ops[column].to_numpy(dtype=float) != 0)
            if costly.any():
                row = int(np.flatnonzero(costly)[0])
                return [
                    f"row {row} ({ops['name'].iloc[row]}): count = 0 but {column} = "
                    f"{_shown(ops[column].iloc[row])}"
                ]
    return []


def _chip(summary: dict) -> chips.Chip | None:
    """The report's chip, with the numbers it was judged with; None where this process does not
    know it (a chip registered or loaded in the process that wrote the report)."""
    try:
        return chips.get(summary.get("chip"), profile=summary.get("chip_profile") or "vendor")
    except (chips.UnknownChipError, TypeError, ValueError, KeyError):
        return None


def _memory_fit(summary: dict) -> list[str]:
    """The memory fit judged again from the summary's memory figures: the need, the share used
    and the verdict (what ``--max-hbm`` reads), against the capacity of a device of the report's
    chip (the one the fit states where this process does not know the chip)."""
    fit, figures = summary.get("memory_fit"), summary.get("memory")
    if not isinstance(fit, dict):
        return []
    chip = _chip(summary)
    capacity = chip.per_device().hbm_capacity if chip is not None else fit.get("capacity_bytes")
    want = memory.fit_of(figures if isinstance(figures, dict) else None, capacity)
    if want is None:
        return ["summary memory_fit is given but its memory figures judge to none"]
    found = [
        f"summary memory_fit.{key} = {_shown(fit[key])} but its memory figures give "
        f"{_shown(want[key])}"
        for key in ("need_bytes", "capacity_bytes", "used_fraction")
        if _number(fit.get(key)) and not _close(fit[key], want[key])
    ]
    if memory.verdict_of(fit) != want["verdict"]:
        found.append(
            f"summary memory_fit.verdict = {fit.get('verdict')!r} but its memory figures give "
            f"{want['verdict']!r}"
        )
    return found


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _rows_differ(ops, column: str, have: np.ndarray, want: np.ndarray, said: str) -> list[str]:
    bad = ~np.isclose(have, want, rtol=REL_TOLERANCE, atol=0.0, equal_nan=True)
    if not bad.any():
        return []
    row = int(np.flatnonzero(bad)[0])
    return [
        f"row {row} ({ops['name'].iloc[row]}): {column} = {_shown(have[row])} but "
        f"{said} = {_shown(want[row])}"
    ]


def cost_totals(ops: pd.DataFrame) -> dict:
    """What the rows say of the cost summary's keys: each total ``SUMMARY_SUMS`` declares over
    all rows of a cost column, the coverage (the share of executed ops, bookkeeping aside, that
    have a price) and the names of the ops without one, as ``cost.summarize`` counts them."""
    totals: dict = {
        key: float(np.nansum(ops[column].to_numpy(dtype=float)))
        for key, (column, rows) in schema.SUMMARY_SUMS.items()
        if rows == "all" and column in ops and column in schema.COST_COLUMNS
    }
    if {"count", "opcode", "unknown", "name"} <= set(ops.columns):
        count = ops["count"].to_numpy(dtype=float)
        counted = (count != 0) & ~ops["opcode"].isin(BOOKKEEPING).to_numpy()
        unknown = ops["unknown"].to_numpy(dtype=bool) & counted
        total = float(count[counted].sum())
        totals["coverage"] = float(count[counted & ~unknown].sum()) / total if total else 1.0
        totals["unknown_ops"] = ops["name"].to_numpy()[unknown].tolist()
    return totals


def _coverage(ops: pd.DataFrame, summary: dict) -> list[str]:
    """The coverage and the unknown ops the summary gives, against its rows'."""
    totals = cost_totals(ops)
    found = []
    have = summary.get("coverage")
    if _number(have) and "coverage" in totals and not _close(have, totals["coverage"]):
        found.append(
            f"summary coverage = {_shown(summary['coverage'])} but its rows have a price for "
            f"{_shown(totals['coverage'])} of the ops they run"
        )
    listed, names = summary.get("unknown_ops"), totals.get("unknown_ops")
    if (
        isinstance(listed, list)
        and names is not None
        and sorted(map(str, listed)) != sorted(map(str, names))
    ):
        found.append(
            f"summary unknown_ops lists {len(listed)} op(s) but {len(names)} row(s) have no price"
        )
    return found


def _bounds(ops: pd.DataFrame) -> list[str]:
    """A row bound by a unit spends its largest time there; its bound is no less than that time,
    and its expected time no less than its bound."""
    columns = list(schema.BOUND_TIMES.values())
    if "bound" not in ops or not set(columns) <= set(ops.columns) or "t_bound_s" not in ops:
        return []
    times = ops[columns].to_numpy(dtype=float)
    largest = times.max(axis=1)
    found = []
    for column, least in (("t_bound_s", largest), ("t_expected_s", None)):
        if column not in ops:
            continue
        if least is None:
            least = ops["t_bound_s"].to_numpy(dtype=float)
        short = ops[column].to_numpy(dtype=float) < least * (1 - REL_TOLERANCE)
        if short.any():
            row = int(np.flatnonzero(short)[0])
            below = "its unit times" if column == "t_bound_s" else "its bound"
            found.append(
                f"row {row} ({ops['name'].iloc[row]}): {column} = "
                f"{_shown(ops[column].iloc[row])} is less than {below} ({_shown(least[row])})"
            )
    bound = ops["bound"].to_numpy()
    for unit, column in schema.BOUND_TIMES.items():
        rows = bound == unit
        if not rows.any():
            continue
        own = ops[column].to_numpy(dtype=float)
        wrong = rows & (own < largest * (1 - REL_TOLERANCE))
        if wrong.any():
            row = int(np.flatnonzero(wrong)[0])
            found.append(
                f"row {row} ({ops['name'].iloc[row]}): bound = {unit!r} but {column} = "
                f"{_shown(own[row])} is not its largest time ({_shown(largest[row])})"
            )
    return found


def _schedule(ops: pd.DataFrame, summary: dict) -> list[str]:
    """The expected step as scheduled and its least, walked again from the rows on the report's
    chip (the expected step never below the bound)."""
    keys = [k for k in schema.SUMMARY_SCHEDULE if _number(summary.get(k))]
    if not keys or "t_expected_s" not in ops or "collective" not in ops:
        return []
    if not _number(summary.get("step_bound_s")):
        if "t_bound_s" in ops:  # rows judged since the bound and the expectation were split
            return ["its summary lacks step_bound_s, which its rows (t_bound_s) were written with"]
        return []  # written before the split: an older walk's step, not walked again
    chip = _chip(summary)
    durations = ops["t_expected_s"].to_numpy(dtype=float)
    first: list[str] | None = None
    # a chip this process does not know (registered where the report was written: the host's
    # measured one, a user's): the step must be the walk on the queues of some kind of chip
    for kind in (chip.kind,) if chip is not None else _WALKED_KINDS:
        walked = verdict.walk_schedule(ops, kind, durations)
        found = []
        for key in keys:
            field, floor = schema.SUMMARY_SCHEDULE[key]
            value = float(getattr(walked, field))
            if floor is not None and _number(summary.get(floor)):
                value = max(value, float(summary[floor]))
            if not _close(summary[key], value):
                found.append(
                    f"summary {key} = {_shown(summary[key])} but the rows' schedule takes "
                    f"{_shown(value)}"
                )
        if not found:
            return []
        first = first if first is not None else found
    return first or []


_WALKED_KINDS = ("tpu", "gpu", "host")  # time_model.for_kind: any kind but the first two: a host's
