"""The result users hold: a per-op DataFrame, a summary dict, and ways to save, read and show them.

Every face of the tool (Python, CLI, TensorBoard) reads and writes reports through this class, so a
report written by one is read identically by the others (``Report.read`` round-trips both formats).
"""

from __future__ import annotations

import csv
import hashlib
import html
import io
import json
import math
import os
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from hlo_roofline import chips, evidence, schema
from hlo_roofline._atomic import is_remote, join, read_remote, write_atomic
from hlo_roofline._frame import (
    as_text,
    compact,
    frame_of_arrays,
    joined,
    stored_arrays,
)
from hlo_roofline._json import json_safe
from hlo_roofline.hlo.attribution import LIBRARIES, function_of, pass_of, scope_of, user_source_of
from hlo_roofline.hlo.files import read_text, unzipped
from hlo_roofline.judge import efficiency, memory, schedule, step, verdict
from hlo_roofline.logdir import PLUGIN_NAME, REPORT_CSV, REPORT_JSON
from hlo_roofline.plot import roofline_chart

FORMAT = "hlo_roofline.report"
VERSION = 1
CSV_MAGIC = "#hlo_roofline.report "  # the older CSV's first line: its metadata as JSON
META_SUFFIX = ".meta.json"  # a CSV's metadata beside it (see meta_path)
# derived text (rollup's keys), in the TensorBoard tab's payload besides the schema's columns
_TEXT_COLUMNS = (*schema.TEXT_COLUMNS, "scope", "user_function")
BOUNDS = verdict.BOUNDS[:3]  # the units a group can be bound by (verdict.BOUNDS owns the codes)
# What rollup() groups by besides the report's own text columns: derived from op_name/user_source.
DERIVED_KEYS = ("user_function", "scope", "pass")
UNATTRIBUTED = "(unattributed)"
_TIME_COLUMNS = ("t_compute_s", "t_memory_s", "t_comm_s", "t_expected_s", "t_exposed_s")
_INTERNAL = frozenset(schema.INTERNAL_COLUMNS)


class ReportError(ValueError):
    """A report file that cannot be read (missing, truncated, corrupt, or not a report)."""


class ReportMissingError(ReportError):
    """The report file is not there (never written, or deleted since it was listed)."""


def missing(summary: dict) -> list[str]:
    """What the report's HLO did not say that its compile knew (:data:`schema.MISSING_FACTS`),
    from the summary's own facts: the tiling as the HLO was read (``api`` records it), the
    temporaries where the need is only a lower bound, the device coordinates where a TPU torus's
    were inferred for a program that communicates."""
    found = {c for c in summary.get("missing") or () if c == "tiling"}
    fit = summary.get("memory") or {}
    if fit and not fit.get("complete", True) and fit.get("source") != "compiler error":
        found.add("temporaries")
    topology = summary.get("topology") or {}
    inferred = str(topology.get("source", "")).startswith("inferred")
    if inferred and topology.get("kind") == "torus" and summary.get("comm_bytes"):
        found.add("device_coordinates")
    return [c for c in schema.MISSING_FACTS if c in found]


_MISSING_WORDS = {
    "tiling": "XLA:TPU's per-fusion tiling (window_config, written in code generation): the step "
    "time reads low. Read the dump's *after_codegen.txt (analyze_dump does, where XLA wrote it) "
    "or compiled.as_text()",
    "device_coordinates": "where the devices sit in the TPU torus (inferred as the chip's usual "
    "slice, in device-id order): communication may read high or low. Analyze the step itself, "
    "keep the dump's module folder (its compile_options and topology), or "
    "report.classify(chip, topology=mesh) with the mesh it was compiled on",
    "temporaries": "the temporaries (HLO text alone, or a TPU dump's without those code "
    "generation adds): the memory need reads low and the fit is unknown. Analyze the step "
    "itself (compiled.memory_analysis()) to know",
}


def missing_text(code: str) -> str:
    """One :data:`schema.MISSING_FACTS` code in words: what is missing, which way it leans, and
    where to get it."""
    return _MISSING_WORDS.get(code, code)


_NO_DEFAULT = object()


class _BuiltOnRead:
    """A report's frame (``ops``, ``internals``) that :meth:`Report.from_columns` leaves to be
    built from the cost layer's columns when first read: an analysis read for its summary alone
    makes no frame, and one judged on a chip makes one of both (the judged frame) rather than
    three. Given to the constructor or assigned, it is a plain attribute (the instance's)."""

    def __init__(self, default: object = _NO_DEFAULT) -> None:
        self.default = default

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, report: Report | None, owner: type | None = None):
        if report is None:  # the class's: the field's default, as dataclass asks for it
            if self.default is _NO_DEFAULT:
                raise AttributeError(self.name)
            return self.default
        return report._built(self.name)


