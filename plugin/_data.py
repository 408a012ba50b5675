"""Reading, re-classifying and comparing reports for the plugin's routes.

Imported by the first request that needs it (it pulls in hlo_roofline and pandas), never at
TensorBoard startup. Every verdict comes from ``Report.classify``; nothing here re-implements a rule.
"""

from __future__ import annotations

import os
import re
import threading
from collections import OrderedDict, defaultdict, deque

from hlo_roofline import chips
from hlo_roofline.chips import UnknownChipError
from hlo_roofline.report import Report, ReportError, function_of, scope_of
from hlo_roofline.verdict import VERDICT_COLUMNS
from hlo_roofline_tensorboard.plugin import REPORT_CSV, REPORT_JSON, dumps

__all__ = [
    "ReportError",
    "UnknownChipError",
    "check",
    "chip_list",
    "compare",
    "load",
    "report_csv",
    "report_json",
    "rollup",
]

_CACHE_SIZE = 8  # (report file, chip) entries; a 20k-op report is a few MB of JSON
_cache: OrderedDict[tuple, tuple[dict, str, Report]] = OrderedDict()
_loading: dict[tuple, threading.Lock] = {}  # one lock per cache key being built
_lock = threading.Lock()  # guards _cache and _loading

# An op's identity across two compiles: fusion and instruction names change, these do not.
IDENTITY = ("op_name", "source", "opcode", "shape")
COMPARE_COLUMNS = (
    "op_name", "source", "opcode", "shape", "shape_other", "name", "name_other", "bound",
    "bound_other", "t_roofline_s", "t_roofline_s_other", "delta_s", "flipped", "match",
)  # fmt: skip


_LAYOUT = re.compile(r"\{[^{}]*\}")


def _shape_key(shape) -> str:
    """A shape without its layouts (tiling and memory space change between compiles)."""
    return _LAYOUT.sub("", shape) if isinstance(shape, str) else str(shape)


def _stamp(path: str) -> tuple:
    st = os.stat(path)
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def chip_list() -> list[dict]:
    """``[{"key", "name"}]`` for every chip of the database, in its order."""
    return [{"key": key, "name": chips.get(key).name} for key in chips.names()]


# What the tab groups the op table by (see rollup); the payload carries each op's value of each.
GROUPINGS = ("user_source", "user_function", "scope")


def _build(path: str, key_chip: str | None) -> tuple[dict, str, Report]:
    """One cache entry: the report, re-classified for ``key_chip`` if given, as a payload (with
    each op's scope and user function, which the tab groups and filters by), its JSON text, and
    the report itself.

    A report that names a chip but lacks a verdict column, or cannot be re-classified for want of
    a column, is a ReportError: the tab would otherwise draw an empty chart with "none" verdicts.
    """
    report = Report.read(path)
    if key_chip is not None:
        try:
            report = report.classify(chips.get(key_chip))
        except KeyError as exc:
            raise ReportError(f"cannot classify it: missing column {exc}") from None
    elif report.chip:
        missing = [c for c in VERDICT_COLUMNS if c not in report.ops.columns]
        if missing:
            raise ReportError(f"judged on {report.chip} but missing column(s) {missing}")
    ops = report.ops
    if "op_name" in ops:
        ops = ops.assign(scope=ops["op_name"].map(scope_of))
    if "user_source" in ops:
        ops = ops.assign(user_function=ops["user_source"].map(function_of))
    payload = Report(ops, report.summary, report.module).to_dict()
    return payload, dumps(payload), report


def load(report_dir: str, chip: str | None = None) -> tuple[dict, str, Report]:
    """The report of one run as ``(payload, its JSON text, the report)``, re-classified for
    ``chip``.

    Cached by file identity (mtime, size, inode: ``write_tensorboard`` replaces the file
    atomically, so a rewrite is a new entry) and canonical chip key. Concurrent requests for one
    entry build it once (a 20k-op report takes seconds; N parallel parses would take N times as
    long and as much memory). Raises ReportError for a corrupt file and UnknownChipError for an
    unknown chip.
    """
    path = os.path.join(report_dir, REPORT_JSON)
    key_chip = chips.resolve(chip) if chip else None
    key = (path, _stamp(path), key_chip)
    with _lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
        gate = _loading.setdefault(key, threading.Lock())
    with gate:
        try:
            with _lock:
                if key in _cache:  # built by the request we waited for
                    return _cache[key]
            entry = _build(path, key_chip)
            if _stamp(path) == key[1]:  # not rewritten while we read it
                with _lock:
                    _cache[key] = entry
                    while len(_cache) > _CACHE_SIZE:
                        _cache.popitem(last=False)
            return entry
        finally:
            with _lock:
                if _loading.get(key) is gate:
                    del _loading[key]


_checked: dict[str, tuple[tuple, str | None]] = {}  # report file -> (stamp, error or None)


def check(report_dir: str) -> str | None:
    """Why a run's report cannot be shown (None if it can), remembered per file version."""
    path = os.path.join(report_dir, REPORT_JSON)
    try:
        stamp = _stamp(path)
    except OSError as exc:
        return f"cannot read the report: {exc.strerror or exc}"
    with _lock:
        known = _checked.get(path)
    if known is not None and known[0] == stamp:
        return known[1]
    try:
        load(report_dir)
        error = None
    except ReportError as exc:
        error = f"corrupt report: {exc}"
    except Exception as exc:  # a report this version cannot handle: the run cannot be shown either
        error = f"{type(exc).__name__}: {exc}"
    with _lock:
        _checked[path] = (stamp, error)
    return error


