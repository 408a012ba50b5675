"""The candidate layouts: every factorization of the target's devices over the mesh axes that the
constraints allow and the topology maps onto, crossed with the knobs; and the work a candidate
does (tokens, model FLOPs: numbers, knob expressions or make_step's own), what throughput is
counted in."""

from __future__ import annotations

import ast
import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from hlo_roofline.text import one_line

if TYPE_CHECKING:
    from hlo_roofline.targets import Target


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
                        f"{', '.join(axes)}" + did_you_mean(str(axis), axes)
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
    allow_split_physical_axes: bool = False,
) -> tuple[list[Candidate], list[tuple[dict, str]]]:
    """(candidates, pruned): every factorization of the target's devices over ``axes`` that the
    constraints allow and the topology maps onto (``targets.make_mesh`` accepts, splitting torus
    axes where allowed), crossed with the knobs; the pruned ones with the reason."""
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
                mesh = targets.make_mesh(target, shape, tuple(axes), allow_split_physical_axes)
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
        elif isinstance(node, ast.Constant) and is_number(node.value):
            pass
        elif isinstance(node, ast.Name):
            if node.id not in self.names:
                known = ", ".join(sorted(self.names)) or "none"
                raise ValueError(
                    f"{self.what} {self.text!r}: {node.id!r} is not a knob (knobs: {known})"
                    + did_you_mean(node.id, self.names)
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
            if not is_number(value):
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
        return positive(value, f"{self.what} {self.text!r} at {_knob_text(knobs)}")

    def __repr__(self) -> str:
        return f"KnobExpression({self.text!r})"


def is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def positive(value, what: str) -> float:
    """``value`` as a float when it is a finite number above 0; else a ValueError naming it."""
    if not is_number(value) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what} is {value!r}: it must be a finite number above 0")
    return float(value)


def _knob_text(knobs: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in knobs.items()) or "no knobs"


def did_you_mean(name: str, known: Iterable[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, sorted(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def per_knob(value, what: str, knob_names: Iterable[str]) -> Callable[..., float] | None:
    """A number, a function of the knobs or a :class:`KnobExpression` text, as one function of
    the knobs (None where not given); a number is checked here, the rest where evaluated."""
    if value is None:
        return None
    if isinstance(value, str):
        return KnobExpression(value, knob_names, what)
    if callable(value):
        return lambda **knobs: positive(value(**knobs), f"{what} at {_knob_text(knobs)}")
    number = positive(value, what)
    return lambda **knobs: number


def work_of(returned_work, what: str) -> dict[str, float]:
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
        k: positive(v, f"{what}'s work {k}") for k, v in returned_work.items() if v is not None
    }


WORK_KEYS = frozenset({"tokens", "model_flops"})