@dataclass
class Report:
    """Per-op costs of one compiled module.

    ``ops`` has one row per executed op with values per step (already × ``count``); after
    :meth:`classify` it also holds the roofline verdict of every op for one chip.
    """

    ops: pd.DataFrame = _BuiltOnRead()  # type: ignore[assignment]
    summary: schema.Summary = field(default_factory=dict)  # type: ignore[assignment]
    module: str = ""
    # the model internals (schema.INTERNAL_COLUMNS) the cost layer wrote, rows as in ``ops``:
    # what only the time model reads, a column sparse where most ops hold its default
    internals: pd.DataFrame | None = _BuiltOnRead(None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        """Internal columns given among the ops (a frame of every column, a report of the older
        single table) go to :attr:`internals`: ``ops`` holds the public columns alone."""
        inside = [c for c in self.ops.columns if c in _INTERNAL]
        if inside:
            moved = {name: internal_array(name, self.ops[name].to_numpy()) for name in inside}
            if self.internals is not None:
                moved = {**{c: self.internals[c].array for c in self.internals}, **moved}
            self.internals = _internal_frame(moved, self.ops.index)
            self.ops = self.ops.drop(columns=inside)

    @classmethod
    def from_columns(
        cls, columns: dict[str, list | np.ndarray], summary: dict, module: str = ""
    ) -> Report:
        """The report of ``cost.rows``' columns, taken as they are: no public column is copied (a
        large module's table would be twice in memory while it is built), text made the string
        type pandas gives text; the internal columns go to :attr:`internals`. Each frame is
        built when first read (:class:`_BuiltOnRead`)."""
        report = cls.__new__(cls)
        report.summary, report.module = summary, module
        report._columns = dict(columns)  # type: ignore[attr-defined]  # what _built reads
        return report

    def _built(self, name: str) -> pd.DataFrame | None:
        """The frame ``name`` (``ops`` or ``internals``) of :meth:`from_columns`' columns, built
        now and kept as the report's own; the columns it took are let go."""
        columns = self.__dict__.get("_columns")
        if columns is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        rows = len(next(iter(columns.values()))) if columns else 0
        if name == "ops":
            arrays = {
                name: as_text(columns.pop(name)) for name in list(columns) if name not in _INTERNAL
            }
            built = frame_of_arrays(arrays)
            if built is None:
                built = pd.DataFrame(arrays, copy=False)
        else:
            inside = {
                name: internal_array(name, columns.pop(name))
                for name in list(columns)
                if name in _INTERNAL
            }
            built = _internal_frame(inside, pd.RangeIndex(rows)) if inside else None
        self.__dict__[name] = built
        if "ops" in self.__dict__ and "internals" in self.__dict__:
            del self.__dict__["_columns"]
        return built

    def model_frame(self) -> pd.DataFrame:
        """The ops with their internals beside them, each column whole (its default where
        :attr:`internals` stores none), in the schema's order: the frame the time model judges
        (:func:`~hlo_roofline.judge.verdict.classify`), and where a test or a calibration reads
        an internal count. A column the report never had (written before it) stays absent.

        A view, made for reading: its columns are the report's own arrays (no copy on a 20k-op
        report's every judging), so a write into it is a write into the report. Copy it
        (``.copy()``) before writing."""
        if "ops" not in self.__dict__ and "internals" not in self.__dict__:
            built = _model_frame_of(self.__dict__.get("_columns") or {})
            if built is not None:  # neither frame built: one frame of the columns, not three
                return built
        if self.internals is None or not len(self.internals.columns):
            return self.ops
        return _model_frame(self.ops, self.internals)

    # -- verdicts ---------------------------------------------------------------------------
    def missing_verdicts(self) -> list[str]:
        """The verdict columns a report judged on a chip lacks (none for an unjudged one): such
        a report can be judged again, not shown or gated as it is."""
        return [c for c in schema.VERDICT_CORE if c not in self.ops] if self.chip else []

    @property
    def chip(self) -> str | None:
        return self.summary.get("chip")

    def classify(self, chip, topology=None, model_flops: float | None = None) -> Report:
        """The same ops judged against ``chip`` (a name, alias or :class:`~hlo_roofline.chips.Chip`).

        ``topology`` places the devices for the collective model: the mesh the program was
        sharded on (exact TPU coordinates, GPU hosts) or an
        :class:`~hlo_roofline.judge.interconnect.Topology`; by default the one this report was judged
        with, else one inferred from the chip and the replica groups.

        ``model_flops``: your analytic FLOPs per device and step (MaxText's
        ``calculate_tflops_training_per_device(config)`` returns TFLOPs: × 1e12). The summary then
        has ``mfu_model`` (against the step as scheduled and the bf16 peak) beside the HLO's
        ``mfu_upper_bound``, and ``hlo_flops_per_model_flop``. By default the count this report
        was given before.
        """
        if topology is None:
            topology = self.summary.get("topology")
        if model_flops is None:
            model_flops = self.summary.get("model_flops")
        ops, summary_update = verdict.classify(
            self.model_frame(), chip, topology, model_flops, leave_out=_INTERNAL
        )
        if "measured_s" in ops:  # a measured report: efficiency is relative to the new roofline
            ops = efficiency.add_efficiency(ops, chip)
            summary_update["measured_problems"] = efficiency.problem_count(ops)
        # the verdict always sets every one of its keys, so it replaces an earlier chip's wholesale
        fit = memory.judge(self.summary.get("memory"), chips.get(chip))
        summary = {**self.summary, **summary_update, **fit}
        summary["missing"] = missing(summary)
        return Report(ops, summary, self.module, self.internals)

    def with_model_flops(self, model_flops: float | None) -> Report:
        """The same report with the user's FLOP count per device and step (see :meth:`classify`);
        a classified report gets its model MFU at once, another keeps the count for its chip."""
        if self.chip is not None:
            summary = {**self.summary, "model_flops": None}
            return Report(self.ops, summary, self.module, self.internals).classify(
                self.chip, model_flops=model_flops
            )
        summary = {**self.summary, "model_flops": step.check_model_flops(model_flops)}
        return Report(self.ops, summary, self.module, self.internals)

    def top(self, n: int = 10, by: str | None = None) -> pd.DataFrame:
        """The ``n`` largest ops by ``by`` (default: predicted time, else bytes)."""
        by = by or ("t_expected_s" if "t_expected_s" in self.ops else "bytes_accessed")
        return self.ops.nlargest(n, by)

    def rollup(self, by: str | Sequence[str] = "source") -> pd.DataFrame:
        """Totals per group of ops, largest predicted time first.

        ``by`` is a text column (``"source"``: the innermost Python line; ``"user_source"``: the
        user's own line; ``"op_name"``: the JAX name scope; ``"opcode"``, …) or a derived key:
        ``"user_function"`` (the user's function, any line of it), ``"scope"`` (the named scopes
        of op_name: ``jax.named_scope``, Flax Linen module paths; see :func:`scope_of`) or
        ``"pass"`` (``forward``/``backward`` under autodiff; see :func:`pass_of`). A list groups
        by several (``["scope", "pass"]``). Ops without one are grouped as ``(unattributed)``.
        A classified report adds each group's dominant ``bound`` (the unit with the most time
        summed over the group's ops that have a verdict; ``unknown`` where only unpriced ops take
        time, ``none`` where nothing does) and its bound mix:
        ``mix_compute``/``mix_memory``/``mix_communication``, the share of the group's predicted
        time in ops of that verdict.
        """
        keys = [by] if isinstance(by, str) else list(by)
        if not keys:
            raise ValueError("rollup needs at least one key")
        groups = [self._group_key(key) for key in keys]
        sums = ["count", "flops", "transcendentals", "bytes_accessed", "comm_bytes"]
        sums += [c for c in (*_TIME_COLUMNS, "share", "measured_s") if c in self.ops]
        grouped = self.ops.groupby(groups, sort=False)
        out = grouped[sums].sum()
        out.insert(0, "ops", grouped.size())
        if "t_expected_s" in out:
            # the units' times of the ops that have a verdict: an unpriced op's bytes are no
            # evidence that its group is memory-bound
            known = self.ops["bound"] != "unknown"
            unit_times = self.ops[["t_compute_s", "t_memory_s", "t_comm_s"]].where(known, 0.0)
            parts = unit_times.groupby(groups, sort=False).sum().reindex(out.index).to_numpy()
            unknown = self.ops["t_expected_s"].where(~known, 0.0).groupby(groups).sum()
            out["bound"] = np.select(
                [parts.max(axis=1) > 0, unknown.reindex(out.index).to_numpy() > 0],
                [np.array(BOUNDS)[parts.argmax(axis=1)], "unknown"],
                "none",
            )
            time_s = self.ops["t_expected_s"]
            total = out["t_expected_s"].where(out["t_expected_s"] > 0)
            for bound in BOUNDS:
                by_bound = time_s.where(self.ops["bound"] == bound, 0.0).groupby(groups).sum()
                out[f"mix_{bound}"] = (by_bound.reindex(out.index) / total).fillna(0.0)
            out = out.sort_values("t_expected_s", ascending=False, kind="stable")
        return out

    def loops(self) -> pd.DataFrame:
        """Every while loop (a ``lax.scan`` over layers is one): trip count, iterations per step,
        totals over what it runs (nested loops included), and per iteration: ``flops_``,
        ``bytes_per_iteration`` and, once classified, ``time_per_iteration_s`` (one layer of a
        scanned stack). Indexed by the ``loop`` column's path; ``rollup("loop")`` gives each
        loop's own ops alone. Empty for a report without loops (or written before the column)."""
        return step.loop_table(self.ops)

    def _group_key(self, key: str) -> pd.Series:
        if key in DERIVED_KEYS:
            source = "user_source" if key == "user_function" else "op_name"
            if source not in self.ops:
                raise ValueError(f"rollup by {key!r} needs the column {source!r}")
            derive = {"user_function": function_of, "scope": scope_of, "pass": pass_of}[key]
            values = self.ops[source].map(derive)
        elif key in self.ops and key in _TEXT_COLUMNS:
            values = self.ops[key]
        else:
            known = [c for c in _TEXT_COLUMNS if c in self.ops] + list(DERIVED_KEYS)
            raise ValueError(f"rollup by one of {', '.join(known)}, not {key!r}")
        return values.replace("", UNATTRIBUTED).rename(key)

    # -- attribution ------------------------------------------------------------------------
    def stack(self, op: str | int) -> list[str]:
        """The Python call stack of an op (its name, or its row's index), innermost first."""
        if "call_stack" not in self.ops:
            return []
        rows = self.ops.index[self.ops["name"] == op] if isinstance(op, str) else [op]
        if len(rows) == 0:
            raise KeyError(f"no op named {op!r}")
        text = self.ops.at[rows[0], "call_stack"]
        return text.split("\n") if text else []

    def attribute(self, libraries: Sequence[str] = LIBRARIES) -> Report:
        """The same report with ``user_source`` found again, treating ``libraries`` (package
        names, or directories) as library code besides installed packages and the standard
        library: ``report.attribute([*hlo_roofline.hlo.attribution.LIBRARIES, "my_layers"])``."""
        if "call_stack" not in self.ops:
            return self
        users = {text: user_source_of(text, libraries) for text in self.ops["call_stack"].unique()}
        ops = self.ops.assign(user_source=self.ops["call_stack"].map(users))
        return Report(ops, dict(self.summary), self.module, self.internals)

    # -- saving and reading -----------------------------------------------------------------
    def to_dict(self) -> dict:
        """A JSON-safe dict: NaN and ±inf become null.

        The ``call_stack`` column holds an index into ``call_stacks``, the distinct stacks: ops
        share a few dozen of them, and each is a dozen lines long.
        """
        ops = self.ops
        check_codes(ops)  # a code the reader would refuse is not written
        stacks: list[str] = []
        if "call_stack" in ops:
            codes, uniques = pd.factorize(ops["call_stack"].fillna(""), sort=False)
            stacks = [str(text) for text in uniques]
            ops = ops.assign(call_stack=codes)
        columns = [_json_column(ops[name]) for name in ops.columns]
        payload = {
            "format": FORMAT,
            "version": VERSION,
            "module": self.module,
            "summary": json_safe(self.summary),
            "columns": list(ops.columns),
            "rows": len(ops),
            "data": [list(row) for row in zip(*columns, strict=True)],
        }
        if "call_stack" in self.ops:
            payload["call_stacks"] = stacks
        if self.internals is not None:
            payload["internals"] = internals_payload(self.internals, self.ops.index)
        return payload

    def to_json(self, path: str | os.PathLike | None = None) -> str:
        """The report as JSON, its checksum first (:mod:`hlo_roofline.evidence`)."""
        text = evidence.sign(json.dumps(self.to_dict(), allow_nan=False))
        if path is not None:
            write_atomic(path, text)  # a URL written there, a local path atomically
        return text

    def to_csv(self, path: str | os.PathLike | None = None) -> str:
        """The ops as a plain CSV (``pd.read_csv(path)`` gives the columns); with ``path``, the
        module name and summary go beside it in :func:`meta_path` (``x.csv`` → ``x.meta.json``),
        which :meth:`read` needs to read the CSV back as a report. Returns the CSV text."""
        check_codes(self.ops)  # a code the reader would refuse is not written
        text = self.ops.to_csv(index=False)
        if path is not None:
            _write_csv(self, path if is_remote(path) else Path(path), text)
        return text

    @classmethod
    def read(cls, path: str | os.PathLike, *, trust_unsigned: bool = False) -> Report:
        """Read a report written by :meth:`to_json` or :meth:`to_csv` (the CSV with the
        ``.meta.json`` beside it, or a CSV of the older form that carried it as a first comment
        line), or a TensorBoard run directory.

        The one reader every face uses: the rows are held to the schema and the summary to the
        rows, and the file to its checksum (:mod:`hlo_roofline.evidence`); a report without one
        (written by hand, or before reports carried one), or whose bytes changed since, is a
        :class:`ReportError` unless ``trust_unsigned`` (its rows and summary are checked still).
        """
        if is_remote(path):  # gs://, s3://, memory://: read where the tool writes them
            text = _read_text(path)
            is_csv = str(path).lower().endswith(".csv")
            meta_text = _read_text(meta_path(path), "the summary of") if is_csv else None
            return cls._from_file_text(path, text, meta_text, trust_unsigned)
        path = Path(path)
        if path.is_dir():
            path = path / "plugins" / PLUGIN_NAME / REPORT_JSON
        text = _read_text(path)
        meta_text = None
        if not text.startswith(CSV_MAGIC) and (
            path.suffix.lower() == ".csv" or (meta_path(path).is_file() and _not_json(text))
        ):
            meta_text = _read_text(meta_path(path), what="the summary of")
        return cls._from_file_text(path, text, meta_text, trust_unsigned)

    @classmethod
    def _from_file_text(
        cls, path, text: str, meta_text: str | None, trust_unsigned: bool
    ) -> Report:
        """:meth:`from_text` of a file's text, its errors naming the file."""
        try:
            return cls.from_text(text, meta_text, trust_unsigned=trust_unsigned)
        except ReportError as exc:
            said = str(exc)
            joined = f"{path} is {said}" if said.startswith("not a readable") else f"{path}: {said}"
            raise type(exc)(joined) from None

    @classmethod
    def from_text(
        cls, text: str, meta_text: str | None = None, *, trust_unsigned: bool = False
    ) -> Report:
        """A report from a file's text (a CSV's with ``meta_text``, its ``.meta.json``'s), checked
        as :meth:`read` checks it; every error is a :class:`ReportError`."""
        try:
            if text.startswith(CSV_MAGIC):
                report, seal = cls._from_old_csv(text), evidence.UNSIGNED
            elif meta_text is not None:
                report, seal = cls._from_csv(text, meta_text), evidence.verify(meta_text, text)
            else:
                report, seal = cls.from_dict(json.loads(text)), evidence.verify(text)
        except ReportError:
            raise
        except RecursionError:
            raise ReportError("not a readable hlo_roofline report (nested too deep)") from None
        except _UNREADABLE as exc:
            raise ReportError(f"not a readable hlo_roofline report ({exc})") from None
        if seal is not None and not trust_unsigned:
            raise ReportError(
                "unsigned: it carries no checksum (written by hand, or by an older version); "
                "read it with --trust-unsigned (trust_unsigned=True) if you trust it"
                if seal == evidence.UNSIGNED
                else f"{seal}; read it with --trust-unsigned (trust_unsigned=True) if you trust it"
            )
        return report

    @classmethod
    def from_dict(cls, data: dict) -> Report:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ReportError("not an hlo_roofline report (no 'format' marker)")
        if data.get("version") != VERSION:
            raise ReportError(f"report version {data.get('version')} is not {VERSION}")
        columns, records = data["columns"], data["data"]
        if not isinstance(columns, list) or not isinstance(records, list):
            raise ReportError("its 'columns' or its 'data' is not a list")
        _refuse_twice(columns)
        short = next((i for i, r in enumerate(records) if not isinstance(r, list)
                      or len(r) != len(columns)), None)  # fmt: skip
        if short is not None:  # pandas would fill a short record's last cells with None
            raise ReportError(f"its record {short} does not hold one value per column")
        ops = pd.DataFrame(records, columns=columns)
        rows = data.get("rows", len(ops))
        if isinstance(rows, bool) or not isinstance(rows, int) or rows != len(ops):
            raise ReportError(f"it says it has {rows!r} rows but holds {len(ops)}")
        if "call_stacks" in data and "call_stack" in ops:
            stacks = data["call_stacks"]
            if not isinstance(stacks, list) or not all(isinstance(t, str) for t in stacks):
                raise ReportError("its 'call_stacks' is not a list of strings")
            ops["call_stack"] = _stack_texts(stacks, ops["call_stack"])
        return validate(
            cls(
                _restore_types(ops),
                _summary(data),
                data.get("module", ""),
                _internals_of(data, ops),
            )
        )

    @classmethod
    def _from_csv(cls, text: str, meta_text: str) -> Report:
        """A plain CSV and its metadata: the metadata says how many records follow and holds
        the CSV's hash, so a file cut short, or a CSV and a summary from two writes, is refused."""
        meta = json.loads(meta_text)
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise ReportError("its .meta.json is not an hlo_roofline report's")
        if meta.get("version") != VERSION:
            raise ReportError(f"report version {meta.get('version')} is not {VERSION}")
        digest = meta.get("csv_sha256")  # older sidecars: the CSV's alone
        if digest is not None and digest != hashlib.sha256(text.encode()).hexdigest():
            raise ReportError("the CSV is not the one its .meta.json was written with")
        return cls._csv_body(text, meta)

    @classmethod
    def _from_old_csv(cls, text: str) -> Report:
        """The older form: the metadata as JSON on the CSV's first line, after :data:`CSV_MAGIC`."""
        header, _, body = text.partition("\n")
        return cls._csv_body(body, json.loads(header[len(CSV_MAGIC) :]))

    @classmethod
    def _csv_body(cls, body: str, meta) -> Report:
        """The CSV's records, as many as its metadata says: a file cut between or inside records
        is refused, not read as a smaller report."""
        if not isinstance(meta, dict):
            raise ReportError("its metadata is not a JSON object")
        rows = meta.get("rows")
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
            raise ReportError("its metadata does not say how many rows follow")
        if not body.endswith("\n"):
            raise ReportError("truncated: its last record is cut")
        _refuse_twice(next(csv.reader([body.partition("\n")[0]]), []))  # pandas renames a second
        ops = pd.read_csv(io.StringIO(body), keep_default_na=False, na_values=[""])
        if len(ops) != rows:
            raise ReportError(f"truncated: {len(ops)} of {rows} rows")
        internals = _internals_of(meta, ops)
        return validate(cls(_restore_types(ops), _summary(meta), meta.get("module", ""), internals))

    def write_tensorboard(self, logdir: str | os.PathLike, run: str = ".") -> Path:
        """Write ``<logdir>/<run>/plugins/hlo_roofline/report.{json,csv,meta.json}`` (each file
        atomically).

        ``run`` must stay inside ``logdir`` (ValueError otherwise). The files are 0644: a
        TensorBoard running as another user must be able to read them. A URL logdir
        (``gs://bucket/logs``) is written through its filesystem (``_atomic.write_remote``).
        A code the reader would refuse (an unknown ``hint_reason``) is a :class:`ReportError`
        before any file is written.
        """
        check_codes(self.ops)
        if is_remote(logdir):
            if any(part in ("..", "") for part in str(run).split("/") if part != "."):
                raise ValueError(f"run {run!r} is outside the logdir {str(logdir)!r}")
            parts = [p for p in str(run).split("/") if p not in ("", ".")]
            remote = join(logdir, *parts, "plugins", PLUGIN_NAME)
            _write_csv(self, join(remote, REPORT_CSV), self.ops.to_csv(index=False))
            write_atomic(join(remote, REPORT_JSON), self.to_json())
            return remote
        root = Path(logdir).resolve()
        inside = (root / run).resolve()
        if inside != root and root not in inside.parents:
            raise ValueError(f"run {run!r} is outside the logdir {str(logdir)!r}")
        directory = Path(logdir) / run / "plugins" / PLUGIN_NAME
        directory.mkdir(parents=True, exist_ok=True)
        _write_csv(self, directory / REPORT_CSV, self.ops.to_csv(index=False), mode=0o644)
        write_atomic(directory / REPORT_JSON, self.to_json(), mode=0o644)
        return directory

    # -- showing ----------------------------------------------------------------------------
    def __repr__(self) -> str:
        s = self.summary
        text = (
            f"<Report {self.module}: {len(self.ops)} ops, {s.get('flops', 0):.4g} FLOPs, "
            f"{s.get('bytes_accessed', 0):.4g} bytes, coverage {s.get('coverage', 1):.1%}"
        )
        if self.chip:
            least = s.get("step_time_min_s", s["step_time_serial_s"])  # older reports: Σ max
            text += f", {self.chip}: step ≥ {least * 1e3:.4g} ms"
        return text + ">"

    def _repr_html_(self) -> str:
        columns = [
            c
            for c in ("name", "opcode", "bound", "t_expected_s", "share", "flops",
                      "bytes_accessed", "intensity", "op_name", "hint")
            if c in self.ops
        ]  # fmt: skip
        table = self.top(20)[columns].to_html(
            index=False, escape=True, float_format="{:.4g}".format
        )
        return f"<p>{html.escape(repr(self))}</p>{table}"

    def plot(self, path: str | os.PathLike, title: str | None = None) -> Path:
        """A log-log roofline chart (PNG or SVG by extension) of a classified report."""
        return roofline_chart(self, path if is_remote(path) else Path(path), title)

    # -- the step as scheduled -----------------------------------------------------------------
    def timeline(self) -> pd.DataFrame:
        """Where each op with time ran in the step as scheduled (:mod:`hlo_roofline.judge.schedule`):
        ``name``, ``lane`` (``compute``: the stream; ``dma``, ``interconnect[:<group>]``: the
        engine its transfer ran on), ``begin_s`` and ``end_s`` within the step, ``exposed_s``
        (the stream's wait for its transfer, ending at ``end_s``; ``wait_from_s`` where that
        wait began, ``exposed_from_s`` where it overlaps the op's own bar) and its row in
        :attr:`ops`.
        Ops without time are left out, unless the stream waits for them (a zero-time copy-start
        whose transfer is exposed: its wait is drawn). Needs a judged report."""
        if not self.chip:
            raise ValueError("the report is not judged on a chip: classify it first")
        t = self.ops["t_expected_s"].to_numpy(dtype=float)
        walked = verdict.walk_schedule(self.model_frame(), chips.get(self.chip).kind, t)
        frame = pd.DataFrame(
            {
                "row": np.arange(len(self.ops)),
                "name": self.ops["name"].to_numpy(),
                "lane": walked.lane.astype(str),
                "begin_s": walked.begin_s,
                "end_s": walked.end_s,
                "exposed_s": walked.exposed_s,
                "wait_from_s": walked.end_s - walked.exposed_s,
                "exposed_from_s": np.maximum(walked.begin_s, walked.end_s - walked.exposed_s),
            }
        )
        return frame[(t > 0) | (walked.exposed_s > 0)].reset_index(drop=True)

    def to_trace(self, path: str | os.PathLike | None = None) -> str:
        """The step as scheduled as Chrome trace-event JSON (opens in Perfetto, ``chrome://tracing``
        and XProf's trace viewer beside a measured trace): one thread for the compute stream and
        one per transfer engine, each op a complete event (µs), the exposed part of a transfer a
        nested ``exposed`` event and the stream's wait for it an event on the stream."""
        frame = self.timeline()
        lanes = sorted(set(frame["lane"]) - {schedule.STREAM})
        tid = {schedule.STREAM: 1} | {lane: i + 2 for i, lane in enumerate(lanes)}
        chip = self.summary.get("chip_name") or self.chip
        events: list[dict] = [
            _meta("process_name", 0, f"hlo_roofline: {self.module or 'module'} on {chip}"),
            *(_meta("thread_name", tid[k], lane_title(k, chips.get(self.chip).kind)) for k in tid),
            *(
                {"ph": "M", "pid": 1, "tid": n, "name": "thread_sort_index",
                 "args": {"sort_index": n}} for n in tid.values()
            ),
        ]  # fmt: skip
        cols = [c for c in ("op_name", "opcode", "bound", "roof_unit", "source") if c in self.ops]
        us = 1e6
        for r in frame.itertuples(index=False):
            op = self.ops.iloc[r.row]
            args = {c: json_safe(op[c]) for c in cols} | {
                "t_expected_s": float(op["t_expected_s"]),
                "exposed_s": float(r.exposed_s),
            }
            begin, end = r.begin_s * us, r.end_s * us
            events.append(_complete(r.name, tid[r.lane], begin, end, args, r.lane))
            if r.exposed_s > 0:
                wait_from = r.wait_from_s * us
                events.append(
                    _complete("exposed", tid[r.lane], r.exposed_from_s * us, end, {"op": r.name})
                )
                if r.lane != schedule.STREAM:
                    events.append(
                        _complete(f"waits for {r.name}", 1, wait_from, end, {"op": r.name})
                    )
        text = json.dumps(
            {"traceEvents": events, "displayTimeUnit": "ns", "otherData": {"chip": chip}},
            allow_nan=False,
        )
        if path is not None:
            write_atomic(path, text)  # a URL written there, as to_json's
        return text


def _meta(kind: str, tid: int, name: str) -> dict:
    return {"ph": "M", "pid": 1, "tid": tid, "name": kind, "args": {"name": name}}


def _complete(name: str, tid: int, begin: float, end: float, args: dict, cat: str = "") -> dict:
    event = {"ph": "X", "pid": 1, "tid": tid, "name": name, "ts": begin, "dur": end - begin}
    return event | {"cat": cat or "exposed", "args": args}


def lane_title(lane: str, kind: str) -> str:
    """A lane as a person names it: the compute stream, the DMA engine, a collective's links
    (ICI on a TPU, with the device group whose links they are; NVLink and network on a GPU)."""
    if lane == schedule.STREAM:
        return "compute stream"
    if lane == schedule.COPY_ENGINE:
        return "DMA (copies, prefetches)"
    queue, group = schedule.lane_parts(lane)
    links = "ICI" if kind == "tpu" else "NVLink / network" if kind == "gpu" else "interconnect"
    if queue not in (schedule.COLLECTIVE_ENGINE, schedule.COPY_ENGINE):  # another core's queue
        return f"{queue} ({links} {group})" if group else queue
    return f"{links} {group}".strip()


def _json_column(column: pd.Series) -> list:
    """One column's values as JSON-safe Python objects (NaN, ±inf and missing values as None).

    Numbers and booleans are converted by NumPy a column at a time (a 20k-op report has 800k
    cells: one Python call per cell took most of the time the tab needs to serve a run); any
    other column, or one with missing values NumPy cannot hold, cell by cell.
    """
    kind = column.dtype.kind if isinstance(column.dtype, np.dtype) else ""
    if kind == "f":
        values = column.to_numpy()
        cells = values.tolist()
        for i in np.flatnonzero(~np.isfinite(values)).tolist():
            cells[i] = None
        return cells
    if kind and kind in "biu":
        return column.to_numpy().tolist()
    if isinstance(column.dtype, pd.StringDtype):  # text or missing, nothing to convert
        return column.astype(object).where(column.notna(), None).tolist()
    cells = column.astype(object).where(column.notna(), None)
    return [json_safe(v) for v in cells.tolist()]


def _write_csv(report: Report, path: Path | str, text: str, mode: int | None = None) -> None:
    """The CSV and its metadata, each atomically; the metadata first, so a CSV is never newer
    than the summary that goes with it (a reader also checks the CSV's hash)."""
    meta = {
        "format": FORMAT,
        "version": VERSION,
        "module": report.module,
        "rows": len(report.ops),
        "summary": json_safe(report.summary),
    }  # its checksum covers the CSV too (evidence.sign)
    if report.internals is not None:
        meta["internals"] = internals_payload(report.internals, report.ops.index)
    write_atomic(meta_path(path), evidence.sign(json.dumps(meta, allow_nan=False), text), mode=mode)
    write_atomic(path, text, mode=mode)


def meta_path(csv_path: str | os.PathLike) -> Path:
    """Where :meth:`Report.to_csv` keeps a CSV's module name and summary: ``x.csv`` →
    ``x.meta.json`` (any other name: the name + ``.meta.json``); beside a URL, a URL."""
    if is_remote(csv_path):
        url = str(csv_path)
        return url.removesuffix(".csv") + META_SUFFIX  # type: ignore[return-value]
    path = Path(csv_path)
    stem = path.name.removesuffix(".csv") if path.suffix == ".csv" else path.name
    return path.with_name(stem + META_SUFFIX)


def _not_json(text: str) -> bool:
    """A CSV's text, not a JSON report's (a stray ``.meta.json`` beside a JSON report is not its)."""
    return not text.lstrip().startswith("{")


def _read_text(path: str | Path, what: str = "") -> str:
    """A report file's text (a URL's through its filesystem); missing, unreadable or not UTF-8 is
    a :class:`ReportError`."""
    named = f"{what or 'report'} {path}"
    try:
        if is_remote(path):
            return unzipped(read_remote(str(path)), path).decode()
        return read_text(path)  # a FIFO or a device refused at once; gzip read through
    except FileNotFoundError:
        raise ReportMissingError(f"cannot read {named}: No such file or directory") from None
    except OSError as exc:
        raise ReportError(f"cannot read {named}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ReportError(f"{named} is not a readable hlo_roofline report (not UTF-8)") from None


REQUIRED_COLUMNS = (
    "name", "opcode", "computation", "count", "flops", "transcendentals", "bytes_accessed",
    "comm_bytes",
)  # fmt: skip


# The verdict's free text a judged report may lack and still be shown and gated (no verdict rests
# on it; faces print it beside a violation): read back as empty. (The hint's and roof's fields
# stay absent: faces tell an older report by them.)
_OPTIONAL_VERDICT_TEXT = ("hint",)
# what parsing a damaged file raises, an integer past an int64 (OverflowError) among them
_UNREADABLE = (
    ValueError, TypeError, KeyError, AttributeError, OverflowError, pd.errors.ParserError,
)  # fmt: skip
_TRUE, _FALSE = (True, "True", "true", 1, 1.0), (False, "False", "false", 0, 0.0)


def _restore_types(ops: pd.DataFrame) -> pd.DataFrame:
    """The columns of a report read back, in their schema dtypes; a cell that is not of its
    column's type (an empty time, a bool that says "abc") is a :class:`ReportError`."""
    ops = ops.rename(columns={k: v for k, v in schema.RENAMED.items() if v not in ops.columns})
    missing = [c for c in REQUIRED_COLUMNS if c not in ops.columns]
    if missing:
        raise ReportError(f"not a report: missing columns {missing}")
    if "bound" in ops.columns:  # judged: text a verdict may lack (older or edited files) is empty
        for column in _OPTIONAL_VERDICT_TEXT:
            if column not in ops.columns:
                ops[column] = ""
    for column in ops.columns:
        values = ops[column]
        if column in _TEXT_COLUMNS:
            if isinstance(values.dtype, pd.StringDtype):  # already text (or missing): no copy
                ops[column] = values.fillna("") if values.hasnans else values
            else:
                if values.dtype == object and pd.api.types.infer_dtype(values) not in _TEXTUAL:
                    # JSON's lists and objects are no text of a report's (looked for cell by cell
                    # only in a column not all text)
                    containers = values.map(lambda v: isinstance(v, list | dict)).to_numpy(bool)
                    _refuse_cells(ops, containers, column, "is not text")
                ops[column] = values.astype(object).fillna("").astype(str)
        elif column in schema.BOOL_COLUMNS:
            bad = ~values.isin([*_TRUE, *_FALSE])
            _refuse_cells(ops, bad, column, "is not true or false")
            ops[column] = values.isin(_TRUE).astype(bool)
        else:
            numbers = pd.to_numeric(values, errors="coerce")
            if column not in schema.BY_NAME:  # a user's own column is theirs to fill: numbers
                if (numbers.isna() & values.notna()).any():  # where it holds them, else text
                    ops[column] = values.astype(object).fillna("").astype(str)
                    continue
            else:
                _refuse_cells(ops, _bools(values), column, "is not a number")
            _refuse_cells(ops, numbers.isna() & values.notna(), column, "is not a number")
            if column in schema.INT_COLUMNS:
                _refuse_cells(ops, numbers.isna(), column, "is empty")
                _refuse_cells(ops, ~_whole_numbers(numbers), column, "is not a whole number")
                ops[column] = numbers.astype(np.int64)
            else:
                ops[column] = numbers.astype(float)
    return ops


# What pandas' own type inference (in C) calls a column of text, with or without missing cells.
_TEXTUAL = frozenset({"string", "empty"})


def _bools(values: pd.Series) -> pd.Series:
    """Where a number column holds true or false (JSON's ``true``, which pandas reads as 1)."""
    if values.dtype == bool:
        return pd.Series(True, index=values.index)
    if values.dtype != object:
        return pd.Series(False, index=values.index)
    return values.map(lambda v: isinstance(v, bool | np.bool_))


_INT_LIMIT = 2.0**63  # an int column's values are int64s: no whole number at or past this


def _whole_numbers(numbers) -> np.ndarray:
    """Where each number is whole and an int64 holds it (a fraction or a 1e20 would be cut or
    wrapped, not read)."""
    values = np.asarray(numbers, dtype=float)
    return (values == np.floor(values)) & (np.abs(values) < _INT_LIMIT)


def _refuse_twice(columns) -> None:
    """A column named twice: which of its values a gate read would be the reader's guess."""
    seen: set = set()
    for name in columns:
        if name in seen:
            raise ReportError(f"its columns name {name!r} twice")
        seen.add(name)


def validate(report: Report) -> Report:
    """Hold a report read back to the schema: every record complete, values in range, NaN only
    where a column allows it, codes from their owner's list, the summary's numbers finite.
    Damaged input raises :class:`ReportError` naming the first bad field, so no gate judges it."""
    ops = report.model_frame()  # the internals held to the schema as the public columns are
    for column in ops.columns:
        values = ops[column]
        if values.dtype.kind not in "fi" or column in schema.BOOL_COLUMNS:
            continue
        if column not in schema.NULLABLE_COLUMNS:
            _refuse_cells(ops, values.isna(), column, "is empty")
        _refuse_cells(ops, np.isinf(values) | (values < 0), column, "is negative or infinite")
        if column in schema.FRACTION_COLUMNS:
            _refuse_cells(ops, values > 1 + 1e-9, column, "is more than the whole")
    check_codes(report.ops)
    _validate_summary(report.summary)
    contradicted = evidence.contradictions(ops, report.summary)
    if contradicted:
        raise ReportError("its summary contradicts its rows: " + "; ".join(contradicted[:3]))
    return report


def check_codes(ops: pd.DataFrame) -> None:
    """Every code column holds its owner's codes (``bound``, ``hint_reason``): checked as a report
    is read and as it is written, so nothing is written that the reader would refuse."""
    if "bound" in ops:
        _refuse_cells(ops, ~ops["bound"].isin(verdict.BOUNDS), "bound", "is not a known bound")
    if "hint_reason" in ops:
        known = ops["hint_reason"].isin(("", *schema.HINT_REASONS))
        _refuse_cells(ops, ~known, "hint_reason", "is not a known hint")


def _refuse_cells(ops: pd.DataFrame, bad, column: str, why: str) -> None:
    bad = np.asarray(bad, dtype=bool)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        name = ops["name"].iloc[row] if "name" in ops else row
        value = ops[column].iloc[row]
        value = value.item() if isinstance(value, np.generic) else value  # 2.5, not np.float64(2.5)
        raise ReportError(f"row {row} ({name}): {column} = {value!r} {why}")


def _finite(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _holds(hint, value) -> bool:
    """``value`` is of the type ``schema.Summary`` declares, a container's items too (a roof
    that is no object would fail its reader, not the reader of reports); a ``float`` may be
    null, a NaN as JSON writes it."""
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        return any(_holds(h, value) for h in typing.get_args(hint))
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    if hint is type(None) or hint is typing.Any:
        return value is None or hint is typing.Any
    if hint is float:
        return value is None or (isinstance(value, int | float) and not isinstance(value, bool))
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if typing.is_typeddict(hint):
        return isinstance(value, dict)
    if origin is dict and isinstance(value, dict):
        keys, items = typing.get_args(hint) or (typing.Any, typing.Any)
        return all(_holds(keys, k) and _holds(items, v) for k, v in value.items())
    if origin is list and isinstance(value, list):
        (item,) = typing.get_args(hint) or (typing.Any,)
        return all(_holds(item, v) for v in value)
    return isinstance(value, origin or hint)


_SUMMARY_TYPES = typing.get_type_hints(schema.Summary)


# What every report's summary holds, and what a judged one's has held since reports carried a
# version (the chip and its profile, the roofs a chart draws, the shares): a gate or a face reads
# them. The keys added since come in groups (schema.SUMMARY_GROUPS): all of one, or none.
_COST_KEYS = frozenset(schema.CostSummary.__required_keys__)
_VERDICT_KEYS = frozenset(schema.VerdictSummary.__required_keys__).difference(
    *schema.SUMMARY_GROUPS
)


def _validate_summary(summary: dict) -> None:
    wanted = set(_COST_KEYS | (_VERDICT_KEYS if "chip" in summary else frozenset()))
    for group in schema.SUMMARY_GROUPS:
        if not summary.keys().isdisjoint(group):
            wanted.update(group)
    lacking = sorted(wanted - set(summary))
    if lacking:
        said = ", ".join(lacking[:4]) + (f" and {len(lacking) - 4} more" if len(lacking) > 4 else "")
        raise ReportError(
            f"its summary lacks {said} (written by hand or by an older version: analyze or "
            "judge it again)"
        )
    profile = summary.get("chip_profile", chips.PROFILES[0])
    if profile not in chips.PROFILES:
        raise ReportError(f"summary chip_profile = {profile!r} is not one of {chips.PROFILES}")
    for key, value in summary.items():  # what judging it again reads among them: its topology,
        hint = _SUMMARY_TYPES.get(key)  # model_flops, memory figures, missing facts
        if hint is not None and not _holds(hint, value):
            raise ReportError(f"summary {key} = {value!r} is not of its type ({_type_name(hint)})")
    try:
        step.check_model_flops(summary.get("model_flops"))
    except ValueError as exc:
        raise ReportError(f"summary {exc}") from None
    _validate_memory(summary.get("memory"))
    for key in schema.SUMMARY_AMOUNTS + schema.SUMMARY_FRACTIONS:
        if key not in summary:
            continue
        value = summary[key]
        if not _finite(value) or value < 0:
            raise ReportError(f"summary {key} = {value!r} is not a number no smaller than 0")
        if key in schema.SUMMARY_FRACTIONS and key != "mfu_upper_bound" and value > 1 + 1e-9:
            raise ReportError(f"summary {key} = {value!r} is more than the whole")
    fit = summary.get("memory_fit")
    if fit is not None:
        if not isinstance(fit, dict) or memory.verdict_of(fit) not in schema.FIT_VERDICTS:
            raise ReportError(f"summary memory_fit = {fit!r} is not a fit verdict")
        for key in ("need_bytes", "capacity_bytes", "used_fraction"):
            value = fit.get(key)
            if not _finite(value) or value < 0:
                raise ReportError(f"summary memory_fit.{key} = {value!r} is not a number >= 0")
    for key in ("unknown_ops", "notes"):
        if key in summary and not isinstance(summary[key], list):
            raise ReportError(f"summary {key} = {summary[key]!r} is not a list")


def _type_name(hint) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def _validate_memory(figures) -> None:
    """The memory figures a fit is judged from again on another chip (``memory.judge``): every
    size a number no smaller than 0 or null, the need a number, whether it is complete a bool."""
    if figures is None:
        return
    if not isinstance(figures, dict):
        raise ReportError(f"summary memory = {figures!r} is not an object")
    if not figures:
        return
    for key, value in figures.items():
        if key.endswith("_bytes") and value is not None and not (_finite(value) and value >= 0):
            raise ReportError(f"summary memory.{key} = {value!r} is not a number >= 0")
    if not _finite(figures.get("need_bytes")):
        raise ReportError(
            f"summary memory.need_bytes = {figures.get('need_bytes')!r} is not a number"
        )
    largest = figures.get("largest", [])
    fields = set(memory.Buffer._fields)
    for buffer in largest if isinstance(largest, list) else [largest]:
        if (
            not isinstance(buffer, dict)
            or not set(buffer) <= fields
            or not {"name", "kind", "bytes"} <= set(buffer)
            or not (_finite(buffer["bytes"]) and buffer["bytes"] >= 0)
        ):
            raise ReportError(f"summary memory.largest holds {buffer!r}, not a buffer")
    if not isinstance(figures.get("complete"), bool):
        raise ReportError(
            f"summary memory.complete = {figures.get('complete')!r} is not true or false"
        )
    for key in ("largest", "slices"):
        if key in figures and not isinstance(figures[key], list):
            raise ReportError(f"summary memory.{key} = {figures[key]!r} is not a list")


def _stack_texts(stacks: list[str], indexes: pd.Series) -> list[str] | np.ndarray:
    """Each op's call stack from its index into ``stacks``: at once where the column is all
    integers in range, else one by one (saying which cell is not an index)."""
    codes = indexes.to_numpy()
    if codes.dtype.kind in "iu" and (
        not len(codes) or (codes.min() >= 0 and codes.max() < len(stacks))
    ):
        return np.array(stacks, dtype=object)[codes] if stacks else np.array([], dtype=object)
    return [_stack_text(stacks, i) for i in indexes]


def _stack_text(stacks: list[str], index) -> str:
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(stacks):
        raise ReportError(f"a call_stack of {index!r} is not an index into 'call_stacks'")
    return stacks[index]


def _summary(data: dict) -> dict:
    summary = data.get("summary", {})
    if not isinstance(summary, dict) or not isinstance(data.get("module", ""), str):
        raise ReportError("its 'summary' is not an object or its 'module' not a string")
    renamed = {
        schema.RENAMED.get(k, k): v
        for k, v in summary.items()
        if schema.RENAMED.get(k, k) == k or schema.RENAMED[k] not in summary
    }
    return renamed


# -- the model internals: a side table, stored as each column's own values ----------------------


def internal_array(name: str, values) -> object:
    """An internal column as :attr:`Report.internals` keeps it: sparse (its default left out)
    where most ops hold the default, else whole (text as pandas' string type)."""
    text = schema.BY_NAME[name].dtype == "text"
    return compact(values, schema.internal_default(name), text)


def _own(name: str, values: np.ndarray) -> np.ndarray:
    """Where an internal column holds a value of its own (not its default)."""
    default = schema.internal_default(name)
    if isinstance(default, float) and math.isnan(default):
        return ~np.isnan(values.astype(float))
    return np.asarray(values != default, dtype=bool)


def _internal_frame(arrays: dict, index: pd.Index) -> pd.DataFrame:
    """The side table of internal columns, in the schema's order, rows as ``index``."""
    ordered = {name: arrays[name] for name in schema.ordered(arrays)}
    frame = frame_of_arrays(ordered, index)
    return frame if frame is not None else pd.DataFrame(ordered, index=index, copy=False)


def _dense(name: str, column: pd.Series, index: pd.Index) -> object:
    """An internal column whole, for the rows ``index`` (its default where it has none: a
    measured report's container rows)."""
    values = column.array
    dense = values.to_numpy() if isinstance(values, pd.arrays.SparseArray) else column.to_numpy()
    if not column.index.equals(index):
        filled = pd.Series(dense, index=column.index)
        dense = filled.reindex(index, fill_value=schema.internal_default(name)).to_numpy()
    if schema.BY_NAME[name].dtype == "text":
        return as_text(np.asarray(dense, dtype=object))
    return dense


def _model_frame(ops: pd.DataFrame, internals: pd.DataFrame) -> pd.DataFrame:
    stored = stored_arrays(internals) if internals.index.equals(ops.index) else None
    if stored is None:  # rows of their own (a measured report's container rows): aligned
        dense = {name: _dense(name, internals[name], ops.index) for name in internals.columns}
    else:  # the same rows: each array as it is, a sparse one made whole
        dense = {name: _whole(name, values) for name, values in stored.items()}
    return joined(ops, dense, schema.ordered([*ops.columns, *dense]))


def _model_frame_of(columns: dict) -> pd.DataFrame | None:
    """:func:`_model_frame` of the report :meth:`Report.from_columns` makes of ``columns``, built
    from them at once; None where they hold no internal column or a column pandas must infer."""
    if not any(name in _INTERNAL for name in columns):
        return None
    arrays = {
        name: _whole(name, internal_array(name, values)) if name in _INTERNAL else as_text(values)
        for name, values in columns.items()
    }
    return frame_of_arrays({name: arrays[name] for name in schema.ordered(arrays)})


def _whole(name: str, values):
    if not isinstance(values, pd.arrays.SparseArray):
        return values
    if schema.BY_NAME[name].dtype == "text":
        return as_text(np.asarray(values, dtype=object))
    return values.to_numpy()


def internals_payload(internals: pd.DataFrame, index: pd.Index) -> dict[str, list]:
    """The internals of the ops ``index`` as a file holds them: per column, ``[row, value]`` of
    each op with a value of its own (row: its place among the ops), so a column most ops leave
    at its default takes a few bytes."""
    payload = {}
    for name in internals.columns:
        values = np.asarray(_dense(name, internals[name], index), dtype=object)
        if schema.BY_NAME[name].dtype != "text":
            values = values.astype(np.int64 if schema.BY_NAME[name].dtype == "int" else float)
        rows = np.flatnonzero(_own(name, values))
        payload[name] = [
            list(cell) for cell in zip(rows.tolist(), values[rows].tolist(), strict=True)
        ]
    return payload


def _internals_of(data: dict, ops: pd.DataFrame) -> pd.DataFrame | None:
    """The internals a report file carries (:func:`internals_payload`), each value held to its
    column's type (a row among the ops, a number no smaller than 0, text); None where it has
    none (a report written before them, its internals among its columns if any)."""
    given = data.get("internals")
    if given is None:
        return None
    if not isinstance(given, dict):
        raise ReportError("its 'internals' is not an object")
    arrays = {}
    for name, cells in given.items():
        if name not in _INTERNAL:
            raise ReportError(f"its internals have {name!r}, which is no model internal")
        if name in ops.columns:  # which of the two a judge read would be the reader's guess
            raise ReportError(f"its internal {name!r} is given twice: among its columns and apart")
        if not isinstance(cells, list) or not all(
            isinstance(c, list) and len(c) == 2 and type(c[0]) is int and 0 <= c[0] < len(ops)
            for c in cells
        ):
            raise ReportError(f"its internal {name!r} is not a list of [row, value] of its rows")
        rows = [row for row, _ in cells]
        if len(set(rows)) != len(rows):
            raise ReportError(f"its internal {name!r} gives a row more than one value")
        arrays[name] = internal_array(name, _internal_values(name, cells, len(ops)))
    return _internal_frame(arrays, ops.index)


def _internal_values(name: str, cells: list, rows: int) -> np.ndarray:
    column = schema.BY_NAME[name]
    default = schema.internal_default(name)
    if column.dtype == "text":
        values = np.full(rows, default, dtype=object)
        for row, value in cells:
            if not isinstance(value, str):
                raise ReportError(f"row {row}: {name} = {value!r} is not text")
            values[row] = value
        return values
    kind = np.int64 if column.dtype == "int" else float
    values = np.full(rows, default, dtype=kind)
    for row, value in cells:
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or value < 0:
            raise ReportError(f"row {row}: {name} = {value!r} is not a number no smaller than 0")
        if kind is np.int64 and not _whole_numbers([value])[0]:
            raise ReportError(f"row {row}: {name} = {value!r} is not a whole number")
        values[row] = value
    return values
