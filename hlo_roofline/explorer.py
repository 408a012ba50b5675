"""The sharding explorer: compile every layout of a training step for a target and rank them.

"Which layout should I train on?" is the question of the training chapter of *How to Scale Your
Model*. Its closed forms (DP/FSDP are compute-bound while the per-chip batch B/X exceeds C/W_ici;
tensor parallelism turns communication-bound past Y > n_axes·F/(C/W_ici); ...) hold for an
idealised MLP; its GPU chapter restates them for NVLink nodes and the network between them (W_GPU
in a node, W_node across). :func:`explore` asks the compiler instead: every factorization of the target's
devices over the named mesh axes (that the topology accepts), crossed with the user's knobs, is
compiled compile-only (in worker processes, through the on-disk HLO cache) and judged; each row
then says where it stands and what the book's rule predicts for it.

``make_step(mesh, **knobs)`` returns ``(fn, args, jit_kwargs)`` (the convention of
:mod:`hlo_roofline.examples`, with the mesh handed in). Workers import it by module path, by file
path, or receive it pickled by value with cloudpickle (closures, ``__main__``).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import importlib
import importlib.util
import itertools
import math
import multiprocessing
import os
import pickle
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import pandas as pd

from hlo_roofline import memory
from hlo_roofline._atomic import write_atomic
from hlo_roofline.text import one_line

__all__ = [
    "BookConstants",
    "Constraints",
    "Exploration",
    "book_constants",
    "candidates",
    "explore",
    "factorizations",
]

# A candidate's status: a code (a table cell a script compares), worded by status_text for faces.
STATUS_OK, STATUS_NO_FIT, STATUS_ERROR = "ok", "does_not_fit", "compile_error"
STATUS_TEXT = {STATUS_OK: "ok", STATUS_NO_FIT: "does not fit", STATUS_ERROR: "compile error"}
_OLD_STATUSES = {text: code for code, text in STATUS_TEXT.items()}  # tables written before codes


def status_text(code: str) -> str:
    """A status in words (``does_not_fit`` → ``does not fit``); an unknown one as it is."""
    return STATUS_TEXT.get(code, code) if isinstance(code, str) else ""


def status_of(value) -> str:
    """The status code of a table cell: a code as it is, a status in words (a table written
    before the codes) as its code."""
    return _OLD_STATUSES.get(value, value) if isinstance(value, str) else value
BATCH_AXES = ("data", "fsdp")  # axes that split the batch (the book's X)
MODEL_AXES = ("tensor", "model")  # axes that split the model's hidden dimension (the book's Y)


# -- the book's constants from the chip database -------------------------------------------------


@dataclass(frozen=True)
class BookConstants:
    """C (bf16 FLOP/s per chip), W_ici (bidirectional bytes/s of one link axis; on a GPU the
    NVLink one-way egress, the book's W_GPU) and their ratio, the book's "ICI operational
    intensity" (≈ 2,550 on TPU v5p, ≈ 2,200 on H100); on a GPU also W_node, a node's scale-out
    egress, for what crosses nodes (C/W_node ≈ 2,475 on H100)."""

    chip: str
    C: float
    W_ici: float | None
    W_node: float | None = None

    @property
    def ratio(self) -> float | None:
        return self.C / self.W_ici if self.W_ici else None

    @property
    def node_ratio(self) -> float | None:
        return self.C / self.W_node if self.W_node else None

    @property
    def gpu(self) -> bool:
        """Whether the book's GPU chapter applies (NVLink domains and nodes, not a torus)."""
        return self.W_node is not None


def book_constants(chip) -> BookConstants:
    """``C = chip.peak_flops("bf16")``, ``W_ici = chip.ici.link_bidirectional`` (the book's
    W_ici, per link and so per torus axis); GPUs: the NVLink one-way egress (the book's W_GPU)."""
    from hlo_roofline import chips

    chip = chips.get(chip) if isinstance(chip, str) else chip
    per_device = chip.per_device()
    w, w_node = None, None
    if chip.ici is not None and chip.ici.link_bidirectional:
        w = chip.ici.link_bidirectional
    elif chip.scaleup is not None and chip.scaleup.oneway:
        w, w_node = chip.scaleup.oneway, chip.scaleout_per_node
    return BookConstants(chip.key, per_device.peak_flops("bf16"), w, w_node)


# -- candidates ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Constraints:
    """Which layouts to try.

    ``divides``: axis → dimension(s) its size must divide (heads, batch, hidden size);
    ``fixed``: axis → its only size; ``maximum``: axis → its largest size; ``limit``: at most this
    many candidates (the ones listed first: axis sizes in increasing order of the last axis).
    """

    divides: Mapping[str, int | Sequence[int]] = field(default_factory=dict)
    fixed: Mapping[str, int] = field(default_factory=dict)
    maximum: Mapping[str, int] = field(default_factory=dict)
    limit: int | None = None

    @classmethod
    def of(cls, value: Constraints | Mapping | None) -> Constraints:
        if value is None:
            return cls()
        if isinstance(value, Constraints):
            return value
        unknown = set(value) - {"divides", "fixed", "maximum", "limit"}
        if unknown:
            raise ValueError(
                f"unknown constraints {sorted(unknown)}; known: divides, fixed, maximum, limit"
            )
        return cls(**value)

    def allows(self, sizes: Mapping[str, int]) -> str | None:
        """None if ``sizes`` passes, else why not."""
        for axis, size in sizes.items():
            if axis in self.fixed and size != self.fixed[axis]:
                return f"{axis} must be {self.fixed[axis]}"
            if axis in self.maximum and size > self.maximum[axis]:
                return f"{axis} {size} > maximum {self.maximum[axis]}"
            dims = self.divides.get(axis, ())
            for dim in [dims] if isinstance(dims, int) else dims:
                if dim % size:
                    return f"{axis} {size} does not divide {dim}"
        return None


def factorizations(n: int, k: int) -> list[tuple[int, ...]]:
    """Every ordered k-tuple of positive integers whose product is n."""
    if k == 0:
        return [()] if n == 1 else []
    out = []
    for first in range(1, n + 1):
        if n % first == 0:
            out += [(first, *rest) for rest in factorizations(n // first, k - 1)]
    return out


@dataclass(frozen=True)
class Candidate:
    """One layout to compile: mesh axis sizes and knob values."""

    sizes: tuple[tuple[str, int], ...]
    knobs: tuple[tuple[str, Any], ...]
    n_axes: tuple[tuple[str, int], ...] = ()  # torus axes each mesh axis spans (TPU)
    nodes: tuple[tuple[str, int], ...] = ()  # nodes (NVLink domains) each mesh axis spans (GPU)

    @property
    def label(self) -> str:
        parts = [f"{a}{s}" for a, s in self.sizes] + [f"{k}={v}" for k, v in self.knobs]
        return "_".join(parts)


def candidates(
    target: str,
    axes: Sequence[str],
    knobs: Mapping[str, Iterable] | None = None,
    constraints: Constraints | Mapping | None = None,
) -> tuple[list[Candidate], list[tuple[dict, str]]]:
    """(candidates, pruned): every factorization of the target's devices over ``axes`` that the
    constraints allow and the topology maps onto (``targets.make_mesh`` accepts), crossed with
    the knobs; the pruned ones with the reason."""
    from hlo_roofline import targets

    rules = Constraints.of(constraints)
    n = len(targets.devices(target))
    knob_names = list(knobs or {})
    knob_values = list(itertools.product(*[list(v) for v in (knobs or {}).values()]))
    kept, pruned = [], []
    for shape in factorizations(n, len(axes)):
        sizes = dict(zip(axes, shape, strict=True))
        reason = rules.allows(sizes)
        if reason is None:
            try:
                mesh = targets.make_mesh(target, shape, tuple(axes))
            except Exception as exc:  # the topology cannot hold this mesh
                first = one_line(exc).split(". ")[0]  # libtpu's message goes on with advice
                reason = f"does not map onto {target}: {first}"
        if reason is not None:
            pruned.append((sizes, reason))
            continue
        gpu = targets.parse_target(target).platform == "cuda"
        spans = () if gpu else tuple((a, _torus_axes(mesh, i)) for i, a in enumerate(axes))
        nodes = tuple((a, _nodes(mesh, i)) for i, a in enumerate(axes)) if gpu else ()
        for values in knob_values:
            kept.append(
                Candidate(
                    tuple(sizes.items()),
                    tuple(zip(knob_names, values, strict=True)),
                    spans,
                    nodes,
                )
            )
    if rules.limit is not None and len(kept) > rules.limit:
        pruned += [(dict(c.sizes), f"over the limit of {rules.limit}") for c in kept[rules.limit :]]
        kept = kept[: rules.limit]
    return kept, pruned


def _torus_axes(mesh, index: int) -> int:
    """How many torus dimensions the devices along mesh axis ``index`` span (the book's
    n_axes: a collective over them gets that many links' bandwidth)."""
    coords = [getattr(d, "coords", None) for d in _line(mesh, index)]
    if len(coords) < 2 or any(c is None for c in coords):
        return 1 if len(coords) >= 2 else 0
    return sum(len({c[k] for c in coords}) > 1 for k in range(len(coords[0])))


def _line(mesh, index: int) -> list:
    """The devices along mesh axis ``index`` (the other axes at 0)."""
    devices = mesh.devices
    return list(devices[tuple(slice(None) if i == index else 0 for i in range(devices.ndim))].flat)


def _nodes(mesh, index: int) -> int:
    """How many nodes (hosts: one NVLink domain each) the devices along mesh axis ``index``
    reach: the book's GPU rules take W_GPU inside one, W_node across."""
    return len({int(getattr(d, "process_index", 0)) for d in _line(mesh, index)})


# -- passing make_step to workers ----------------------------------------------------------------


def _reference(make_step) -> tuple:
    """How a worker finds ``make_step``: ("module", name, qualname), ("file", path, qualname) or
    ("pickle", bytes) for what neither reaches (closures, lambdas, ``__main__``)."""
    if isinstance(make_step, str):
        where, sep, name = make_step.rpartition(":")
        if not sep:
            raise ValueError(f"{make_step!r} is not FILE.py:NAME or package.module:NAME")
        if where.endswith(".py"):
            return ("file", str(Path(where).resolve()), name)
        return ("module", where, name)
    qualname = getattr(make_step, "__qualname__", "")
    module = sys.modules.get(getattr(make_step, "__module__", None) or "")
    if "<" not in qualname and module is not None and module.__name__ != "__main__":
        file = getattr(module, "__file__", None)
        if _importable(module.__name__):
            return ("module", module.__name__, qualname)
        if file:
            return ("file", str(Path(file).resolve()), qualname)
    try:
        import cloudpickle
    except ImportError:
        raise ValueError(
            f"{qualname or make_step!r} cannot be imported by a worker (a closure, a lambda or "
            "in __main__) and cloudpickle is not installed: define it at module level in a file"
        ) from None
    return ("pickle", cloudpickle.dumps(make_step))


def _importable(name: str) -> bool:
    """Whether another process can import ``name``: its top-level package is found by the import
    system itself (not merely present in ``sys.modules``, as a module loaded from a file path is)."""
    top = name.partition(".")[0]
    if top in sys.builtin_module_names:
        return True
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        with contextlib.suppress(Exception):
            if find(top, None) is not None:
                return True
    return False


_files: dict[str, Any] = {}


def _resolve(reference: tuple) -> Callable:
    kind = reference[0]
    if kind == "pickle":
        return pickle.loads(reference[1])
    if kind == "module":
        value: Any = importlib.import_module(reference[1])
    else:
        path = reference[1]
        module = _files.get(path)
        if module is None:
            name = "_hlo_roofline_explore_" + re.sub(r"\W", "_", path)
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot import {path}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            sys.path.insert(0, str(Path(path).parent))
            try:
                spec.loader.exec_module(module)
            finally:
                sys.path.remove(str(Path(path).parent))
            _files[path] = module
        value = module
    for part in reference[2].split("."):
        value = getattr(value, part)
    return value


# -- one candidate, in a worker ------------------------------------------------------------------


def _evaluate(job: dict) -> dict:
    """Compile and judge one candidate; never raises (an error is the row's status)."""
    start = time.perf_counter()
    try:
        from hlo_roofline import api, targets

        make_step = _resolve(job["reference"])
        sizes = dict(job["sizes"])
        mesh = targets.make_mesh(job["target"], tuple(sizes.values()), tuple(sizes))
        returned = make_step(mesh, **dict(job["knobs"]))
        fn, args, *rest = returned
        jit_kwargs = dict(rest[0]) if rest else {}
        report = api.analyze(
            fn,
            *args,
            target=job["target"],
            cache=job["cache"],
            model_flops=job.get("model_flops"),
            jit_kwargs=jit_kwargs,
        )
    except Exception as exc:
        return {
            "status": STATUS_ERROR,
            "error": f"{type(exc).__name__}: {one_line(exc)}",
            "compile_s": time.perf_counter() - start,
            "report": None,
        }
    return {
        "status": STATUS_OK,
        "error": "",
        "compile_s": time.perf_counter() - start,
        "report": report.to_dict(),
    }


# -- the result ----------------------------------------------------------------------------------


@dataclass
class Exploration:
    """The candidates as a ranked DataFrame (``table``), each one's :class:`Report`
    (``reports[label]``, None where it did not compile), what was pruned, and the book's constants.
    """

    table: pd.DataFrame
    reports: dict[str, Any]
    pruned: list[tuple[dict, str]]
    constants: BookConstants
    target: str
    axes: tuple[str, ...]

    def best(self) -> pd.Series:
        """The first-ranked candidate's row."""
        ok = self.table[self.table["rank"].notna()]
        if ok.empty:
            raise ValueError("no candidate compiled and fits")
        return ok.sort_values("rank").iloc[0]

    def write_tensorboard(self, logdir: str | os.PathLike) -> list[Path]:
        """Every candidate's report into ``logdir``, one run per candidate label, and the ranked
        table beside them (``logdir.EXPLORE_JSON``, :meth:`document`): what the tab's
        exploration view reads."""
        from hlo_roofline._atomic import write_atomic
        from hlo_roofline.logdir import EXPLORE_JSON

        written = [r.write_tensorboard(logdir, label) for label, r in self.reports.items() if r]
        path = Path(logdir) / EXPLORE_JSON
        write_atomic(path, self.to_json(), mode=0o644)
        return [*written, path]

    def document(self) -> dict:
        """The exploration as one JSON-ready document (``FORMAT``, version ``VERSION``):

        ``target``, ``chip``, ``axes``, ``knobs`` (names), ``rank_by`` (the column ranked on),
        ``constants`` (``C``, ``W``, ``ratio``: the book's C, W_ici or W_GPU, C/W),
        ``hbm_capacity`` (bytes per device: the line a step-vs-HBM plot draws), ``rows`` (the
        table's rows, NaN as null, each with ``run``: its report's run in the logdir, null where
        it did not compile) and ``pruned`` (``sizes`` and ``why``).
        """

        from hlo_roofline import chips

        chip = chips.get(self.constants.chip)
        rows = [{k: _plain(v) for k, v in r.items()} for r in self.table.to_dict("records")]
        for r in rows:
            r["run"] = r["candidate"] if self.reports.get(r["candidate"]) is not None else None
        knob_names = [c for c in self.table.columns if c not in ROW_COLUMNS
                      and c not in self.axes and not c.startswith(SPAN_PREFIXES)]  # fmt: skip
        return {
            "format": FORMAT,
            "version": VERSION,
            "target": self.target,
            "chip": self.constants.chip,
            "axes": list(self.axes),
            "knobs": knob_names,
            "rank_by": rank_by(self.table) if len(self.table) else None,
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


def _plain(value):
    """A table cell as JSON holds it, every digit kept: None for NaN and NA, numpy scalars as
    Python's."""
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return None
    return value.item() if hasattr(value, "item") else value


FORMAT, VERSION = "hlo_roofline.exploration", 1
SPAN_PREFIXES = ("n_axes_", "nodes_")  # per-axis span columns: torus axes (TPU), nodes (GPU)
# The row's own columns (the rest are axis sizes, n_axes_<axis> and knobs).
ROW_COLUMNS = frozenset({
    "candidate", "status", "error", "compile_s", "step_s", "lower_s", "upper_s", "compute_s",
    "memory_s", "comm_s", "exposed_comm_s", "exposed_comm_share", "mfu_upper_bound", "mfu_model",
    "tokens_per_s_per_chip", "hbm_per_device", "fit", "bound", "why", "rank", "gap_to_best",
})  # fmt: skip


class ExplorationError(ValueError):
    """A file that is not an exploration the gate can read (:func:`read_table`)."""


def read_table(path: str | os.PathLike) -> pd.DataFrame:
    """The ranked table of an exploration written by :meth:`Exploration.to_json` (or
    ``explore --json``), :meth:`Exploration.to_csv` (``--csv``) or ``write_tensorboard`` (the
    logdir itself, or its ``logdir.EXPLORE_JSON``). Anything else is an :class:`ExplorationError`
    saying what is wrong."""
    import json

    from hlo_roofline.logdir import EXPLORE_JSON

    path = Path(path)
    if path.is_dir():
        path = path / EXPLORE_JSON
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


def row(candidate: Candidate, result: dict, report, constants: BookConstants, **given) -> dict:
    """One candidate's row: axis sizes, knobs, the report summary's times and MFU, the fit, and
    why (see ``why``). Nothing here re-derives what the summary holds."""
    sizes, knobs = dict(candidate.sizes), dict(candidate.knobs)
    out: dict[str, Any] = {"candidate": candidate.label, **sizes, **knobs}
    out.update({f"n_axes_{axis}": n for axis, n in candidate.n_axes})
    out.update({f"nodes_{axis}": n for axis, n in candidate.nodes})
    tokens = _given(given.get("tokens_per_step"), knobs)
    hidden = _given(given.get("hidden"), knobs)
    devices = math.prod(sizes.values())
    out.update(
        status=result["status"],
        error=result["error"],
        compile_s=result["compile_s"],
    )
    if report is None:
        out["why"] = f"compile error: {result['error']}"
        return out
    s = report.summary
    ops = report.ops
    step = s.get("step_expected_s")
    compute = float(ops["t_compute_s"].sum()) if "t_compute_s" in ops else math.nan
    memory_t = float(ops["t_memory_s"].sum()) if "t_memory_s" in ops else math.nan
    comm = s.get("comm_time_s", math.nan)
    fit = s.get("memory_fit") or {}
    mem = s.get("memory") or {}
    out.update(
        step_s=step,
        lower_s=s.get("step_bound_s", s.get("step_time_min_s")),  # the bound: no run is faster
        upper_s=s.get("step_time_upper_s"),
        compute_s=compute,
        memory_s=memory_t,
        comm_s=comm,
        exposed_comm_s=s.get("exposed_comm_s"),
        exposed_comm_share=s.get("exposed_comm_share"),
        mfu_upper_bound=_number(s.get("mfu_upper_bound")),
        mfu_model=_number(s.get("mfu_model")),
        tokens_per_s_per_chip=(tokens / step / devices) if tokens and step else math.nan,
        hbm_per_device=fit.get("need_bytes", mem.get("need_bytes")),
        fit=memory.verdict_of(fit),
        bound=_bound(compute, memory_t, comm) if len(ops) else "unknown",
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


def _per_device(model_flops: float | None, candidate: Candidate) -> float | None:
    """The step's model FLOPs (all devices) as :func:`hlo_roofline.analyze` takes them: per
    device, so the summary's ``mfu_model`` is the row's."""
    if model_flops is None:
        return None
    return float(model_flops) / math.prod(s for _, s in candidate.sizes)


def _bound(compute: float, memory: float, comm: float) -> str:
    """What the compiled step is bound by: its largest total time."""
    times = {"compute": compute, "memory": memory, "communication": comm}
    times = {k: v for k, v in times.items() if v == v}
    return max(times, key=times.get) if times else "unknown"


def why(out: dict, candidate: Candidate, k: BookConstants, tokens, hidden) -> str:
    """Where this candidate stands, in the book's terms: the compiled step's bound and exposed
    communication, then each of the book's rules that applies, with its threshold.

    TPU rules, from the training chapter (R = C/W_ici; X = product of the batch axes, Y = the
    model axis, N = X·Y, n_axes = torus axes a mesh axis spans): DP/FSDP compute-bound iff
    B/X > R/n_axes(X) (T1); TP communication-bound iff Y > n_axes(Y)·F/R (T2); FSDP×TP
    compute-bound iff B/N > 2·R²/F (T3). GPU rules, from the GPU chapter (W = W_GPU while the axes
    stay in one node, W_node once they cross): DP/FSDP compute-bound iff B/X > C/W (G1); TP
    communication-bound iff Y > F·W/C (G2).
    """
    sizes = dict(candidate.sizes)
    parts = []
    if out["status"] == STATUS_NO_FIT:
        parts.append(
            f"does not fit: {out['hbm_per_device'] / 1e9:.3g} GB per device"
            if out.get("hbm_per_device")
            else "does not fit"
        )
    share = out.get("exposed_comm_share") or 0.0
    if out["bound"] == "unknown":  # the compiler refused it: no optimized program to judge
        parts.append("compiled: refused by the compiler, no program to time")
    else:
        parts.append(
            f"compiled: {out['bound']}-bound, {share:.0%} of the step exposed communication"
        )
    if k.ratio is None:
        return "; ".join(parts)
    x_axes = [a for a in BATCH_AXES if sizes.get(a, 1) > 1]
    y_axes = [a for a in MODEL_AXES if sizes.get(a, 1) > 1]
    x = math.prod(sizes.get(a, 1) for a in BATCH_AXES)
    y = math.prod(sizes.get(a, 1) for a in MODEL_AXES)
    rules = _gpu_rules if k.gpu else _tpu_rules
    parts += rules(candidate, k, tokens, hidden, x_axes, y_axes, x, y)
    return "; ".join(parts)


def _tpu_rules(candidate, k, tokens, hidden, x_axes, y_axes, x, y) -> list[str]:
    """The training chapter's T1–T3 on a torus."""
    spans, r, parts = dict(candidate.n_axes), k.ratio, []
    if tokens and x_axes:
        n = max(1, sum(spans.get(a, 1) for a in x_axes))
        per_chip = tokens / x
        threshold = r / n
        side = "compute" if per_chip > threshold else "communication"
        parts.append(
            f"book T1: B/X = {per_chip:,.0f} tokens {'>' if side == 'compute' else '≤'} "
            f"C/(W_ici·{n}) = {threshold:,.0f} ⇒ {side}-bound over {'×'.join(x_axes)}"
        )
    if hidden and y_axes:
        n = max(1, sum(spans.get(a, 1) for a in y_axes))
        threshold = n * hidden / r
        side = "communication" if y > threshold else "compute"
        parts.append(
            f"book T2: {'×'.join(y_axes)} axis {y} {'>' if y > threshold else '≤'} "
            f"n_axes·F/(C/W_ici) = {n}·{hidden}/{r:,.0f} = {threshold:.3g} ⇒ {side}-bound on "
            "the model axis"
        )
    if hidden and tokens and x_axes and y_axes:
        per_chip = tokens / (x * y)
        threshold = 2 * r * r / hidden
        side = "compute" if per_chip > threshold else "communication"
        parts.append(
            f"book T3: B/N = {per_chip:,.0f} {'>' if side == 'compute' else '≤'} "
            f"2·(C/W_ici)²/F = {threshold:,.0f} ⇒ {side}-bound (FSDP×TP)"
        )
    return parts


def _gpu_rules(candidate, k, tokens, hidden, x_axes, y_axes, x, y) -> list[str]:
    """The GPU chapter's G1 (DP/FSDP) and G2 (TP): W_GPU inside a node, W_node across nodes."""
    nodes, parts = dict(candidate.nodes), []

    def over(axes: list[str]) -> tuple[float, str]:
        crosses = math.prod(nodes.get(a, 1) for a in axes) > 1 and k.node_ratio is not None
        return (k.node_ratio, "C/W_node") if crosses else (k.ratio, "C/W_GPU")

    if tokens and x_axes:
        per_chip = tokens / x
        threshold, name = over(x_axes)
        side = "compute" if per_chip > threshold else "communication"
        parts.append(
            f"book G1: B/X = {per_chip:,.0f} tokens {'>' if side == 'compute' else '≤'} "
            f"{name} = {threshold:,.0f} ⇒ {side}-bound over {'×'.join(x_axes)}"
        )
    if hidden and y_axes:
        ratio, name = over(y_axes)
        threshold = hidden / ratio
        side = "communication" if y > threshold else "compute"
        parts.append(
            f"book G2: {'×'.join(y_axes)} axis {y} {'>' if y > threshold else '≤'} "
            f"F/({name}) = {hidden}/{ratio:,.0f} = {threshold:.3g} ⇒ {side}-bound on the "
            "model axis"
        )
    return parts


def rank_by(table: pd.DataFrame) -> str:
    """What the ranking compares: ``tokens_per_s_per_chip`` when every candidate that compiled
    and fits has it (the user gave tokens per step; batch knobs then compare fairly), else
    ``step_s``."""
    ok = table["status"] == STATUS_OK if "status" in table else pd.Series(dtype=bool)
    tps = table.get("tokens_per_s_per_chip")
    if ok.any() and tps is not None and tps[ok].notna().all():
        return "tokens_per_s_per_chip"
    return "step_s"


def rank(table: pd.DataFrame) -> pd.DataFrame:
    """Rank the candidates that compiled and fit by :func:`rank_by` (most tokens/s per chip, else
    the shortest predicted step) and give each its ``gap_to_best``: how much longer it takes per
    token (or per step) than the first, as a fraction (0.25: 25% slower)."""
    table = table.copy()
    table["rank"] = pd.NA
    table["gap_to_best"] = math.nan
    ok = table["status"] == STATUS_OK
    if not ok.any():
        return table
    by = rank_by(table)
    if by == "tokens_per_s_per_chip":
        order = table[ok].sort_values(by, ascending=False, kind="stable")
        table.loc[ok, "gap_to_best"] = order[by].iloc[0] / table.loc[ok, by] - 1
    else:
        order = table[ok].sort_values(by, kind="stable")
        table.loc[ok, "gap_to_best"] = table.loc[ok, by] / order[by].iloc[0] - 1
    table.loc[order.index, "rank"] = range(1, len(order) + 1)
    table["rank"] = table["rank"].astype("Int64")
    sort_key = table["rank"].astype("Float64").fillna(math.inf)
    return table.assign(_k=sort_key).sort_values("_k", kind="stable").drop(columns="_k")


# -- running -------------------------------------------------------------------------------------


class Progress:
    """``[####......] 3/8 compiled, 12 s, ETA 20 s`` on one stderr line, rewritten in place."""

    def __init__(self, total: int, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.total, self.done, self.start = total, 0, time.monotonic()
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled and total > 0

    def step(self, label: str = "") -> None:
        self.done += 1
        if not self.enabled:
            return
        elapsed = time.monotonic() - self.start
        eta = elapsed / self.done * (self.total - self.done)
        filled = round(20 * self.done / self.total)
        line = (
            f"\r[{'#' * filled}{'.' * (20 - filled)}] {self.done}/{self.total} compiled, "
            f"{elapsed:.0f} s, ETA {eta:.0f} s {label[:40]:<40}"
        )
        self.stream.write(line)
        if self.done == self.total:
            self.stream.write("\n")
        self.stream.flush()


def _executor(executor, jobs: int | None):
    """(executor, owned): the user's, a Dask client's, or a spawn process pool we shut down."""
    if executor is not None:
        get = getattr(executor, "get_executor", None)  # a distributed.Client
        if get is not None and not isinstance(executor, concurrent.futures.Executor):
            return get(pure=False), False
        return executor, False
    workers = jobs or os.cpu_count() or 1
    # spawn, not fork: JAX in the parent holds threads a forked child would inherit half-alive.
    context = multiprocessing.get_context("spawn")
    return concurrent.futures.ProcessPoolExecutor(workers, mp_context=context), True


def explore(
    make_step,
    target: str,
    axes: Sequence[str] = ("data", "fsdp", "tensor"),
    knobs: Mapping[str, Iterable] | None = None,
    constraints: Constraints | Mapping | None = None,
    executor=None,
    jobs: int | None = None,
    cache: bool | str | os.PathLike = True,
    model_flops: float | Callable[..., float] | None = None,
    tokens_per_step: int | Callable[..., int] | None = None,
    hidden: int | Callable[..., int] | None = None,
    progress: bool = True,
    stream: TextIO | None = None,
) -> Exploration:
    """Compile ``make_step(mesh, **knob)`` for every candidate layout on ``target``; rank them.

    ``make_step`` (a function, ``"FILE.py:NAME"`` or ``"package.module:NAME"``) returns
    ``(fn, args, jit_kwargs)`` for a mesh of ``axes``. Candidates are compiled in ``jobs`` worker
    processes (default ``os.cpu_count()``) or on ``executor`` (any ``concurrent.futures``
    executor, or a ``distributed.Client``), each through the HLO cache (``cache``, as for
    :func:`hlo_roofline.analyze`), so a second run compiles nothing again. ``tokens_per_step``,
    ``model_flops`` (the model's FLOPs a step, all devices together: each candidate's report gets
    its share per device, and the row's ``mfu_model`` is the report's) and ``hidden`` (the MLP's
    F, for the book's TP rules) may be numbers or functions of the knobs. A candidate that fails
    to compile is a row with its error.
    """
    from hlo_roofline import chips, targets

    axes = tuple(axes)
    if len(set(axes)) != len(axes) or not axes:
        raise ValueError(f"axes must be distinct names, got {axes}")
    spec = targets.parse_target(target)
    constants = book_constants(chips.get(spec.chip))
    reference = _reference(make_step)
    found, pruned = candidates(spec.spec, axes, knobs, constraints)
    jobs_list = [
        {
            "reference": reference,
            "target": spec.spec,
            "sizes": c.sizes,
            "knobs": c.knobs,
            "cache": str(cache) if isinstance(cache, os.PathLike) else cache,
            "model_flops": _per_device(_given(model_flops, dict(c.knobs)), c),
        }
        for c in found
    ]
    results: dict[int, dict] = {}
    bar = Progress(len(found), stream, progress)
    if found:
        pool, owned = _executor(executor, jobs)
        try:
            futures = {pool.submit(_evaluate, job): i for i, job in enumerate(jobs_list)}
            for future in concurrent.futures.as_completed(futures):
                i = futures[future]
                try:
                    results[i] = future.result()
                except Exception as exc:  # the worker itself died
                    results[i] = {
                        "status": STATUS_ERROR,
                        "error": f"worker failed: {type(exc).__name__}: {one_line(exc)}",
                        "compile_s": math.nan,
                        "report": None,
                    }
                bar.step(found[i].label)
        finally:
            if owned:
                pool.shutdown(wait=True, cancel_futures=True)
    from hlo_roofline.report import Report

    rows, reports = [], {}
    for i, c in enumerate(found):
        result = results[i]
        report = Report.from_dict(result["report"]) if result["report"] else None
        reports[c.label] = report
        rows.append(
            row(
                c,
                result,
                report,
                constants,
                tokens_per_step=tokens_per_step,
                hidden=hidden,
            )
        )
    table = rank(pd.DataFrame(rows)) if rows else pd.DataFrame()
    return Exploration(table, reports, pruned, constants, spec.spec, axes)
