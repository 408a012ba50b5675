"""Reading, re-classifying and comparing reports for the plugin's routes.

Imported by the first request that needs it (it pulls in hlo_roofline and pandas), never at
TensorBoard startup. Every verdict comes from ``Report.classify``; nothing here re-implements a rule.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict

import numpy as np
import pandas as pd

from hlo_roofline import chips
from hlo_roofline._gc import gc_paused
from hlo_roofline.chips import UnknownChipError
from hlo_roofline.diff import compare as diff_compare
from hlo_roofline.diff import judged_alike
from hlo_roofline.hlo.attribution import function_of, scope_of
from hlo_roofline.judge import memory
from hlo_roofline.judge.schedule import STREAM
from hlo_roofline.logdir import REPORT_JSON
from hlo_roofline.report import FORMAT as REPORT_FORMAT
from hlo_roofline.report import VERSION as REPORT_VERSION
from hlo_roofline.report import (
    Report,
    ReportError,
    ReportMissingError,
    _json_column,
    lane_title,
)
from hlo_roofline_tensorboard._json import dumps
from hlo_roofline_tensorboard._remote import gfile
from hlo_roofline_tensorboard._remote import is_remote as remote

__all__ = [
    "ReportError",
    "ReportMissingError",
    "UnknownChipError",
    "check",
    "chip_list",
    "compare",
    "constants",
    "exploration",
    "load",
    "report_csv",
    "report_json",
    "rollup",
    "timeline",
    "warm",
]

# (report file, chip) entries, kept while their JSON text totals at most _CACHE_CHARS: a logdir of
# many runs (which the run check reads one by one) never evicts the big report the tab shows, and
# a 20k-op report (~20 MB of JSON) is parsed once, not once per request.
_CACHE_SIZE = 256
_CACHE_CHARS = 400_000_000
_cache: OrderedDict[tuple, Entry] = OrderedDict()
_loading: dict[tuple, threading.Lock] = {}  # one lock per cache key being built
_lock = threading.Lock()  # guards _cache and _loading


class Entry:
    """One cached report as the routes serve it, indexable as ``(payload, its JSON text, the
    report, derived columns, (base token, JSON text of what a chip changed) or None)``. A chip's
    whole text is made when first asked for: a switch from the report the tab holds is answered
    with the changes alone, and writing the whole (some 10 MB for a 20k-op report) took a tenth
    of it."""

    __slots__ = ("_make", "_text", "delta", "derived", "payload", "report")

    def __init__(self, payload: dict, text, report: Report, derived: dict, delta=None) -> None:
        self.payload, self.report, self.derived, self.delta = payload, report, derived, delta
        self._text, self._make = (None, text) if callable(text) else (text, None)

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = self._make()  # two threads may both make it: the same text either way
        return self._text

    def chars(self) -> int:
        """The characters held (what the cache's bound counts)."""
        return len(self._text or "") + (len(self.delta[1]) if self.delta is not None else 0)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return tuple(self[i] for i in range(5)[index])
        index = range(5)[index]
        fields = (self.payload, None, self.report, self.derived, self.delta)
        return self.text if index == 1 else fields[index]


def _join(directory: str, name: str) -> str:
    return f"{directory}/{name}" if remote(directory) else os.path.join(directory, name)


def _stamp(path: str) -> tuple:
    """A file's identity: a rewrite (write_tensorboard replaces the file) is a new one. A remote
    file's is its length, all TensorBoard's gfile gives (FileNotFoundError where it is gone)."""
    if remote(path):
        from tensorboard import errors as tb_errors

        try:
            return (gfile().stat(path).length,)
        except (tb_errors.NotFoundError, OSError) as exc:
            raise FileNotFoundError(path) from exc
    st = os.stat(path)
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def _size(path: str) -> int:
    """A file's length in bytes: local, or remote through TensorBoard's gfile."""
    stamp = _stamp(path)
    return stamp[0] if remote(path) else stamp[1]


def _text(path: str) -> str:
    """A file's text: local, or remote through TensorBoard's gfile."""
    if remote(path):
        with gfile().GFile(path, "r") as f:
            return f.read()
    with open(path, encoding="utf-8") as f:
        return f.read()


def _read(path: str) -> Report:
    """``Report.read`` of a local file; a remote one's text through TensorBoard's gfile, read the
    same way (its errors are ReportErrors). The tab is a viewer, not a gate: it shows a report
    written before reports carried a checksum (a logdir from an older version) as it shows any
    other, its rows and summary held to each other all the same; ``check`` and ``diff`` refuse
    it without --trust-unsigned."""
    if not remote(path):
        return Report.read(path, trust_unsigned=True)
    try:
        text = _text(path)
    except Exception as exc:
        raise ReportError(f"cannot read report {path}: {exc}") from None
    try:
        return Report.from_text(text, trust_unsigned=True)
    except ReportError as exc:
        raise ReportError(f"{path}: {exc}") from None


def chip_list() -> list[dict]:
    """``[{"key", "name"}]`` for every chip of the database, in its order."""
    return [{"key": key, "name": chips.get(key).name} for key in chips.names()]


# The verdict columns a judged report must have for the tab to draw it: the hint's fields are
# shown where present (reports written before them have the hint text alone).

# What the tab groups the op table by (see rollup), with the label the tab shows; the payload
# carries each op's value of each.
GROUPING_LABELS = {"user_source": "user line", "user_function": "function", "scope": "scope"}
GROUPINGS = tuple(GROUPING_LABELS)
NONE_COLOR = "#a8a8a8"  # ops with no time: grey, beside the plot's palette
# The memory-fit verdicts' colours: green fits, amber tight, red does not fit.
FIT_COLORS = {
    memory.FITS: "#2e9d57", memory.TIGHT_FIT: "#e0a21e", memory.UNKNOWN: "#8c7a6b",
    memory.DOES_NOT_FIT: "#d6453d",
}  # fmt: skip
# What each roof_unit means, for the tab's legend and details (compute units: verdict's own).
ROOF_UNITS = {
    "hbm": "HBM bandwidth",
    "vmem": "VMEM bandwidth (bytes XLA placed in VMEM)",
    "link": "the links of its collective",
}


def constants() -> dict:
    """What the tab would otherwise repeat in JavaScript: the bounds and their colours, the
    groupings, the memory-fit colours and what each roof unit means."""
    from hlo_roofline.judge.compute import COMPUTE_UNITS
    from hlo_roofline.plot import COLORS
    from hlo_roofline.schema import BOUNDS

    return {
        "bounds": list(BOUNDS),
        "bound_colors": {**COLORS, "none": NONE_COLOR},
        "groupings": GROUPING_LABELS,
        "fit_colors": FIT_COLORS,
        "roof_units": {**COMPUTE_UNITS, **ROOF_UNITS},
    }


def timeline(report_dir: str, chip: str | None = None) -> dict:
    """The step as scheduled (``Report.timeline``): one row per op with time, its lane, begin,
    end and exposed seconds, each lane's title, the step's length."""
    report = load(report_dir, chip)[2]
    if not report.chip:
        raise ReportError("the report is not judged on a chip: choose one above")
    frame = report.timeline()
    kind = chips.get(report.chip).kind
    lanes = sorted(set(frame["lane"]), key=lambda k: (k != STREAM, k))
    return {
        "step_s": report.summary.get("step_expected_s"),
        "lanes": [{"lane": k, "title": lane_title(k, kind)} for k in lanes],
        "columns": ["row", "lane", "begin_s", "end_s", "exposed_s", "exposed_from_s", "wait_from_s"],
        "data": [
            [int(r.row), r.lane, r.begin_s, r.end_s, r.exposed_s, r.exposed_from_s, r.wait_from_s]
            for r in frame.itertuples(index=False)
        ],
    }


def trace_events(report_dir: str, chip: str | None = None) -> str:
    """The step as scheduled as Chrome trace-event JSON (``Report.to_trace``: what ``--trace-out``
    writes), for the tab's download and its "Open in Perfetto"."""
    report = load(report_dir, chip)[2]
    if not report.chip:
        raise ReportError("the report is not judged on a chip: choose one above")
    return report.to_trace()


def _derived(report: Report) -> dict[str, pd.Series]:
    """Each op's scope and user function, which the tab groups and filters by: they depend on the
    op's names, not on the chip, so every chip's entry of a run shares them."""
    ops, derived = report.ops, {}
    for column, name, of in (("op_name", "scope", scope_of), ("user_source", "user_function", function_of)):
        if column in ops:  # each distinct name once: ops share few of them
            codes, uniques = pd.factorize(ops[column].fillna(""), sort=False)
            values = np.array([of(u) for u in uniques] + [""], dtype=object)
            derived[name] = pd.Series(values[codes], index=ops.index)
    return derived


def _build(report_dir: str, path: str, key_chip: str | None) -> Entry:
    """One cache entry: the report, re-classified for ``key_chip`` if given, as a payload (with
    each op's scope and user function), its JSON text, the report itself, and those two columns.

    A chip's entry starts from the run's own entry (cached: the file is read and its names
    derived once, whichever chips the tab then asks for). A report that names a chip but lacks a
    verdict column, or cannot be re-classified for want of a column, is a ReportError: the tab
    would otherwise draw an empty chart with "none" verdicts.
    """
    derived = None
    as_written = None  # the file's own text, when the browser can take it as it is
    if key_chip is not None:
        try:
            own = load(report_dir)
            report, derived = own.report, own.derived
        except ReportError:  # not showable as written (no verdict columns), maybe once judged
            report = _read(path)
        try:
            report = report.classify(chips.get(key_chip))
        except KeyError as exc:
            raise ReportError(f"cannot classify it: missing column {exc}") from None
    else:
        as_written = _strict_text(path)
        report = _read(path)  # the one reader: its validation, its errors
        if as_written is not None and _stamp(path) != as_written[1]:
            as_written = None  # rewritten between the two reads: serve what was validated
        if report.chip:
            missing = report.missing_verdicts()
            if missing:
                raise ReportError(f"judged on {report.chip} but missing column(s) {missing}")
    if derived is None:
        derived = _derived(report)
    # Each op's scope and user function ride beside the report's columns ("derived"), so a report
    # as written is served as its own file's text plus them: never turned into a payload and
    # written out again (a second or more for a 20k-op report).
    extra = _derived_text(derived)
    words = dumps(_memory_words(report.summary))
    payload = {"summary": report.summary, "module": report.module}
    delta = None
    if as_written is not None:
        body = as_written[0].rstrip()
        stamp = dumps(_token(as_written[1]))
        text = f'{body[:-1]},"derived":{extra},"memory_words":{words},"stamp":{stamp}}}'
    else:
        base = _base_columns(report_dir, path) if key_chip is not None else None
        texts, stacks = _column_texts(report, base)

        def whole() -> str:
            head = _columns_text(report, texts, stacks)
            return f'{head[:-1]},"derived":{extra},"memory_words":{words}}}'

        text = whole() if base is None else whole  # with base, made when first asked for
        if base is not None:
            same = [n for n in report.ops.columns if texts[n] is base[1].get(n)]
            changed = {n: t for n, t in texts.items() if t is not base[1].get(n)}
            head = _columns_text(report, changed, stacks, same=same)
            delta = (base[3], f'{head[:-1]},"memory_words":{words},"since":{dumps(base[3])}}}')
    return Entry(payload, text, report, derived, delta)


# The derived columns' JSON text, by the columns' dict: every chip's entry of a run shares the
# run's own dict (see _build), so its text is written once, not once per chip.
_derived_texts: OrderedDict[int, tuple[dict, str]] = OrderedDict()


def _derived_text(derived: dict[str, pd.Series]) -> str:
    with _lock:
        known = _derived_texts.get(id(derived))
    if known is not None and known[0] is derived:
        return known[1]
    text = dumps({k: v.tolist() for k, v in derived.items()})
    with _lock:
        _derived_texts[id(derived)] = (derived, text)  # holding the dict keeps its id its own
        while len(_derived_texts) > _BASE_KEEP:
            _derived_texts.popitem(last=False)
    return text


def _token(stamp: tuple) -> str:
    """A file version as a short text: the tab sends back the one of the report it holds, and a
    chip's answer is then only what the chip changes (see :func:`report_json`)."""
    import hashlib

    return hashlib.sha1(repr(stamp).encode()).hexdigest()[:16]


def warm(report_dir: str) -> None:
    """Read a run's report into the cache, then make its columns' JSON texts, so that neither
    the first paint nor the first chip switch waits for them."""
    load(report_dir)
    _base_columns(report_dir, _join(report_dir, REPORT_JSON))


# What the plugin reads as it starts (warm_runs): the runs whose first paint would wait longest,
# whatever their names' order, within a budget that keeps a logdir of many big runs from holding
# them all in memory before anyone asks.
WARM_RUNS = 8
WARM_BYTES = 512 * 2**20


def warm_runs(report_dirs: list[str]) -> list[str]:
    """Warm the runs with the biggest reports first (a 20k-op run's parse is what a first paint
    waits for; a small run's takes no time), up to WARM_RUNS runs or WARM_BYTES of report text.
    Returns the directories warmed, in order. Best effort: a run that fails is skipped."""
    sized = []
    for report_dir in report_dirs:
        try:
            sized.append((_size(_join(report_dir, REPORT_JSON)), report_dir))
        except OSError:
            continue
    warmed, total = [], 0
    for size, report_dir in sorted(sized, key=lambda s: -s[0]):
        if len(warmed) >= WARM_RUNS or (warmed and total + size > WARM_BYTES):
            break
        try:
            warm(report_dir)
        except Exception:  # the first request for it reports the failure
            continue
        warmed.append(report_dir)
        total += size
    return warmed


# A run's report as written, with each column's JSON text (see _columns_text) and its version's
# token, for the runs re-judged last: a chip's payload reuses the text of every column the chip
# leaves alone.
_BASE_KEEP = 4
_base: OrderedDict[tuple, tuple[Report, dict[str, str], list[str], str]] = OrderedDict()


def _base_columns(report_dir: str, path: str) -> tuple[Report, dict[str, str], list[str], str] | None:
    """The run's own report, its columns' JSON texts and its version's token (made once per file
    version; None where the file changes under it)."""
    key = (path, _stamp(path))
    try:
        report = load(report_dir)[2]
    except ReportError:
        return None
    if _stamp(path) != key[1]:
        return None  # the report read may be either version: its texts would carry a wrong token
    with _lock:
        if key in _base:
            _base.move_to_end(key)
            return _base[key]
    texts, stacks = _column_texts(report)
    entry = (report, texts, stacks, _token(key[1]))
    with _lock:
        _base[key] = entry
        while len(_base) > _BASE_KEEP:
            _base.popitem(last=False)
    return entry


def _column_texts(report: Report, base=None) -> tuple[dict[str, str], list[str]]:
    """Each column of ``report`` as JSON text (``call_stack`` as indexes into the distinct
    stacks, as ``Report.to_dict`` writes it) and those stacks. A column equal to ``base``'s
    (the run as written) is its text, not written again: re-judging a report on another chip
    changes a quarter of its columns, and writing 800k cells took most of a chip switch."""
    ops = report.ops
    texts = {}
    stacks: list[str] = []
    for name in ops.columns:
        column = ops[name]
        known = base is not None and name in base[1] and name in base[0].ops
        if known and _equal(base[0].ops[name], column):
            texts[name] = base[1][name]
            if name == "call_stack":
                stacks = base[2]
            continue
        if name == "call_stack":
            codes, uniques = pd.factorize(column.fillna(""), sort=False)
            stacks = [str(text) for text in uniques]
            texts[name] = dumps(codes.tolist())
            continue
        if isinstance(column.dtype, np.dtype) and column.dtype.kind == "f":
            texts[name] = _float_text(column.to_numpy())
            continue
        texts[name] = dumps(_json_column(column))
    return texts, stacks


def _float_text(values: np.ndarray) -> str:
    """A float column as ``{"f64": base64 of its little-endian doubles}``: the very numbers, made
    in a hundredth of the time JSON's decimal text takes (which was a third of a chip switch on
    a 20k-op report). The tab reads NaN and ±inf back as null, as JSON has them."""
    import base64

    data = np.ascontiguousarray(values, dtype="<f8").tobytes()
    return f'{{"f64":"{base64.b64encode(data).decode("ascii")}"}}'


def _buffer(column: pd.Series) -> np.ndarray | None:
    """The array holding a column's values, where it is one (no copy)."""
    if isinstance(column.dtype, np.dtype):
        return column.to_numpy()
    return getattr(column.array, "_ndarray", None)


def _equal(a: pd.Series, b: pd.Series) -> bool:
    """Whether two columns hold the same values; at once where both are views of one array (a
    column ``classify`` did not touch), else compared."""
    x, y = _buffer(a), _buffer(b)
    if x is None or y is None or (x.dtype, x.shape, x.strides) != (y.dtype, y.shape, y.strides):
        return a.equals(b)
    return x.__array_interface__["data"] == y.__array_interface__["data"] or a.equals(b)


def _columns_text(
    report: Report, texts: dict[str, str], stacks: list[str], same: list[str] | None = None
) -> str:
    """The report as the tab's JSON, column by column: ``cols`` (one array per column of
    ``texts``, in ``columns``' order; a float column as :func:`_float_text`) in place of
    ``Report.to_dict``'s rows; the browser makes the rows. With ``same``: the columns named
    there are left out, as the report the tab holds has them (and its derived columns), and so
    are the stacks unless ``call_stack`` is sent."""
    head = {
        "format": REPORT_FORMAT,
        "version": REPORT_VERSION,
        "module": report.module,
        "summary": report.summary,
        "columns": list(report.ops.columns),
    }
    if same is not None:
        head["same"] = same
    if "call_stack" in texts:
        head["call_stacks"] = stacks
    cols = ",".join(texts[name] for name in report.ops.columns if name in texts)
    return f'{dumps(head)[:-1]},"cols":[{cols}]}}'


def _memory_words(summary: dict) -> dict | None:
    """The memory fit's verdict and remedies in words (the report holds codes; ``memory`` owns
    their wording), so the card quotes the server rather than re-wording codes."""
    fit = summary.get("memory_fit")
    if not fit:
        return None
    return {
        "code": memory.verdict_of(fit),
        "verdict": memory.verdict_text(fit),
        "advice": [memory.advice_text(a) for a in fit.get("advice") or []],
    }


def _strict_text(path: str) -> tuple[str, tuple] | None:
    """The report file's text and stamp if the browser's JSON.parse takes it as it is: a JSON
    object (not the CSV form) with no NaN or Infinity token (a file written by another tool may
    have them; where either word appears at all, the report is written out again instead)."""
    try:
        stamp = _stamp(path)
        text = _text(path)
    except Exception:
        return None  # Report.read says what is wrong
    if not text.lstrip().startswith("{") or not text.rstrip().endswith("}"):
        return None
    if "NaN" in text or "Infinity" in text:
        return None
    return text, stamp


def load(report_dir: str, chip: str | None = None) -> Entry:
    """The report of one run as ``(payload, its JSON text, the report, columns derived for the
    tab, a chip's changes or None)`` (see :func:`report_json`), re-classified for ``chip``.

    Cached by file identity (mtime, size, inode: ``write_tensorboard`` replaces the file
    atomically, so a rewrite is a new entry) and canonical chip key. Concurrent requests for one
    entry build it once (a 20k-op report takes seconds; N parallel parses would take N times as
    long and as much memory). Raises ReportError for a corrupt file and UnknownChipError for an
    unknown chip.
    """
    path = _join(report_dir, REPORT_JSON)
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
            # a chip's build makes ~10^5 objects: no collector pass in the switch's way (the
            # file's read is left to the collector: it may free what a report read before held)
            with gc_paused() if key_chip is not None else contextlib.nullcontext():
                entry = _build(report_dir, path, key_chip)
            if _stamp(path) == key[1]:  # not rewritten while we read it
                with _lock:
                    _cache[key] = entry
                    while len(_cache) > 1 and (
                        len(_cache) > _CACHE_SIZE
                        or sum(e.chars() for e in _cache.values()) > _CACHE_CHARS
                    ):
                        _cache.popitem(last=False)
            return entry
        finally:
            with _lock:
                if _loading.get(key) is gate:
                    del _loading[key]


_checked: dict[str, tuple[tuple, str | None]] = {}  # report file -> (stamp, error or None)


def check(report_dir: str) -> str | None:
    """Why a run's report cannot be shown (None if it can), remembered per file version."""
    path = _join(report_dir, REPORT_JSON)
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


def report_json(report_dir: str, chip: str | None = None, since: str | None = None) -> str:
    """The run's report as the tab's JSON (re-judged for ``chip`` if given). ``since``: the
    ``stamp`` of the report as written that the tab holds; where it is the file's still, a chip's
    answer holds only the columns the chip changed (``same`` names the others): a switch then
    sends and parses a quarter of the report."""
    entry = load(report_dir, chip)
    if chip and since and entry.delta is not None and entry.delta[0] == since:
        return entry.delta[1]
    return entry.text


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
    """The run's report as CSV (re-judged for ``chip`` if given), made from the report the tab
    shows: the run's JSON is the one file the CSV derives from, so a download never disagrees
    with the page (a ``report.csv`` beside it may be from another write, after a kill between
    the two renames). It carries its header line, so ``Report.read`` reads it back."""
    return load(report_dir, chip)[2].to_csv().encode()


COMPARE_COLUMNS = (
    "op_name", "source", "opcode", "shape", "shape_other", "name", "name_other", "bound",
    "bound_other", "t_expected_s", "t_expected_s_other", "delta_s", "flipped", "change",
)  # fmt: skip


def compare(dir_a: str, dir_b: str, chip: str | None = None) -> dict:
    """The CLI's comparison of two runs (:func:`hlo_roofline.diff.compare`), shaped for the tab.

    With ``chip`` both runs are judged on that chip first; without it the second run is judged on
    the first run's chip, as ``hlo-roofline diff`` does (``note`` says so).
    """
    report_a, report_b, note = judged_alike(_report(dir_a, chip), _report(dir_b, chip))
    diff = diff_compare(report_a, report_b)  # b is on a's chip already: compared as it is
    ops = diff.ops
    matched = ops["name_a"].notna() & ops["name_b"].notna()
    frame = pd.DataFrame(
        {
            "op_name": ops["op_name"],
            "source": ops["source"],
            "opcode": ops["opcode"],
            "shape": ops["shape_a"],
            "shape_other": ops["shape_b"],
            "name": ops["name_a"],
            "name_other": ops["name_b"],
            "bound": ops["bound_a"],
            "bound_other": ops["bound_b"],
            "t_expected_s": ops["t_expected_s_a"],
            "t_expected_s_other": ops["t_expected_s_b"],
            "delta_s": ops["delta_s"],
            "flipped": ops["change"] == "flipped",
            "change": ops["change"],
        },
        columns=list(COMPARE_COLUMNS),
    )
    data = frame.astype(object).where(frame.notna(), None).to_numpy().tolist()

    def side(report, step: float) -> dict:
        s = report.summary
        keys = ("chip", "chip_name", "step_time_upper_s", "mfu_upper_bound")
        return {"module": report.module, "ops": len(report.ops), "step_time_serial_s": step} | {
            k: s.get(k) for k in keys
        }

    return {
        "chip": diff.chip,
        "note": note,
        "summary": {"run": side(report_a, diff.step_a), "other": side(report_b, diff.step_b)},
        # the CLI's counts, and its rows in its order (flips, one side only, time changes)
        "counts": {"matched": int(matched.sum()), **diff.counts},
        "columns": list(COMPARE_COLUMNS),
        "data": data,
    }


def _report(report_dir: str, chip: str | None) -> Report:
    """A run's report as the routes serve it (cached; re-judged for ``chip`` when given)."""
    return load(report_dir, chip)[2]


# What the exploration view takes from each row of an exploration (``Exploration.document``):
# where the candidate lies (step, HBM per device), how it is judged, and how to say which it is.
_EXPLORE_ROW_KEYS = (
    "candidate", "status", "error", "step_s", "lower_s", "upper_s", "hbm_per_device", "fit",
    "bound", "why", "rank", "gap_to_best", "exposed_comm_share", "mfu_upper_bound",
    "tokens_per_s_per_chip",
)  # fmt: skip


def exploration(
    path: str, runs: set[str], prefix: str = "", offset: int = 0, limit: int | None = None
) -> dict:
    """An exploration written by ``Exploration.write_tensorboard`` (``<dir>/EXPLORE_JSON``) as the
    tab's exploration view draws it: the document's own numbers, each row's ``run`` the tab's run
    name (``prefix`` + the document's) where that run is in the logdir, else null. Rows
    ``offset`` to ``offset + limit`` (all: ``limit`` None), with ``rows_total``; the document is
    parsed once per version of the file (:func:`_exploration_document`). A file that is not an
    exploration of the version this reads is a ReportError saying so."""
    import math

    from hlo_roofline import explorer

    doc = _exploration_document(path)
    def number(value):
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        return value if ok else None

    def text(value):
        return value if isinstance(value, str) else ""

    axes = [a for a in doc.get("axes") or [] if isinstance(a, str)]
    knobs = [k for k in doc.get("knobs") or [] if isinstance(k, str)]
    rows = []
    total = len(doc["rows"])
    page = doc["rows"][offset : None if limit is None else offset + limit]
    for raw in page:
        if not isinstance(raw, dict):
            raise ReportError("an exploration row is not an object")
        row = {k: raw.get(k) for k in _EXPLORE_ROW_KEYS}
        for k in ("candidate", "status", "error", "fit", "bound", "why"):
            row[k] = text(row[k])
        row["status"] = explorer.status_of(row["status"])  # a document written before the codes
        row["status_text"] = explorer.status_text(row["status"])
        for k in ("step_s", "lower_s", "upper_s", "hbm_per_device", "rank", "gap_to_best",
                  "exposed_comm_share", "mfu_upper_bound", "tokens_per_s_per_chip"):  # fmt: skip
            row[k] = number(row[k])
        run = raw.get("run")
        named = f"{prefix}{run}" if isinstance(run, str) and run else None
        row["run"] = named if named in runs else None
        row["sizes"] = {a: number(raw.get(a)) for a in axes}
        row["knobs"] = {k: raw.get(k) if isinstance(raw.get(k), str | int | float) else None
                        for k in knobs}  # fmt: skip
        rows.append(row)
    return {
        "target": text(doc.get("target")),
        "chip": text(doc.get("chip")),
        "axes": axes,
        "knobs": knobs,
        "rank_by": text(doc.get("rank_by")),
        "hbm_capacity": number(doc.get("hbm_capacity")),
        "complete": doc.get("complete") is not False,
        "failed": len(doc.get("failed") or []),
        "rows_total": total,
        "offset": offset,
        "rows": rows,
        "pruned": len(doc.get("pruned") or []),
    }


# The last explorations parsed, by path: (mtime_ns, size, document). A page of a large one does
# not parse its tens of MB again.
_EXPLORATIONS: dict[str, tuple[int, int, dict]] = {}
_EXPLORATIONS_KEPT = 4
_EXPLORATIONS_LOCK = threading.Lock()


def _exploration_document(path: str) -> dict:
    """The exploration document at ``path``, checked; parsed again only when the file changed."""
    import json

    from hlo_roofline import explorer

    try:
        stat = os.stat(path)
        version = (stat.st_mtime_ns, stat.st_size)
    except OSError:  # remote paths: no stat, no cache
        version = None
    with _EXPLORATIONS_LOCK:
        kept = _EXPLORATIONS.get(path)
    if version is not None and kept is not None and kept[:2] == version:
        return kept[2]
    try:
        doc = json.loads(_text(path))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ReportError(f"cannot read the exploration: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != explorer.FORMAT:
        raise ReportError(f'not an exploration (no "format": "{explorer.FORMAT}")')
    if doc.get("version") != explorer.VERSION or not isinstance(doc.get("rows"), list):
        raise ReportError(f"exploration version {doc.get('version')!r}; this reads {explorer.VERSION}")
    if version is not None:
        with _EXPLORATIONS_LOCK:
            while len(_EXPLORATIONS) >= _EXPLORATIONS_KEPT:
                _EXPLORATIONS.pop(next(iter(_EXPLORATIONS)))
            _EXPLORATIONS[path] = (*version, doc)
    return doc
