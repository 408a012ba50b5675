"""Text for the terminal: the op table, the summary, the module and diff tables.

Formatting only: every number comes from a report, a diff or a check result.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

from hlo_roofline.diff import Diff
from hlo_roofline.judge import memory
from hlo_roofline.report import Report
from hlo_roofline.text import format_seconds, format_table


def step_time(item: tuple[str, Report]) -> float:
    summary = item[1].summary
    return float(summary.get("step_time_serial_s") or summary.get("bytes_accessed") or 0.0)


def _percent(x: float | None) -> str:
    return "—" if x is None or x != x else f"{x:.1%}"


def _rows(x: float) -> str:
    """A matmul's rows at its ridge (the hint's ``ridge_m``); blank where none or not a matmul,
    ``any`` where one row already reaches it."""
    return "" if x != x else "any" if x < 1 else f"{x:.0f}"


def _number(x: float) -> str:
    return "—" if x != x else f"{x:.3g}"  # NaN: no bytes, no intensity


def modules_table(reports: dict[str, Report]) -> str:
    rows = []
    for key, r in sorted(reports.items(), key=step_time, reverse=True):
        s = r.summary
        rows.append(
            {
                "module": key,
                "ops": len(r.ops),
                "step ≥": format_seconds(s.get("step_bound_s", s["step_time_serial_s"]))
                if r.chip
                else "—",
                "step ≈": format_seconds(s["step_expected_s"])
                if r.chip and "step_expected_s" in s
                else "—",
                "MFU ≤": _percent(s.get("mfu_upper_bound")) if r.chip else "—",
                "memory": _percent(s["time_share"]["memory"]) if r.chip else "—",
                "FLOPs": _count(s, "flops", 3),
                "bytes": _count(s, "bytes_accessed", 3),
                "coverage": _percent(s.get("coverage")),
            }
        )
    return format_table(
        rows, right=("ops", "step ≥", "step ≈", "MFU ≤", "memory", "FLOPs", "bytes")
    )


def ops_table(report: Report, top: int = 10, width: int | None = None) -> str:
    """The top ops by predicted time (or by bytes, for a report not judged against a chip).

    Each op names the user's line that produced it and its op_name; those two are cut in the
    middle (a path's file name and line survive) to fit ``width`` (default: the terminal's).
    """
    ops = report.top(top or len(report.ops))
    rows = []
    if report.chip:
        ops = ops[ops["t_expected_s"] > 0]
        for op in ops.itertuples():
            rows.append(
                {
                    "op": op.name,
                    "opcode": op.opcode,
                    "bound": op.bound,
                    "time ≥": format_seconds(getattr(op, "t_bound_s", op.t_expected_s)),
                    "time ≈": format_seconds(op.t_expected_s),
                    "share": _percent(op.share),
                    "FLOP/B": _number(op.intensity),
                    "ridge": f"{op.critical_intensity:.0f}",
                    "ridge M": _rows(getattr(op, "ridge_m", math.nan)),
                    **_measured_cells(op),
                    **_where_cells(op),
                    "hint": op.hint,
                }
            )
        right = ("time", "share", "FLOP/B", "ridge", "ridge M", "measured", "eff.")
    else:
        for op in ops.itertuples():
            rows.append(
                {
                    "op": op.name,
                    "opcode": op.opcode,
                    "FLOPs": f"{op.flops:.3g}",
                    "bytes": f"{op.bytes_accessed:.3g}",
                    "FLOP/B": _number(
                        op.flops / op.bytes_accessed if op.bytes_accessed else float("nan")
                    ),
                    **_where_cells(op),
                }
            )
        right = ("FLOPs", "bytes", "FLOP/B")
    _fit(rows, ("user line", "op_name"), width or shutil.get_terminal_size((120, 24)).columns)
    return format_table(rows, right=right)


_MIN_WIDTH = {"user line": 32, "op_name": 20}


def _where_cells(op) -> dict[str, str]:
    """The user's line (its path relative to the working directory when inside it) and op_name."""
    user_source = getattr(op, "user_source", "")  # reports written before user_source lack it
    return {"user line": user_source.removeprefix(f"{Path.cwd()}/"), "op_name": op.op_name}


