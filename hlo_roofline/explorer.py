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
:mod:`hlo_roofline.examples`, with the mesh handed in), or ``(fn, args, jit_kwargs, work)`` with
the step's tokens and model FLOPs, which the ranking counts throughput in. Workers import it by
module path, by file path, or receive it pickled by value with cloudpickle (closures,
``__main__``: a script needs no ``__main__`` guard, the workers never import it).

Only complete evidence ranks and gates: each row's status is an answer about its layout (ok, does
not fit, refused) or a failure (an error with its traceback, a worker that died twice, a time-out),
and an exploration with failures says so (:attr:`Exploration.complete`).
"""

from __future__ import annotations

import ast
import concurrent.futures
import contextlib
import importlib
import importlib.util
import inspect
import itertools
import math
import os
import pickle
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TextIO

import pandas as pd

from hlo_roofline import schema
from hlo_roofline._atomic import write_atomic
from hlo_roofline.judge import memory
from hlo_roofline.text import one_line

if TYPE_CHECKING:
    from hlo_roofline.targets import Target

__all__ = [
    "BookConstants",
    "Constraints",
    "Exploration",
    "KnobExpression",
    "Refused",
    "book_constants",
    "candidates",
    "explore",
    "factorizations",
    "rank",
    "read_table",
]

# A candidate's status: a code (a table cell a script compares), worded by status_text for faces.
# Results are answers about the layout; failures mean the exploration lacks an answer for it.
STATUS_OK, STATUS_NO_FIT, STATUS_REFUSED = schema.EXPLORE_ANSWERS
STATUS_ERROR, STATUS_CRASHED, STATUS_TIMED_OUT, STATUS_NOT_RUN = schema.EXPLORE_FAILURES
RESULTS = frozenset(schema.EXPLORE_ANSWERS)
FAILURES = frozenset(schema.EXPLORE_FAILURES)
STATUS_TEXT = {
    STATUS_OK: "ok", STATUS_NO_FIT: "does not fit", STATUS_REFUSED: "refused",
    STATUS_ERROR: "error", STATUS_CRASHED: "crashed", STATUS_TIMED_OUT: "timed out",
    STATUS_NOT_RUN: "not run",
}  # fmt: skip
# Tables written before the codes (the words), or before errors were told apart (compile_error).
_OLD_STATUSES = {
    **{text: code for code, text in STATUS_TEXT.items()},
    **schema.EXPLORE_FORMER_STATUSES,
}


def status_text(code: str) -> str:
    """A status in words (``does_not_fit`` → ``does not fit``); an unknown one as it is."""
    return STATUS_TEXT.get(code, code) if isinstance(code, str) else ""


def status_of(value) -> str:
    """The status code of a table cell: a code as it is, a status in words (a table written
    before the codes) as its code."""
    return _OLD_STATUSES.get(value, value) if isinstance(value, str) else value


class Refused(Exception):
    """Raised by ``make_step`` for a layout the model cannot take (heads that do not split over
    the tensor axis, say): the row is ``refused``, a result like "does not fit", not a failure."""


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

    def check(self, axes: tuple[str, ...], devices: int, target: str) -> None:
        """A ValueError for a constraint on an axis that is not one of ``axes`` (a misspelt axis
        would prune nothing), a size that is no positive integer, or a fixed size that does not
        divide the target's devices (no layout could pass)."""
        for kind in ("divides", "fixed", "maximum"):
            mapping = getattr(self, kind)
            if not isinstance(mapping, Mapping):
                raise ValueError(
                    f"constraints {kind} must map axis names to sizes, not {mapping!r}"
                )
            for axis, value in mapping.items():
                if axis not in axes:
                    raise ValueError(
                        f"constraints {kind} names the axis {axis!r}, not one of the axes "
                        f"{', '.join(axes)}" + _did_you_mean(str(axis), axes)
                    )
                values = [value] if not isinstance(value, Sequence) else list(value)
                if not values or any(
                    not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in values
                ):
                    raise ValueError(
                        f"constraints {kind} {axis}={value!r}: sizes are integers >= 1"
                    )
        for axis, size in self.fixed.items():
            if devices % size:
                raise ValueError(
                    f"fixed {axis}={size} does not divide the {devices} devices of {target}: "
                    "every layout's axis sizes multiply to the device count"
                )
        if self.limit is not None and (
            not isinstance(self.limit, int) or isinstance(self.limit, bool) or self.limit < 1
        ):
            raise ValueError(f"constraints limit must be an integer >= 1, not {self.limit!r}")

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
    target: str | Target,
    axes: Sequence[str],
    knobs: Mapping[str, Iterable] | None = None,
    constraints: Constraints | Mapping | None = None,
) -> tuple[list[Candidate], list[tuple[dict, str]]]:
    """(candidates, pruned): every factorization of the target's devices over ``axes`` that the
    constraints allow and the topology maps onto (``targets.make_mesh`` accepts), crossed with
    the knobs; the pruned ones with the reason."""
    from hlo_roofline import targets

    target = targets.parse_target(target)
    rules = Constraints.of(constraints)
    n = target.device_count
    rules.check(tuple(axes), n, target.spec)
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
        gpu = target.platform == "cuda"
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


# -- the work a candidate does: what throughput is counted in ------------------------------------