def report_json(report_dir: str, chip: str | None = None) -> str:
    return load(report_dir, chip)[1]


def rollup(report_dir: str, by: str, chip: str | None = None) -> dict:
    """``Report.rollup(by)`` of a run as ``{"by", "columns", "data"}``: one row per group, its key
    first, largest predicted time first."""
    report = load(report_dir, chip)[2]
    try:
        table = report.rollup(by)
    except ValueError as exc:  # a report without the column (written before user_source)
        raise ReportError(str(exc)) from None
    table = table.reset_index()
    table = table.astype(object).where(table.notna(), None)
    return {
        "by": by,
        "columns": list(table.columns),
        "data": [[_plain(v) for v in row] for row in table.itertuples(index=False)],
    }


def _plain(value):
    """A numpy scalar as the Python number JSON knows."""
    return value.item() if hasattr(value, "item") else value


def report_csv(report_dir: str, chip: str | None = None) -> bytes:
    """The CSV written next to the report, or (re-classified, or no CSV file) one made from it."""
    written = os.path.join(report_dir, REPORT_CSV)
    if chip is None and os.path.isfile(written):
        load(report_dir)  # a corrupt report must not be served as if it were fine
        with open(written, "rb") as f:
            return f.read()
    return load(report_dir, chip)[2].ops.to_csv(index=False).encode()


def _rows(payload: dict) -> list[dict]:
    index = {c: i for i, c in enumerate(payload["columns"])}
    wanted = (*IDENTITY, "name", "bound", "t_roofline_s")
    missing = [c for c in wanted if c not in index]
    if missing:
        raise ReportError(f"report has no column(s) {missing}")
    return [{c: row[index[c]] for c in wanted} for row in payload["data"]]


def _pair(rows_a, rows_b, left_a, left_b, key) -> list[tuple[int, int]]:
    """Pair the k-th op of ``left_a`` with a given key with the k-th of ``left_b`` (stable)."""
    queues: dict[tuple, deque] = defaultdict(deque)
    for j in left_b:
        k = key(rows_b[j])
        if k is not None:
            queues[k].append(j)
    pairs = []
    for i in left_a:
        k = key(rows_a[i])
        if k is not None and queues.get(k):
            pairs.append((i, queues[k].popleft()))
    return pairs


def _time(row: dict | None) -> float:
    t = row["t_roofline_s"] if row else None
    return float(t) if isinstance(t, int | float) and t == t else 0.0


def compare(dir_a: str, dir_b: str, chip: str | None = None) -> dict:
    """Match the ops of two runs by identity and report flipped verdicts and time deltas.

    Ops are paired on (op_name, source, opcode, shape without layout), the k-th occurrence with the
    k-th; ops left over are then paired on (op_name, source, opcode) when they carry an op_name or a
    source (the same program at another size). Rows are sorted flipped first, then by |delta|. With ``chip``
    both runs are re-classified for that chip; without it each keeps its own.
    """
    payload_a, payload_b = load(dir_a, chip)[0], load(dir_b, chip)[0]
    rows_a, rows_b = _rows(payload_a), _rows(payload_b)
    left_a, left_b = list(range(len(rows_a))), list(range(len(rows_b)))
    matched: list[tuple[int, int, str]] = []

    def exact(r):
        return (r["op_name"], r["source"], r["opcode"], _shape_key(r["shape"]))

    def loose(r):
        return (r["op_name"], r["source"], r["opcode"]) if (r["op_name"] or r["source"]) else None

    for key, how in ((exact, "exact"), (loose, "shape")):
        pairs = _pair(rows_a, rows_b, left_a, left_b, key)
        matched += [(i, j, how) for i, j in pairs]
        used_a, used_b = {i for i, _ in pairs}, {j for _, j in pairs}
        left_a = [i for i in left_a if i not in used_a]
        left_b = [j for j in left_b if j not in used_b]

    sides = (
        [(rows_a[i], rows_b[j], how) for i, j, how in matched]
        + [(rows_a[i], None, "only_run") for i in left_a]
        + [(None, rows_b[j], "only_other") for j in left_b]
    )
    data = []
    counts = {"matched": len(matched), "flipped": 0, "only_run": len(left_a)}
    counts["only_other"] = len(left_b)
    for a, b, how in sides:
        t_a, t_b = _time(a), _time(b)
        if t_a == 0 and t_b == 0:
            continue  # bookkeeping on both sides (parameters, tuples, bitcasts)
        ident = a or b
        flipped = a is not None and b is not None and a["bound"] != b["bound"]
        counts["flipped"] += flipped
        data.append(
            [
                ident["op_name"],
                ident["source"],
                ident["opcode"],
                a["shape"] if a else None,
                b["shape"] if b else None,
                a["name"] if a else None,
                b["name"] if b else None,
                a["bound"] if a else None,
                b["bound"] if b else None,
                t_a if a else None,
                t_b if b else None,
                t_b - t_a,
                flipped,
                how,
            ]
        )
    data.sort(key=lambda r: (not r[12], -abs(r[11])))

    def side(payload: dict) -> dict:
        s = payload.get("summary") or {}
        keys = ("chip", "chip_name", "step_time_lower_s", "step_time_upper_s", "mfu_upper_bound")
        return {"module": payload.get("module"), "ops": len(payload["data"])} | {
            k: s.get(k) for k in keys
        }

    return {
        "chip": chips.resolve(chip) if chip else None,
        "summary": {"run": side(payload_a), "other": side(payload_b)},
        "counts": counts,
        "columns": list(COMPARE_COLUMNS),
        "data": data,
    }