def _fit(rows: list[dict[str, str]], flexible: tuple[str, ...], width: int) -> None:
    """Shorten the ``flexible`` columns' cells so that the table fits ``width`` (each column keeps
    at least its minimum)."""
    if not rows:
        return
    widths = {h: max(len(h), *(len(str(r[h])) for r in rows)) for h in rows[0]}
    fixed = sum(w for h, w in widths.items() if h not in flexible) + 2 * (len(widths) - 1)
    wanted = {h: widths[h] for h in flexible}
    spare, total = width - fixed, sum(wanted.values())
    if total <= spare:
        return
    for h in flexible:  # room in proportion to what each column wants
        allowed = max(_MIN_WIDTH[h], spare * wanted[h] // total)
        shorten = shorten_path if h == "user line" else cut_middle
        for row in rows:
            row[h] = shorten(row[h], allowed)


def cut_middle(text: str, width: int) -> str:
    """``text`` shortened to ``width`` characters by an ellipsis in the middle; the end, where an
    op_name has its innermost scopes and a path its file, keeps three quarters."""
    if len(text) <= width:
        return text
    head = (width - 1) // 4
    return text[:head] + "…" + text[len(text) - (width - 1 - head) :]


def shorten_path(where: str, width: int) -> str:
    """``dir/file.py:line (function)`` in ``width`` characters: the directories are cut first, in
    their middle, so the file, line and function stay readable."""
    if len(where) <= width:
        return where
    directory, _, last = where.rpartition("/")
    if len(last) + 2 <= width:
        keep = width - len(last) - 2  # "…/" between what is kept of the directories and the file
        return f"{directory[:keep]}…/{last}"
    file_line, paren, function = last.partition(" (")
    room = width - len(file_line) - 5  # "…/", " (" and ")" around a function cut in the middle
    if not paren or room < 5:
        return cut_middle(where, width)
    return f"…/{file_line} ({cut_middle(function.removesuffix(')'), room)})"


def _measured_cells(op) -> dict[str, str]:
    """Measured time and roofline efficiency, for a report joined with a profile."""
    measured = getattr(op, "measured_s", None)
    if measured is None:
        return {}
    efficiency = getattr(op, "efficiency", float("nan"))
    cells = {"measured": format_seconds(measured) if measured == measured else "—"}
    cells["eff."] = _percent(efficiency) if efficiency == efficiency else "—"
    if getattr(op, "measurement_problem", ""):  # faster than its roof: no efficiency, a cause
        cells["eff."] = "— (beats roof*)"
    return cells


def _count(s: dict, key: str, digits: int = 4) -> str:
    """A summary figure, or "unknown" where the report does not know it (a refused program)."""
    value = s.get(key)
    return "unknown" if value is None or value != value else f"{value:.{digits}g}"


def summary_text(report: Report) -> str:
    """Step time bounds, MFU bound, time per bound, coverage and what was compiled for what."""
    s = report.summary
    refused = (s.get("memory") or {}).get("source") == "compiler error"
    if refused and report.ops.empty:
        ops = "ops unknown: the compiler refused the program"
    else:
        ops = f"{len(report.ops)} ops"
    lines = [f"module: {report.module}  ({ops}, cost model {s.get('cost_model')})"]
    if s.get("compiled_for"):
        lines.append(f"compiled for: {s['compiled_for']}")
    if s.get("ops_before_optimization"):
        lines.append(
            "ops: the program before optimization (the compiler refused it): FLOPs are right, "
            "bytes and times are upper bounds (nothing fused)"
        )
    if report.chip and refused and report.ops.empty:
        lines += [
            f"chip: {s.get('chip_name', report.chip)} ({report.chip}, {s.get('chip_profile')})",
            "step time: unknown (the compiler refused the program: no ops to time)",
        ]
    elif report.chip:
        lines += [
            f"chip: {s.get('chip_name', report.chip)} ({report.chip}, {s.get('chip_profile')})",
            *_step_lines(s),
            f"MFU bound: ≤ {_percent(s['mfu_upper_bound'])} of the {s.get('mfu_dtype', 'bf16')} peak"
            + (f", expected {_percent(s['mfu_expected'])}" if "mfu_expected" in s else ""),
            *_model_lines(s),
            *_loop_lines(s),
            "time per bound: "
            + ", ".join(f"{b} {_percent(v)}" for b, v in s["time_share"].items()),
        ]
        if s.get("floor_share"):  # ops shorter than the chip's per-op overhead
            lines.append(
                f"of which per-op floor: {_percent(s['floor_share'])} (ops too small to "
                "reach any roof: fuse them or grow them)"
            )
    else:
        lines.append("chip: none (pass --chip for verdicts and times)")
    if s.get("measured_step_s"):
        lines.append(
            f"measured step: {format_seconds(s['measured_step_s'])} "
            f"(per-op times cover {_percent(s.get('measured_coverage', 0.0))} of it)"
        )
        if s.get("measured_overlap"):
            lines.append(
                "warning: ops overlapped in the trace; capture on one core for clean times"
            )
        problems = report.ops.get("measurement_problem")
        if problems is not None and (problems != "").any():
            found = report.ops.loc[problems != "", ["name", "measurement_problem"]]
            lines.append(f"* {len(found)} op(s) measured faster than their roof allows:")
            lines += [f"  {name}: {why}" for name, why in found.head(5).itertuples(index=False)]
    if refused and s.get("flops") is None:
        lines.append(
            "FLOPs, bytes: unknown per device (the program was refused before partitioning: its "
            "lowered text has global shapes)"
        )
    else:
        lines.append(
            f"FLOPs per device: {_count(s, 'flops')}  bytes: {_count(s, 'bytes_accessed')}"
        )
    lines += memory.describe(s)
    lines.append(_coverage_line(s, "coverage"))
    return "\n".join(lines)


def _coverage_line(s: dict, label: str) -> str:
    """Coverage and the names of the unpriced ops (the first five), or that it is unknown."""
    coverage = s.get("coverage")
    if coverage is None or coverage != coverage:
        return f"{label}: unknown"
    line = f"{label}: {_percent(coverage)} of ops priced"
    if s.get("unknown_ops"):
        unknown = s["unknown_ops"]
        more = f", +{len(unknown) - 5} more" if len(unknown) > 5 else ""
        line += f" ({len(unknown)} unknown: {', '.join(map(str, unknown[:5]))}{more})"
    return line


def _step_lines(s: dict) -> list[str]:
    """The step's bound (no run is faster), the expectation as scheduled, no overlap at all, then
    Σ per-op time."""
    least = s.get("step_bound_s")  # reports written before it: the Σ max line alone
    lines = [
        f"step time: ≥ {format_seconds(least)} (bound: hardware facts, every unit busy), "
        f"≤ {format_seconds(s['step_time_upper_s'])} (expected, no overlap)"
        if least is not None
        else f"step time: Σ per-op {format_seconds(s['step_time_serial_s'])}, "
        f"≤ {format_seconds(s['step_time_upper_s'])} (no overlap)",
        *_scheduled_lines(s),
    ]
    scheduled = s.get("step_expected_s")
    if (
        least is not None
        and scheduled is not None
        and abs(s["step_time_serial_s"] - scheduled) > (1e-6 * scheduled)
    ):  # the ops' own sum, where the schedule's overlap moved the step away from it
        lines.append(
            f"ops one after another: {format_seconds(s['step_time_serial_s'])} (each op's own "
            "terms overlapped, no transfer hidden; the shares are of this)"
        )
    return lines


def _model_lines(s: dict) -> list[str]:
    """MFU against the user's FLOP count, and what the backward pass recomputes."""
    lines = []
    if s.get("model_flops"):
        mfu = s.get("mfu_model")
        lines.append(
            f"MFU (model FLOPs {s['model_flops']:.4g}): "
            f"{_percent(mfu) if mfu is not None else '—'} of the bf16 peak at the step as "
            f"scheduled; the program runs {s['hlo_flops_per_model_flop']:.3g} HLO FLOPs per "
            "model FLOP"
        )
    if s.get("remat_flops"):
        lines.append(
            f"recomputed (jax.checkpoint): {_percent(s['remat_flops_share'])} of the FLOPs, "
            f"{_percent(s['remat_time_share'])} of the time"
        )
    return lines


def _loop_lines(s: dict, shown: int = 3) -> list[str]:
    """The slowest while loops (a scan over layers: one layer per iteration)."""
    loops = s.get("loops") or []
    lines = []
    for loop in loops[:shown]:
        trips = loop.get("trip_count")
        per = loop.get("time_per_iteration_s")
        lines.append(
            f"loop {loop['name']}: "
            + (f"{trips:.0f} trips" if trips is not None else "trip count unknown (counted once)")
            + (f", {format_seconds(per)}" if per is not None else "")
            + f" and {loop.get('flops_per_iteration') or 0:.4g} FLOPs per iteration"
            + (f" ({_percent(loop['share'])} of the ops' time)" if loop.get("share") else "")
        )
    if len(loops) > shown:
        lines.append(f"  ... {len(loops) - shown} more loops: report.loops()")
    return lines


def _scheduled_lines(s: dict) -> list[str]:
    """The step as XLA scheduled it, and the communication it leaves exposed (newer reports)."""
    if s.get("step_expected_s") is None:
        return []
    lines = [f"step time expected, as scheduled: {format_seconds(s['step_expected_s'])}"]
    if s.get("comm_time_s"):
        lines.append(
            f"communication: {format_seconds(s['comm_time_s'])}, exposed "
            f"{format_seconds(s['exposed_comm_s'])} ({_percent(s['exposed_comm_share'])} of the "
            "scheduled step)"
        )
    if s.get("host_dispatch_s"):
        lines.append(
            f"host dispatch: {format_seconds(s['host_dispatch_s'])} a step, on top where each "
            "step waits for its outputs (hidden where the next is dispatched meanwhile)"
        )
    return lines


def report_text(report: Report, heading: str, top: int) -> str:
    head = f"== {heading} ==\n" if heading else ""
    return f"{head}{ops_table(report, top)}\n\n{summary_text(report)}\n"


# How ``diff`` names each count (diff.CHANGES), in its order.
_CHANGE_WORDS = {"flipped": "flipped bound", "added": "added", "removed": "removed", "changed": "changed"}


def diff_text(diff: Diff, top: int) -> str:
    changed = diff.ops[diff.ops["change"] != "same"]
    shown = changed.head(top) if top else changed
    rows = []
    for op in shown.itertuples():
        names = [n for n in (op.name_a, op.name_b) if isinstance(n, str)]
        bounds = [str(x) if isinstance(x, str) else "—" for x in (op.bound_a, op.bound_b)]
        rows.append(
            {
                "change": op.change,
                "op": " → ".join(dict.fromkeys(names)),
                "opcode": op.opcode,
                "bound": bounds[0] if bounds[0] == bounds[1] else " → ".join(bounds),
                "time A": format_seconds(op.t_expected_s_a),
                "time B": format_seconds(op.t_expected_s_b),
                "delta": ("+" if op.delta_s > 0 else "") + format_seconds(op.delta_s),
                "op_name": op.op_name,
            }
        )
    lines = [
        f"step: {format_seconds(diff.step_a)} → {format_seconds(diff.step_b)} "
        f"({diff.step_change:+.1%}) on {diff.chip}" + (f"; B {diff.note}" if diff.note else ""),
        "  ".join(f"{_CHANGE_WORDS[k]}: {n}" for k, n in diff.counts.items()),
    ]
    for side, coverage, unknown in (
        ("A", diff.coverage_a, diff.unknown_a), ("B", diff.coverage_b, diff.unknown_b)
    ):  # fmt: skip
        if unknown or coverage != 1.0:  # an unpriced op on either side is said
            lines.append(
                _coverage_line({"coverage": coverage, "unknown_ops": unknown}, f"coverage {side}")
            )
    if diff.hbm_change is not None:
        lines.append(
            f"HBM per device: {diff.hbm_a / 1e9:.3g} GB → {diff.hbm_b / 1e9:.3g} GB "
            f"({diff.hbm_change:+.1%})"
        )
    if rows:
        lines += ["", format_table(rows, right=("time A", "time B", "delta"))]
    if len(shown) < len(changed):
        lines.append(f"… and {len(changed) - len(shown)} more (--top 0 for all)")
    return "\n".join(lines)