class KnobExpression:
    """An arithmetic expression of the knobs (``batch*2048``, ``6*1.3e9*batch*1024``): numbers,
    knob names, ``+ - * / // % **`` and parentheses, nothing else. Read with :mod:`ast`, never
    ``eval``: a name that is not a knob, a call or an attribute is a ``ValueError`` at once, and a
    value that is not a finite number above 0 is one when it is evaluated."""

    _OPERATORS: ClassVar[dict[type, Callable[[float, float], float]]] = {
        ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
        ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b,
        ast.Mod: lambda a, b: a % b, ast.Pow: lambda a, b: float(a) ** float(b),
    }  # fmt: skip

    def __init__(self, text: str, names: Iterable[str], what: str = "expression") -> None:
        self.text, self.what, self.names = str(text), what, frozenset(names)
        if len(self.text) > 1000:
            raise ValueError(f"{what} {self.text[:40]!r}...: longer than 1000 characters")
        try:
            tree = ast.parse(self.text.strip(), mode="eval")
        except SyntaxError as exc:
            raise ValueError(f"{what} {self.text!r} is not an expression: {exc.msg}") from None
        self._check(tree.body)
        self.tree = tree.body

    def _check(self, node: ast.AST) -> None:
        if isinstance(node, ast.BinOp) and type(node.op) in self._OPERATORS:
            self._check(node.left)
            self._check(node.right)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd | ast.USub):
            self._check(node.operand)
        elif isinstance(node, ast.Constant) and _is_number(node.value):
            pass
        elif isinstance(node, ast.Name):
            if node.id not in self.names:
                known = ", ".join(sorted(self.names)) or "none"
                raise ValueError(
                    f"{self.what} {self.text!r}: {node.id!r} is not a knob (knobs: {known})"
                    + _did_you_mean(node.id, self.names)
                )
        else:
            raise ValueError(
                f"{self.what} {self.text!r}: only numbers, knob names and + - * / // % ** "
                f"are allowed, not {ast.unparse(node)!r}"
            )

    def _value(self, node: ast.AST, knobs: Mapping[str, Any]) -> float:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            value = knobs[node.id]
            if not _is_number(value):
                raise ValueError(
                    f"{self.what} {self.text!r}: knob {node.id}={value!r} is no number"
                )
            return value
        if isinstance(node, ast.UnaryOp):
            value = self._value(node.operand, knobs)
            return -value if isinstance(node.op, ast.USub) else value
        assert isinstance(node, ast.BinOp)
        left, right = self._value(node.left, knobs), self._value(node.right, knobs)
        try:
            return self._OPERATORS[type(node.op)](left, right)
        except OverflowError:
            return math.inf  # refused as no finite number
        except ZeroDivisionError as exc:
            raise ValueError(f"{self.what} {self.text!r}: {exc}") from None

    def __call__(self, **knobs) -> float:
        value = self._value(self.tree, knobs)
        return _positive(value, f"{self.what} {self.text!r} at {_knob_text(knobs)}")

    def __repr__(self) -> str:
        return f"KnobExpression({self.text!r})"


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _positive(value, what: str) -> float:
    """``value`` as a float when it is a finite number above 0; else a ValueError naming it."""
    if not _is_number(value) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what} is {value!r}: it must be a finite number above 0")
    return float(value)


def _knob_text(knobs: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in knobs.items()) or "no knobs"


