"""The result users hold: a per-op DataFrame, a summary dict, and ways to save, read and show them.

Every face of the tool (Python, CLI, TensorBoard) reads and writes reports through this class, so a
report written by one is read identically by the others (``Report.read`` round-trips both formats).
"""

from __future__ import annotations

import html
import io
import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from hlo_roofline import chips, memory
from hlo_roofline.logdir import PLUGIN_NAME, REPORT_CSV, REPORT_JSON

FORMAT = "hlo_roofline.report"
VERSION = 1
CSV_MAGIC = "#hlo_roofline.report "
_INT_COLUMNS = ("group_size", "mm_batch", "mm_m", "mm_n", "mm_k")
_TEXT_COLUMNS = (
    "name", "opcode", "computation", "fusion_kind", "dtype", "precision", "shape", "op_name",
    "source", "note", "fused_ops", "collective", "replica_group", "waits_for", "bound", "hint",
    "prefetch_for", "measurement_problem",
)  # fmt: skip
_TIME_COLUMNS = ("t_compute_s", "t_memory_s", "t_comm_s", "t_roofline_s", "t_exposed_s")


class ReportError(ValueError):
    """A report file that cannot be read (missing, truncated, corrupt, or not a report)."""


@dataclass
class Report:
    """Per-op costs of one compiled module.

    ``ops`` has one row per executed op with values per step (already × ``count``); after
    :meth:`classify` it also holds the roofline verdict of every op for one chip.
    """

    ops: pd.DataFrame
    summary: dict = field(default_factory=dict)
    module: str = ""

    @classmethod
    def from_columns(cls, columns: dict[str, list], summary: dict, module: str = "") -> Report:
        return cls(pd.DataFrame(columns), summary, module)

    # -- verdicts ---------------------------------------------------------------------------
    @property
    def chip(self) -> str | None:
        return self.summary.get("chip")

    def classify(self, chip, topology=None) -> Report:
        """The same ops judged against ``chip`` (a name, alias or :class:`~hlo_roofline.chips.Chip`).

        ``topology`` places the devices for the collective model: the mesh the program was
        sharded on (exact TPU coordinates, GPU hosts) or an
        :class:`~hlo_roofline.interconnect.Topology`; by default the one this report was judged
        with, else one inferred from the chip and the replica groups.
        """
        from hlo_roofline import verdict

        if topology is None:
            topology = self.summary.get("topology")
        ops, summary_update = verdict.classify(self.ops, chip, topology)
        if "measured_s" in ops:  # a measured report: efficiency is relative to the new roofline
            from hlo_roofline.measured import add_efficiency, problem_count

            ops = add_efficiency(ops, chip)
            summary_update["measured_problems"] = problem_count(ops)
        # the verdict always sets every one of its keys, so it replaces an earlier chip's wholesale
        fit = memory.judge(self.summary.get("memory"), chips.get(chip))
        return Report(ops, {**self.summary, **summary_update, **fit}, self.module)

    def top(self, n: int = 10, by: str | None = None) -> pd.DataFrame:
        """The ``n`` largest ops by ``by`` (default: predicted time, else bytes)."""
        by = by or ("t_roofline_s" if "t_roofline_s" in self.ops else "bytes_accessed")
        return self.ops.nlargest(n, by)

    def rollup(self, by: str = "source") -> pd.DataFrame:
        """Totals per Python line (``by="source"``) or per JAX name scope (``by="op_name"``)."""
        if by not in ("source", "op_name"):
            raise ValueError(f"rollup by 'source' or 'op_name', not {by!r}")
        sums = ["count", "flops", "transcendentals", "bytes_accessed", "comm_bytes"]
        sums += [c for c in (*_TIME_COLUMNS, "share", "measured_s") if c in self.ops]
        grouped = self.ops.groupby(self.ops[by].replace("", "(unattributed)"), sort=False)
        out = grouped[sums].sum()
        out.insert(0, "ops", grouped.size())
        if "t_roofline_s" in out:
            parts = out[["t_compute_s", "t_memory_s", "t_comm_s"]].to_numpy()
            out["bound"] = np.where(
                parts.max(axis=1) > 0,
                np.array(["compute", "memory", "communication"])[parts.argmax(axis=1)],
                "none",
            )
            out = out.sort_values("t_roofline_s", ascending=False)
        return out

    # -- saving and reading -----------------------------------------------------------------
    def to_dict(self) -> dict:
        """A JSON-safe dict: NaN and ±inf become null."""
        ops = self.ops.astype(object).where(self.ops.notna(), None)
        return {
            "format": FORMAT,
            "version": VERSION,
            "module": self.module,
            "summary": _json_safe(self.summary),
            "columns": list(self.ops.columns),
            "data": [[_json_safe(v) for v in row] for row in ops.itertuples(index=False)],
        }

    def to_json(self, path: str | os.PathLike | None = None) -> str:
        text = json.dumps(self.to_dict(), allow_nan=False)
        if path is not None:
            _write_atomic(Path(path), text)
        return text

    def to_csv(self, path: str | os.PathLike | None = None) -> str:
        """CSV of the ops, preceded by one comment line holding the module name and summary."""
        header = CSV_MAGIC + json.dumps(
            {"module": self.module, "summary": _json_safe(self.summary)}, allow_nan=False
        )
        text = header + "\n" + self.ops.to_csv(index=False)
        if path is not None:
            _write_atomic(Path(path), text)
        return text

    @classmethod
    def read(cls, path: str | os.PathLike) -> Report:
        """Read a report written by :meth:`to_json` or :meth:`to_csv` (or a TensorBoard run dir)."""
        path = Path(path)
        if path.is_dir():
            path = path / "plugins" / PLUGIN_NAME / REPORT_JSON
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ReportError(f"cannot read report {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise ReportError(f"{path} is not a readable hlo_roofline report (not UTF-8)") from None
        try:
            if text.startswith(CSV_MAGIC):
                return cls._from_csv(text)
            return cls.from_dict(json.loads(text))
        except ReportError as exc:
            raise ReportError(f"{path}: {exc}") from None
        except RecursionError:
            raise ReportError(
                f"{path} is not a readable hlo_roofline report (nested too deep)"
            ) from None
        except (ValueError, TypeError, KeyError, AttributeError, pd.errors.ParserError) as exc:
            raise ReportError(f"{path} is not a readable hlo_roofline report ({exc})") from None

    @classmethod
    def from_dict(cls, data: dict) -> Report:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ReportError("not an hlo_roofline report (no 'format' marker)")
        if data.get("version") != VERSION:
            raise ReportError(f"report version {data.get('version')} is not {VERSION}")
        ops = pd.DataFrame(data["data"], columns=data["columns"])
        return cls(_restore_types(ops), _summary(data), data.get("module", ""))

    @classmethod
    def _from_csv(cls, text: str) -> Report:
        header, _, body = text.partition("\n")
        meta = json.loads(header[len(CSV_MAGIC) :])
        ops = pd.read_csv(io.StringIO(body), keep_default_na=False, na_values=[""])
        return cls(_restore_types(ops), _summary(meta), meta.get("module", ""))

    def write_tensorboard(self, logdir: str | os.PathLike, run: str = ".") -> Path:
        """Write ``<logdir>/<run>/plugins/hlo_roofline/report.{json,csv}`` (each file atomically).

        ``run`` must stay inside ``logdir`` (ValueError otherwise). The files are 0644: a
        TensorBoard running as another user must be able to read them.
        """
        root = Path(logdir).resolve()
        inside = (root / run).resolve()
        if inside != root and root not in inside.parents:
            raise ValueError(f"run {run!r} is outside the logdir {str(logdir)!r}")
        directory = Path(logdir) / run / "plugins" / PLUGIN_NAME
        directory.mkdir(parents=True, exist_ok=True)
        _write_atomic(directory / REPORT_CSV, self.to_csv(), mode=0o644)
        _write_atomic(directory / REPORT_JSON, self.to_json(), mode=0o644)
        return directory

    # -- showing ----------------------------------------------------------------------------
    def __repr__(self) -> str:
        s = self.summary
        text = (
            f"<Report {self.module}: {len(self.ops)} ops, {s.get('flops', 0):.4g} FLOPs, "
            f"{s.get('bytes_accessed', 0):.4g} bytes, coverage {s.get('coverage', 1):.1%}"
        )
        if self.chip:
            text += f", {self.chip}: step ≥ {s['step_time_lower_s'] * 1e3:.4g} ms"
        return text + ">"

    def _repr_html_(self) -> str:
        columns = [
            c
            for c in ("name", "opcode", "bound", "t_roofline_s", "share", "flops",
                      "bytes_accessed", "intensity", "op_name", "hint")
            if c in self.ops
        ]  # fmt: skip
        table = self.top(20)[columns].to_html(
            index=False, escape=True, float_format="{:.4g}".format
        )
        return f"<p>{html.escape(repr(self))}</p>{table}"

    def plot(self, path: str | os.PathLike, title: str | None = None) -> Path:
        """A log-log roofline chart (PNG or SVG by extension) of a classified report."""
        from hlo_roofline.plot import roofline_chart

        return roofline_chart(self, Path(path), title)


def _json_safe(value):
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value


REQUIRED_COLUMNS = (
    "name", "opcode", "computation", "count", "flops", "transcendentals", "bytes_accessed",
    "comm_bytes",
)  # fmt: skip


def _restore_types(ops: pd.DataFrame) -> pd.DataFrame:
    missing = [c for c in REQUIRED_COLUMNS if c not in ops.columns]
    if missing:
        raise ReportError(f"not a report: missing columns {missing}")
    for column in ops.columns:
        if column in _TEXT_COLUMNS:
            ops[column] = ops[column].astype(object).fillna("").astype(str)
        elif column == "unknown":
            ops[column] = ops[column].map(lambda v: v in (True, "True", "true", 1)).astype(bool)
        elif column in _INT_COLUMNS:
            ops[column] = pd.to_numeric(ops[column]).fillna(0).astype(np.int64)
        else:
            ops[column] = pd.to_numeric(ops[column]).astype(float)
    return ops


def _write_atomic(path: Path, text: str, mode: int | None = None) -> None:
    """Write to a temporary file beside ``path`` and rename it over: readers never see half a file.

    ``mode``: permissions set before the rename (``mkstemp`` creates the file 0600).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _summary(data: dict) -> dict:
    summary = data.get("summary", {})
    if not isinstance(summary, dict) or not isinstance(data.get("module", ""), str):
        raise ReportError("its 'summary' is not an object or its 'module' not a string")
    return summary