def _did_you_mean(name: str, known: Iterable[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, sorted(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _per_knob(value, what: str, knob_names: Iterable[str]) -> Callable[..., float] | None:
    """A number, a function of the knobs or a :class:`KnobExpression` text, as one function of
    the knobs (None where not given); a number is checked here, the rest where evaluated."""
    if value is None:
        return None
    if isinstance(value, str):
        return KnobExpression(value, knob_names, what)
    if callable(value):
        return lambda **knobs: _positive(value(**knobs), f"{what} at {_knob_text(knobs)}")
    number = _positive(value, what)
    return lambda **knobs: number


def _work(returned_work, what: str) -> dict[str, float]:
    """The 4th item make_step may return: ``{"tokens": ..., "model_flops": ...}`` (the step's,
    all devices together), checked."""
    if returned_work is None:
        return {}
    if not isinstance(returned_work, Mapping):
        raise TypeError(
            f"{what} returned {type(returned_work).__name__} as its 4th item: it must be a "
            'mapping such as {"tokens": 65536, "model_flops": 4.3e15}'
        )
    unknown = set(returned_work) - WORK_KEYS
    if unknown:
        raise TypeError(
            f"{what}'s work has the key(s) {sorted(unknown)}; known: tokens, model_flops"
        )
    return {
        k: _positive(v, f"{what}'s work {k}") for k, v in returned_work.items() if v is not None
    }


WORK_KEYS = frozenset({"tokens", "model_flops"})


# -- make_step's signature, checked before any compile -------------------------------------------


@dataclass(frozen=True)
class _Parameter:
    name: str
    has_default: bool
    default: Any = None  # the default's value where it is a literal
    annotation: str = ""


def _parameters_of(function) -> list[_Parameter] | None:
    """make_step's parameters after the mesh, or None where it takes any keyword."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return None
    out = []
    for p in list(signature.parameters.values())[1:]:
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            return None
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            continue
        annotation = p.annotation
        text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
        text = "" if annotation is inspect.Parameter.empty else text or str(annotation)
        default = None if p.default is inspect.Parameter.empty else p.default
        out.append(_Parameter(p.name, p.default is not inspect.Parameter.empty, default, text))
    return out


def _parameters_in_file(path: str, qualname: str) -> list[_Parameter] | None:
    """The parameters of ``qualname`` in the file at ``path``, read from its syntax tree (the
    file is not run); a ValueError when the file does not define that name."""
    tree = _syntax_tree(path)
    _refuse_unguarded_explore(tree, path)
    top = qualname.split(".")[0]
    defined: dict[str, ast.AST] = {}
    star = False
    for node in tree.body:
        for name, value in _top_level_names(node):
            defined[name] = value
        star |= isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names)
    if top not in defined:
        if star:  # a name from `import *` cannot be seen without running the file
            return None
        functions = sorted(n for n, v in defined.items() if isinstance(v, ast.FunctionDef))
        raise ValueError(
            f"{path} defines no {top!r}"
            + _did_you_mean(top, defined)
            + (f" (its functions: {', '.join(functions)})" if functions else "")
        )
    node = defined[top]
    bound: set[str] = set()
    partial = getattr(node, "value", None)  # NAME = functools.partial(a_def, keyword=...)
    if (
        qualname == top
        and isinstance(partial, ast.Call)
        and ast.unparse(partial.func) in ("functools.partial", "partial")
        and len(partial.args) == 1
        and isinstance(partial.args[0], ast.Name)
        and isinstance(defined.get(partial.args[0].id), ast.FunctionDef)
        and all(k.arg is not None for k in partial.keywords)
    ):
        bound = {k.arg for k in partial.keywords if k.arg}
        node = defined[partial.args[0].id]
    elif qualname != top:
        return None
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return None  # a method, an import or an assignment: checked where it is called
    args = node.args
    if args.kwarg is not None:
        return None
    positional = [*args.posonlyargs, *args.args]
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    pairs = list(zip(positional, defaults, strict=True))[1:]
    pairs += list(zip(args.kwonlyargs, args.kw_defaults, strict=True))
    out = []
    for arg, default in pairs:
        value = None
        if default is not None:
            with contextlib.suppress(
                ValueError, TypeError, SyntaxError, MemoryError, RecursionError
            ):
                value = ast.literal_eval(default)
        annotation = ast.unparse(arg.annotation) if arg.annotation is not None else ""
        if arg.arg in bound:  # given by the partial: a default the knobs may override
            out.append(_Parameter(arg.arg, True, value, annotation))
        else:
            out.append(_Parameter(arg.arg, default is not None, value, annotation))
    return out


def _top_level_names(node: ast.AST) -> list[tuple[str, ast.AST]]:
    """The names a module-level statement binds (defs, classes, assignments, imports)."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [(node.name, node)]
    if isinstance(node, ast.Assign | ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [(n.id, node) for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    if isinstance(node, ast.Import | ast.ImportFrom):
        return [((a.asname or a.name).split(".")[0], node) for a in node.names if a.name != "*"]
    if isinstance(node, ast.If | ast.Try | ast.With):  # guarded definitions (try: import ...)
        return [pair for child in ast.iter_child_nodes(node) for pair in _top_level_names(child)]
    return []


def _refuse_unguarded_explore(tree: ast.Module, path: str, otherwise: str = "") -> None:
    """A worker runs the top level of the file it loads ``make_step`` from: a call to explore
    there (not under ``if __name__ == "__main__":``) would start an exploration in every worker."""
    for node in tree.body:
        if isinstance(node, ast.If) and "__name__" in ast.unparse(node.test):
            continue
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for call in ast.walk(node):
            if isinstance(call, ast.Call):
                name = getattr(call.func, "id", None) or getattr(call.func, "attr", None)
                if name == "explore":
                    raise ValueError(
                        f"{path}:{call.lineno} calls explore() at the top level: each worker "
                        "loads this file to find make_step and would run it again. Put the call "
                        'under `if __name__ == "__main__":` (or '
                        + (otherwise or "pass make_step itself, not FILE.py:NAME")
                        + ": make_step then goes to the workers by value)"
                    )


def check_knobs(parameters: list[_Parameter] | None, knobs: Mapping[str, Iterable], what: str):
    """Every knob is a parameter of make_step, of its parameter's type (from its default or its
    annotation: ``bool``, ``int``, ``float``, ``str``), and no parameter without a default is
    left without a knob. A ValueError saying which, before anything compiles."""
    if parameters is None:
        return
    by_name = {p.name: p for p in parameters}
    for name, values in knobs.items():
        if name not in by_name:
            raise ValueError(
                f"{what} has no parameter {name!r} for the knob {name}="
                f" (its parameters after the mesh: {', '.join(by_name) or 'none'})"
                + _did_you_mean(name, by_name)
            )
        kind = _kind(by_name[name])
        for value in values:
            if kind is not None and not _is_kind(value, kind, by_name[name]):
                raise ValueError(
                    f"knob {name}={value!r} is a {type(value).__name__}, not the "
                    f"{kind.__name__} {what}'s {name} takes"
                    + (f" (default {by_name[name].default!r})" if by_name[name].has_default else "")
                )
    missing = [p.name for p in parameters if not p.has_default and p.name not in knobs]
    if missing:
        raise ValueError(
            f"{what} needs {', '.join(missing)} but no knob gives "
            f"{'it' if len(missing) == 1 else 'them'} (knobs={{{missing[0]!r}: [...]}}, "
            f"--knob {missing[0]}=...)"
        )


def _kind(parameter: _Parameter) -> type | None:
    """The type a parameter's default or plain annotation says (None: no telling)."""
    if parameter.has_default and parameter.default is not None:
        kind = type(parameter.default)
        return kind if kind in (bool, int, float, str) else None
    words = {w.strip() for w in parameter.annotation.replace("Optional[", "").strip("]").split("|")}
    words.discard("None")
    if len(words) == 1:
        return {"bool": bool, "int": int, "float": float, "str": str}.get(words.pop())
    return None


def _is_kind(value, kind: type, parameter: _Parameter) -> bool:
    if value is None:
        return (
            parameter.has_default and parameter.default is None
        ) or "None" in parameter.annotation
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return _is_number(value)
    return isinstance(value, kind)


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
            path = str(Path(file).resolve())
            _refuse_unguarded_explore(_syntax_tree(path), path)
            return ("file", path, qualname)
    try:
        import cloudpickle
    except ImportError:
        script = getattr(module, "__file__", None) if module is not None else None
        if "<" not in qualname and script and Path(script).is_file():
            # a script's function without cloudpickle: the worker loads the script by path (its
            # top level runs there, under another __name__), so an unguarded explore() is refused
            path = str(Path(script).resolve())
            _refuse_unguarded_explore(_syntax_tree(path), path, "install cloudpickle")
            return ("file", path, qualname)
        raise ValueError(
            f"{qualname or make_step!r} cannot be imported by a worker (a closure, a lambda or "
            "in __main__) and cloudpickle is not installed: define it at module level in a file"
        ) from None
    return ("pickle", cloudpickle.dumps(make_step))


def _syntax_tree(path: str) -> ast.Module:
    try:
        return ast.parse(Path(path).read_text(encoding="utf-8"), path)
    except (OSError, UnicodeDecodeError, SyntaxError) as exc:
        raise ValueError(f"cannot read {path}: {one_line(exc)}") from None


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

# The environment variables compiler flags reach XLA through (read when JAX starts its backend),
# by the name explore() takes them under.
FLAG_VARIABLES = {"xla": "XLA_FLAGS", "libtpu": "LIBTPU_INIT_ARGS"}
WORKER_VARIABLE = "HLO_ROOFLINE_EXPLORE_WORKER"  # set in the default pool's workers


def _failed(status: str, error: str, start: float | None, trace: str = "", **more) -> dict:
    return {
        "status": status,
        "error": error,
        "traceback": trace,
        "compile_s": time.perf_counter() - start if start is not None else math.nan,
        "report": None,
        **more,
    }


def flags_in_effect() -> dict[str, str]:
    """The compiler flags of this process's environment, by variable (only those set)."""
    return {
        v: os.environ[v].strip() for v in FLAG_VARIABLES.values() if os.environ.get(v, "").strip()
    }


def _evaluate(job: dict) -> dict:
    """Compile and judge one candidate; never raises (an error is the row's status, with the
    traceback). make_step raising :class:`Refused` is the row's result ``refused``; a
    ``MemoryError`` asks for a retry on a fresh worker (``retry``)."""
    import traceback

    start = time.perf_counter()
    try:
        wanted = job.get("flags") or {}
        env = flags_in_effect()
        missing = [f for var, fs in wanted.items() for f in fs if f not in env.get(var, "").split()]
        if missing:
            raise RuntimeError(
                f"this worker's environment lacks the compiler flag(s) {' '.join(missing)}: "
                "flags reach XLA through XLA_FLAGS / LIBTPU_INIT_ARGS when JAX starts, so start "
                "your executor's workers with them (Dask: LocalCluster(env={...})) or use the "
                "default pool"
            )
        from hlo_roofline import api, targets

        make_step = _resolve(job["reference"])
        sizes = dict(job["sizes"])
        mesh = targets.make_mesh(job["target"], tuple(sizes.values()), tuple(sizes))
        returned = make_step(mesh, **dict(job["knobs"]))
        if not isinstance(returned, tuple | list) or not 2 <= len(returned) <= 4:
            raise TypeError(
                "make_step must return (fn, args), (fn, args, jit_kwargs) or "
                f"(fn, args, jit_kwargs, work), not {type(returned).__name__}"
            )
        fn, args, *rest = returned
        jit_kwargs = dict(rest[0]) if rest and rest[0] is not None else {}
        work = _work(rest[1] if len(rest) > 1 else None, "make_step")
        model_flops = job.get("model_flops")  # per device
        if model_flops is None and "model_flops" in work:
            model_flops = work["model_flops"] / math.prod(sizes.values())
        report = api.analyze(
            fn,
            *args,
            target=job["target"],
            cache=job["cache"],
            model_flops=model_flops,
            jit_kwargs=jit_kwargs,
        )
        report.summary["compiler_flags"] = env
    except Refused as exc:
        return _failed(STATUS_REFUSED, one_line(exc), start)
    except MemoryError as exc:
        return _failed(STATUS_CRASHED, f"MemoryError: {one_line(exc)} (out of host memory)",
                       start, traceback.format_exc(), retry=True)  # fmt: skip
    except (Exception, SystemExit) as exc:  # sys.exit() in make_step is its error too
        return _failed(STATUS_ERROR, f"{type(exc).__name__}: {one_line(exc)}", start,
                       traceback.format_exc())  # fmt: skip
    return {
        "status": STATUS_OK,
        "error": "",
        "traceback": "",
        "compile_s": time.perf_counter() - start,
        "report": report.to_dict(),
        "work": work,
        "flags": env,
    }


# -- the default pool: worker processes that survive their candidates, and die with us ------------


def _write_message(stream, value) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(len(data).to_bytes(8, "little") + data)
    stream.flush()


def _read_exactly(fd: int, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError("the worker closed its pipe")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _worker_main(job_fd: int, result_fd: int, parent: int) -> None:
    """A worker of the default pool: read jobs, write results, until the pipe closes. It never
    imports the parent's ``__main__`` (a script without a guard is not run again), and exits when
    its parent does (``prctl(PR_SET_PDEATHSIG)`` on Linux, and a watch on the parent's pid)."""
    import threading

    os.environ[WORKER_VARIABLE] = "1"
    with contextlib.suppress(Exception):  # Linux: the kernel kills us with the parent
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, daemon=True).start()
    results = os.fdopen(result_fd, "wb")
    from hlo_roofline import api  # noqa: F401  (JAX started before the first candidate's clock)

    _write_message(results, None)  # ready: a candidate's --timeout counts from here
    while True:
        try:
            size = int.from_bytes(_read_exactly(job_fd, 8), "little")
            job = pickle.loads(_read_exactly(job_fd, size))
        except EOFError:
            return
        result = _evaluate(job)
        try:
            _write_message(results, result)
        except (pickle.PicklingError, TypeError, AttributeError, RecursionError) as exc:
            _write_message(results, _failed(STATUS_ERROR, f"its result cannot be sent back: "
                                            f"{type(exc).__name__}: {one_line(exc)}", None))  # fmt: skip


class _Worker:
    """One worker process of the default pool, its pipes and its output (kept for the row of a
    candidate that kills it)."""

    def __init__(self, env: dict[str, str]) -> None:
        import subprocess
        import tempfile

        job_r, job_w = os.pipe()
        result_r, result_w = os.pipe()
        self.output = tempfile.TemporaryFile()  # noqa: SIM115 (closed in close())
        code = (
            "import sys; from hlo_roofline.explorer import _worker_main; "
            "_worker_main(*map(int, sys.argv[1:]))"
        )
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", code, str(job_r), str(result_w), str(os.getpid())],
                pass_fds=(job_r, result_w), stdin=subprocess.DEVNULL, stdout=self.output,
                stderr=subprocess.STDOUT, env=env,
            )  # fmt: skip
        finally:
            os.close(job_r)
            os.close(result_w)
        self.jobs = os.fdopen(job_w, "wb")
        self.results = result_r
        self.ready = False  # it has imported JAX (its first message)

    def send(self, job: dict) -> None:
        _write_message(self.jobs, job)

    def receive(self) -> dict:
        size = int.from_bytes(_read_exactly(self.results, 8), "little")
        return pickle.loads(_read_exactly(self.results, size))

    def last_words(self) -> str:
        """How it ended and the end of what it printed."""
        import signal

        try:
            code = self.process.wait(timeout=30)
        except Exception:  # it closed its pipe but lives on: it is of no use any more
            self.process.kill()
            code = self.process.wait()
        how = f"exit status {code}"
        if code < 0:
            with contextlib.suppress(ValueError):
                how = f"killed by {signal.Signals(-code).name}"
        self.output.seek(0, os.SEEK_END)
        self.output.seek(max(0, self.output.tell() - 2000))
        tail = self.output.read().decode("utf-8", "replace").strip()
        return how + (f"; its last output:\n{tail}" if tail else "")

    def close(self, kill: bool = False) -> None:
        with contextlib.suppress(OSError):
            self.jobs.close()
        if kill:
            with contextlib.suppress(OSError):
                self.process.kill()
        try:
            self.process.wait(timeout=10)
        except Exception:
            self.process.kill()
            self.process.wait()
        with contextlib.suppress(OSError):
            os.close(self.results)
        self.output.close()


def _worker_environment(flags: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """The parent's environment, its ``sys.path`` (as ``spawn`` hands it on: a worker imports what
    the parent can) and the exploration's compiler flags appended to theirs."""
    env = dict(os.environ)
    paths = [p or os.getcwd() for p in sys.path]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    for var, given in flags.items():
        env[var] = " ".join([env.get(var, "").strip(), *given]).strip()
    return env


def _run_pool(jobs_list, workers, timeout, flags, on_result) -> None:
    """Run every job on ``workers`` worker processes of our own. A candidate whose worker dies
    (the OOM killer, a segfault) or that runs out of host memory is retried once on a fresh
    worker; one past ``timeout`` seconds is killed with its worker (``timed_out``)."""
    import collections
    import select

    env = _worker_environment(flags)
    pending = collections.deque(range(len(jobs_list)))
    tries: dict[int, int] = collections.Counter()
    idle: list[_Worker] = []
    running: dict[_Worker, tuple[int, float]] = {}
    try:
        while pending or running:
            while pending and len(running) < workers:
                i = pending.popleft()
                worker = idle.pop() if idle else _Worker(env)
                tries[i] += 1
                try:
                    worker.send(jobs_list[i])
                except OSError:  # it died before it read the job
                    _died(i, worker, tries, pending, on_result)
                    continue
                started = worker.ready and timeout
                running[worker] = (i, time.monotonic() + timeout if started else math.inf)
            if not running:  # every send failed: the candidates are retried or rows already
                continue
            wait = min(deadline for _, deadline in running.values()) - time.monotonic()
            ready, _, _ = select.select(
                [w.results for w in running], [], [], max(0.0, min(wait, 3600.0))
            )
            for worker in [w for w in running if w.results in ready]:
                i, _ = running.pop(worker)
                try:
                    result = worker.receive()
                except (EOFError, OSError, pickle.UnpicklingError):
                    _died(i, worker, tries, pending, on_result)
                    continue
                if result is None:  # the worker started: its candidate's clock starts now
                    worker.ready = True
                    running[worker] = (i, time.monotonic() + timeout if timeout else math.inf)
                    continue
                if result.pop("retry", False):  # out of host memory: a fresh worker, once
                    worker.close(kill=True)
                    if tries[i] < 2:
                        pending.appendleft(i)
                        continue
                    result["error"] += "; again on a fresh worker"
                else:
                    idle.append(worker)
                on_result(i, result)
            now = time.monotonic()
            for worker, (i, deadline) in list(running.items()):
                if now >= deadline:
                    del running[worker]
                    worker.close(kill=True)
                    on_result(i, _failed(
                        STATUS_TIMED_OUT, f"no result in {timeout:g} s (--timeout): killed", None,
                    ))  # fmt: skip
    finally:
        for worker in [*idle, *running]:
            worker.close(kill=worker in running)


def _died(i, worker: _Worker, tries, pending, on_result) -> None:
    """The worker running candidate ``i`` died: retry it once on a fresh worker, else a row."""
    words = worker.last_words()
    worker.close(kill=True)
    if tries[i] < 2:
        pending.appendleft(i)
        return
    first, _, rest = words.partition("\n")
    on_result(i, _failed(
        STATUS_CRASHED, f"its worker died twice ({first.rstrip(';')})", None, rest,
    ))  # fmt: skip


def _run_executor(pool, jobs_list, timeout, on_result) -> None:
    """Run every job on the user's executor (or a Dask client's). A candidate whose future fails
    (its worker died) is submitted once more; with ``timeout``, when no candidate finishes for
    that long, the rest are given up (``timed_out``: a foreign executor's worker cannot be
    killed from here)."""
    futures = {pool.submit(_evaluate, job): i for i, job in enumerate(jobs_list)}
    tries = dict.fromkeys(range(len(jobs_list)), 1)
    while futures:
        done, _ = concurrent.futures.wait(
            futures, timeout=timeout, return_when=concurrent.futures.FIRST_COMPLETED
        )
        if not done:
            for future, i in futures.items():
                future.cancel()
                on_result(i, _failed(
                    STATUS_TIMED_OUT, f"no candidate finished in {timeout:g} s (--timeout)", None
                ))  # fmt: skip
            return
        for future in done:
            i = futures.pop(future)
            try:
                result = future.result()
            except Exception as exc:  # the worker itself died
                result = _failed(STATUS_CRASHED,
                                 f"worker failed: {type(exc).__name__}: {one_line(exc)}", None,
                                 retry=True)  # fmt: skip
            if result.pop("retry", False) and tries[i] < 2:
                tries[i] += 1
                try:
                    futures[pool.submit(_evaluate, jobs_list[i])] = i
                    continue
                except Exception as exc:  # a broken pool takes nothing more
                    result["error"] += f"; no retry: {type(exc).__name__}: {one_line(exc)}"
            on_result(i, result)


# -- the result ----------------------------------------------------------------------------------


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
SPAN_PREFIXES = ("n_axes_", "nodes_")  # per-axis span columns: torus axes (TPU), nodes (GPU)
# The row's own columns (the rest are axis sizes, n_axes_<axis> and knobs).
ROW_COLUMNS = frozenset({
    "candidate", "status", "error", "traceback", "compile_s", "flags", "step_s", "lower_s",
    "upper_s", "compute_s", "memory_s", "comm_s", "exposed_comm_s", "exposed_comm_share",
    "matmul_fwd_s", "collective_fwd_s", "exposed_fwd_s", "matmul_bwd_s", "collective_bwd_s",
    "exposed_bwd_s", "mfu_upper_bound",
    "mfu_model", "tokens_per_step", "model_flops", "tokens_per_s_per_chip",
    "model_flops_per_s_per_chip", "flops_per_s_per_chip", "hbm_per_device", "fit", "bound",
    "why", "rank", "gap_to_best",
})  # fmt: skip


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
    return float(value) if _is_number(value) else None


PASSES = {"forward": "fwd", "backward": "bwd"}  # attribution.pass_of's passes, as column suffixes
PASS_KINDS = ("matmul", "collective", "exposed")  # the per-pass columns: <kind>_<pass>_s


def pass_times(ops: pd.DataFrame) -> dict[str, float]:
    """The book's quantities per pass (forward, backward: ``hlo.attribution.pass_of`` of each
    op's ``op_name``): ``matmul_<pass>_s``, Σ ``t_compute_s`` of the pass's matmuls (ops with a
    matmul shape, ``mm_m``), against ``collective_<pass>_s``, Σ ``t_comm_s`` of its collectives:
    the time the collective occupies its links, on the path its data takes, hidden or not. The
    book's T1–T3 compare exactly these two per layer: compute-bound iff the matmuls take longer.
    ``exposed_<pass>_s``, Σ ``t_exposed_s`` of its collectives, is the part of that time on the
    scheduled step's critical path (the compute stream waited for it)."""
    from hlo_roofline.hlo.attribution import pass_of

    out = {f"{kind}_{short}_s": math.nan for short in PASSES.values()
           for kind in PASS_KINDS}  # fmt: skip
    needed = {"op_name", "t_compute_s", "t_comm_s", "t_exposed_s", "mm_m", "collective"}
    if ops.empty or not needed <= set(ops.columns):
        return out
    passes = ops["op_name"].fillna("").astype(str).map(pass_of)
    matmul = pd.to_numeric(ops["mm_m"], errors="coerce").fillna(0) > 0
    collective = ops["collective"].fillna("").astype(str) != ""
    for name, short in PASSES.items():
        here = passes == name
        out[f"matmul_{short}_s"] = float(ops.loc[here & matmul, "t_compute_s"].sum())
        out[f"collective_{short}_s"] = float(ops.loc[here & collective, "t_comm_s"].sum())
        out[f"exposed_{short}_s"] = float(ops.loc[here & collective, "t_exposed_s"].sum())
    return out


def _pass_words(out: dict) -> str:
    """``per pass: forward matmuls 1.2 ms vs collectives 0.3 ms ⇒ compute-bound; ...``."""
    from hlo_roofline.text import format_seconds

    parts = []
    for name, short in PASSES.items():
        mm, comm = out.get(f"matmul_{short}_s"), out.get(f"collective_{short}_s")
        if not _is_number(mm) or not math.isfinite(mm) or (mm == 0 and not comm):
            continue
        side = "compute" if mm >= comm else "communication"
        exposed = out.get(f"exposed_{short}_s")
        hidden = (
            f" ({format_seconds(exposed)} exposed)" if comm and _is_number(exposed) else ""
        )  # fmt: skip
        parts.append(
            f"{name} matmuls {format_seconds(mm)} vs collectives {format_seconds(comm)}{hidden} "
            f"⇒ {side}-bound"
        )
    return "per pass: " + "; ".join(parts) if parts else ""


def _flags_text(flags: Mapping[str, str]) -> str:
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
        flags=_flags_text(flags) if flags is not None else given.get("flags", ""),
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
        model_flops=model_flops * devices if _is_number(model_flops) else math.nan,
        tokens_per_s_per_chip=per_chip(tokens / devices) if tokens else math.nan,
        model_flops_per_s_per_chip=per_chip(model_flops) if _is_number(model_flops) else math.nan,
        flops_per_s_per_chip=per_chip(s["flops"]) if _is_number(s.get("flops")) else math.nan,
        hbm_per_device=fit.get("need_bytes", mem.get("need_bytes")),
        fit=memory.verdict_of(fit),
        bound=_bound(compute, memory_t, comm) if program else "unknown",
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
    share = out.get("exposed_comm_share")
    share = share if _is_number(share) and math.isfinite(share) else 0.0
    if out["bound"] == "unknown":  # the compiler refused it: no optimized program to judge
        parts.append("compiled: refused by the compiler, no program to time")
    else:
        parts.append(
            f"compiled: whole step {out['bound']}-bound, {share:.0%} of it exposed communication"
        )
        per_pass = _pass_words(out)
        if per_pass:
            parts.append(per_pass)
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


# What a ranking compares, in order of preference: the work the user counts (tokens, model
# FLOPs: given, or returned by make_step), then the step itself where every candidate does the
# same work (no knob varies), else the FLOP/s the compiled program achieves (never raw step time
# across candidates doing different work).
THROUGHPUT_COLUMNS = ("tokens_per_s_per_chip", "model_flops_per_s_per_chip")
STEP_COLUMN, FLOPS_COLUMN = "step_s", "flops_per_s_per_chip"
HIGHER_IS_BETTER = frozenset({*THROUGHPUT_COLUMNS, FLOPS_COLUMN})


def knob_columns(table: pd.DataFrame, axes: Iterable[str] = ()) -> list[str]:
    """The knob columns of an explorer table: neither the row's own, a span, an axis (``axes``,
    or any column with a span twin ``n_axes_<axis>``/``nodes_<axis>``)."""
    spans = {c.removeprefix(p) for c in table.columns for p in SPAN_PREFIXES if c.startswith(p)}
    skip = {*axes, *spans}
    return [c for c in table.columns if c not in ROW_COLUMNS and c not in skip
            and not c.startswith(SPAN_PREFIXES)]  # fmt: skip


def rank_by(table: pd.DataFrame, knobs: Sequence[str] | None = None) -> str:
    """The column a ranking compares (see :data:`THROUGHPUT_COLUMNS`): tokens/s per chip where
    every candidate that compiled and fits has it, else model FLOP/s per chip, else the step time
    where no knob varies among them (``knobs``: their columns; default :func:`knob_columns`),
    else the compiled program's FLOP/s per chip."""
    if "status" not in table or table.empty:
        return STEP_COLUMN
    ok = table["status"].map(status_of) == STATUS_OK
    if not ok.any():
        return STEP_COLUMN
    for column in THROUGHPUT_COLUMNS:
        values = pd.to_numeric(table.get(column, pd.Series(index=table.index)), errors="coerce")
        if (values[ok] > 0).all():
            return column
    knobs = knob_columns(table) if knobs is None else [k for k in knobs if k in table]
    same_work = all(table.loc[ok, k].astype(str).nunique() <= 1 for k in knobs)
    return STEP_COLUMN if same_work or FLOPS_COLUMN not in table else FLOPS_COLUMN


def rank(table: pd.DataFrame, knobs: Sequence[str] | None = None) -> pd.DataFrame:
    """Rank the candidates that compiled and fit by :func:`rank_by` (most work per second, else
    the shortest step) and give each its ``gap_to_best``: how much longer it takes per unit of
    work (or per step) than the first, as a fraction (0.25: 25% slower). Candidates compiled
    under different compiler flags (the ``flags`` column) are ranked apart, each group from 1."""
    table = table.copy()
    table["rank"] = pd.NA
    table["gap_to_best"] = math.nan
    if table.empty or "status" not in table:
        table["rank"] = table["rank"].astype("Int64")
        return table
    by = rank_by(table, knobs)
    values = pd.to_numeric(table.get(by, pd.Series(index=table.index)), errors="coerce")
    ok = (table["status"].map(status_of) == STATUS_OK) & (values > 0) & values.map(math.isfinite)
    groups = (
        table["flags"].fillna("").astype(str) if "flags" in table else pd.Series("", table.index)
    )
    for _, members in table[ok].groupby(groups[ok], sort=False):
        higher = by in HIGHER_IS_BETTER
        order = values[members.index].sort_values(ascending=not higher, kind="stable")
        best = order.iloc[0]
        table.loc[order.index, "gap_to_best"] = best / order - 1 if higher else order / best - 1
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


def _user_executor(executor):
    """The executor to submit to: the user's, or a Dask client's ``get_executor``."""
    get = getattr(executor, "get_executor", None)  # a distributed.Client
    if get is not None and not isinstance(executor, concurrent.futures.Executor):
        return get(pure=False)
    return executor


_FLAG = re.compile(r"--[A-Za-z0-9_.\-]+(=\S*)?")


def compiler_flags(xla_flags: Iterable[str] = (), libtpu_flags: Iterable[str] = ()) -> dict:
    """``{"xla": [...], "libtpu": [...]}`` (only those given), each flag ``--name`` or
    ``--name=value``; anything else is a ValueError."""
    out = {}
    for kind, given in (("xla", xla_flags), ("libtpu", libtpu_flags)):
        given = [given] if isinstance(given, str) else list(given)
        for flag in given:
            if not isinstance(flag, str) or not _FLAG.fullmatch(flag):
                raise ValueError(f"{kind} flag {flag!r} is not --name or --name=value")
        if given:
            out[kind] = given
    return out


def read_flags_file(path: str | os.PathLike) -> dict:
    """Compiler flags from a TOML file: ``xla = ["--xla_...=true"]``, ``libtpu = [...]``."""
    import tomllib

    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"cannot read the flags file {path}: {one_line(exc)}") from None
    unknown = set(data) - set(FLAG_VARIABLES)
    if unknown:
        raise ValueError(f"{path}: unknown key(s) {sorted(unknown)}; known: xla, libtpu")
    for kind, value in data.items():
        if not isinstance(value, list):
            raise ValueError(f"{path}: {kind} must be a list of flags, not {value!r}")
    return compiler_flags(data.get("xla", ()), data.get("libtpu", ()))


def _parameters(make_step, reference: tuple) -> list[_Parameter] | None:
    """make_step's parameters, found before any worker starts: a ValueError for a file or module
    that does not define it (with the names that are close)."""
    if not isinstance(make_step, str):
        return _parameters_of(make_step)
    kind, where, qualname = reference
    if kind == "file":
        if not Path(where).is_file():
            raise ValueError(f"no such file: {where}")
        return _parameters_in_file(where, qualname)
    try:
        value: Any = importlib.import_module(where)
    except ImportError as exc:
        raise ValueError(f"cannot import {where}: {one_line(exc)}") from None
    for part in qualname.split("."):
        if not hasattr(value, part):
            known = [n for n in dir(value) if not n.startswith("_")]
            raise ValueError(f"{where} has no {qualname!r}" + _did_you_mean(part, known))
        value = getattr(value, part)
    if not callable(value):
        raise ValueError(f"{where}:{qualname} is a {type(value).__name__}, not a function")
    return _parameters_of(value)


def parameter_kinds(make_step) -> dict[str, type]:
    """The type of each of make_step's knobs that its signature tells (``batch: int``,
    ``policy="full"``): how the CLI reads a knob's text. A ValueError where it is not found."""
    parameters = _parameters(make_step, _reference(make_step)) or []
    return {p.name: kind for p in parameters if (kind := _kind(p)) is not None}


def default_name(make_step, target: str) -> str:
    """An exploration's directory name in a logdir: make_step's name and the target
    (``make_mlp_step@v5e-2x2``)."""
    if isinstance(make_step, str):
        name = make_step.rpartition(":")[2]
    else:
        name = getattr(make_step, "__name__", "make_step")
    return re.sub(r"[^A-Za-z0-9_.@-]", "-", f"{name}@{target}")


def explore(
    make_step,
    target: str | Target,
    axes: Sequence[str] = ("data", "fsdp", "tensor"),
    knobs: Mapping[str, Iterable] | None = None,
    constraints: Constraints | Mapping | None = None,
    executor=None,
    jobs: int | None = None,
    cache: bool | str | os.PathLike = True,
    model_flops: float | str | Callable[..., float] | None = None,
    tokens_per_step: float | str | Callable[..., float] | None = None,
    hidden: int | Callable[..., int] | None = None,
    progress: bool = True,
    stream: TextIO | None = None,
    timeout: float | None = None,
    xla_flags: Iterable[str] = (),
    libtpu_flags: Iterable[str] = (),
    name: str | None = None,
) -> Exploration:
    """Compile ``make_step(mesh, **knob)`` for every candidate layout on ``target``; rank them.

    ``make_step`` (a function, ``"FILE.py:NAME"`` or ``"package.module:NAME"``) returns
    ``(fn, args, jit_kwargs)`` for a mesh of ``axes``, or ``(fn, args, jit_kwargs, work)`` with
    ``work`` the step's ``{"tokens": ..., "model_flops": ...}`` (all devices together): what the
    ranking counts throughput in. It may raise :class:`Refused` for a layout the model cannot
    take. Its name, its parameters against the knobs' names and types, and the constraints'
    axes are checked before anything compiles (a ValueError).

    Candidates are compiled in ``jobs`` worker processes of our own (default ``os.cpu_count()``):
    a candidate whose worker dies is retried once on a fresh one, one running past ``timeout``
    seconds is killed, and the workers exit with this process. Or on ``executor`` (any
    ``concurrent.futures`` executor, or a ``distributed.Client``). Each compiles through the HLO
    cache (``cache``, as for :func:`hlo_roofline.analyze`), so a second run compiles nothing
    again. ``tokens_per_step``, ``model_flops`` (each candidate's report gets its share per
    device, and the row's ``mfu_model`` is the report's) and ``hidden`` (the MLP's F, for the
    book's TP rules) may be numbers, functions of the knobs, or (the first two) expressions of the
    knobs (``"batch*2048"``, :class:`KnobExpression`). ``xla_flags`` / ``libtpu_flags`` go to
    every worker's ``XLA_FLAGS`` / ``LIBTPU_INIT_ARGS`` (and into each report's summary).

    A candidate that fails is a row with its status, error and traceback: the exploration is then
    not :attr:`~Exploration.complete`.
    """
    from hlo_roofline import chips, targets

    if os.environ.get(WORKER_VARIABLE):
        raise RuntimeError(
            "explore() called inside an explorer worker: the file make_step is loaded from runs "
            'explore() when loaded; put that call under `if __name__ == "__main__":`'
        )
    axes = tuple(axes)
    if len(set(axes)) != len(axes) or not axes or not all(isinstance(a, str) for a in axes):
        raise ValueError(f"axes must be distinct names, got {axes}")
    if timeout is not None and not (_is_number(timeout) and math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"timeout must be a number of seconds above 0, not {timeout!r}")
    knobs = {k: list(v) if not isinstance(v, str) else [v] for k, v in (knobs or {}).items()}
    for knob, values in knobs.items():
        if not values:
            raise ValueError(f"knob {knob!r} has no values")
    flags = compiler_flags(xla_flags, libtpu_flags)
    spec = targets.parse_target(target)
    constants = book_constants(chips.get(spec.chip))
    reference = _reference(make_step)
    what = (
        make_step if isinstance(make_step, str) else getattr(make_step, "__qualname__", "make_step")
    )
    check_knobs(_parameters(make_step, reference), knobs, str(what))
    tokens_of = _per_knob(tokens_per_step, "tokens_per_step", knobs)
    flops_of = _per_knob(model_flops, "model_flops", knobs)
    if hidden is not None and not callable(hidden):
        _positive(hidden, "hidden")
    found, pruned = candidates(spec, axes, knobs, constraints)
    jobs_list = []
    for c in found:  # every expression evaluated for every candidate before anything compiles
        values = dict(c.knobs)
        if tokens_of is not None:
            tokens_of(**values)
        flops = flops_of(**values) if flops_of is not None else None
        jobs_list.append({
            "reference": reference,
            "target": spec,  # the parsed Target: a worker reads no string again
            "sizes": c.sizes,
            "knobs": c.knobs,
            "cache": str(cache) if isinstance(cache, os.PathLike) else cache,
            "model_flops": _per_device(flops, c),
            "flags": {FLAG_VARIABLES[k]: v for k, v in flags.items()},
        })  # fmt: skip
    results: dict[int, dict] = {}
    bar = Progress(len(found), stream, progress)

    def on_result(i: int, result: dict) -> None:
        results[i] = result
        bar.step(found[i].label)

    if found:
        if executor is None:
            workers = min(jobs or os.cpu_count() or 1, len(found))
            _run_pool(jobs_list, workers, timeout, jobs_list[0]["flags"], on_result)
        else:
            _run_executor(_user_executor(executor), jobs_list, timeout, on_result)
    from hlo_roofline.report import Report

    wanted_flags = _flags_text({
        var: " ".join([os.environ.get(var, "").strip(), *flags.get(kind, [])]).strip()
        for kind, var in FLAG_VARIABLES.items()
    })  # fmt: skip
    rows, reports = [], {}
    for i, c in enumerate(found):
        result = results.get(i) or _failed(STATUS_NOT_RUN, "never run", None)
        report = Report.from_dict(result["report"]) if result["report"] else None
        reports[c.label] = report
        rows.append(
            row(c, result, report, constants, tokens_per_step=tokens_of, hidden=hidden,
                flags=wanted_flags)
        )  # fmt: skip
    table = rank(pd.DataFrame(rows), list(knobs)) if rows else _empty_table(axes, knobs)
    return Exploration(
        table, reports, pruned, constants, spec.spec, axes, flags,
        default_name(make_step, spec.spec) if name is None else name, tuple(knobs),
    )  # fmt: skip


def _empty_table(axes: Sequence[str], knobs: Mapping) -> pd.DataFrame:
    """The table of an exploration with no candidate: its columns, no rows."""
    columns = [
        "candidate",
        *axes,
        *knobs,
        "status",
        "error",
        "step_s",
        "why",
        "rank",
        "gap_to_best",
    ]
    return pd.DataFrame({c: pd.Series(dtype=object) for c in columns})
