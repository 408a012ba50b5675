"""The cost of an op, the rule registry, and the context rules read shapes and callees through.

A rule is a function ``(instr, ctx) -> Cost`` registered for one or more opcodes with :func:`rule`.
The base model is XLA's ``HloCostAnalysis`` (``cost_model="xla"``); another model declares where it
differs, as XLA's ``GpuHloCostAnalysis`` overrides ``HloCostAnalysis`` by subclass: per opcode with
``@rule(opcode, model="roofline")``, and where the difference is not one opcode's (how the walk opens
a conditional, how a fusion reads its parameters) by a named hook of its :class:`CostModel`.
:func:`overrides` lists both: "where we differ from XLA".

Rules never walk the module themselves: nested computations are priced through
``ctx.computation(comp)``, and shape sizes through ``ctx.size`` / ``ctx.output_bytes`` so both cost
models share one place that decides how many bytes a shape occupies.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from hlo_roofline.cost import xla_sizes
from hlo_roofline.cost.xla_sizes import ShapeSizes
from hlo_roofline.hlo import attrs
from hlo_roofline.hlo.ir import DTYPE_BYTES, Computation, Instruction, Module, Shape, tiled_elements

COST_MODELS = ("roofline", "xla")
BASE_MODEL = "xla"  # XLA's HloCostAnalysis: the rules every other model starts from
# Ops that name a value made elsewhere (an input, a constant) or view one (a tuple, its element, a
# bitcast): no buffer of their own in the step, no op a fusion's reader lists.
NAMING_OPS = frozenset({"parameter", "constant", "get-tuple-element", "tuple", "bitcast"})
# Ops that only name, view or order values: never "unpriced", left out of coverage.
BOOKKEEPING = NAMING_OPS | {"after-all", "add-dependency", "domain"}
# What a rule (or a count beside it) raises on text whose attributes do not fit its shapes: the op
# becomes a flagged unknown row, never a crash.
RULE_ERRORS = (
    ValueError, IndexError, KeyError, ArithmeticError, AttributeError, TypeError,
)  # fmt: skip


class Cost(NamedTuple):
    """FLOPs, transcendentals and bytes of one op (or a sum of ops), per execution.

    ``bytes_accessed`` is HBM traffic (operands read + results written); ``comm_bytes`` is what one
    device sends over its links. ``unknown`` marks a cost that could not be priced (an opaque
    kernel): its FLOPs are not claimed, and its bytes are at most a lower bound. ``lower_bound``
    marks a cost counted short on purpose (a loop whose trip count is unknown, its body counted
    once): the flag, not its note's words, is what the summary reads. ``upper_bound`` marks the
    opposite: a count that may be high because a value the work depends on is not in the text (an
    attention kernel's mask or lengths, a grouped matmul's group sizes), every candidate counted.
    An immutable named tuple: an
    analysis builds tens of thousands, and a frozen dataclass is slower to build.
    """

    flops: float = 0.0
    transcendentals: float = 0.0
    bytes_accessed: float = 0.0
    comm_bytes: float = 0.0
    unknown: bool = False
    notes: tuple[str, ...] = ()
    lower_bound: bool = False
    # The part of ``flops`` a custom kernel runs on a matrix unit (an attention kernel's QKᵀ and
    # PV): it has no matmul geometry of its own, so the verdict needs to be told. A dot or
    # convolution carries its geometry instead (the report's mm_* columns).
    mxu_flops: float = 0.0
    upper_bound: bool = False

    def __add__(self, other: Cost) -> Cost:  # type: ignore[override]
        return Cost(
            self.flops + other.flops,
            self.transcendentals + other.transcendentals,
            self.bytes_accessed + other.bytes_accessed,
            self.comm_bytes + other.comm_bytes,
            self.unknown or other.unknown,
            _merge_notes(self.notes, other.notes),
            self.lower_bound or other.lower_bound,
            self.mxu_flops + other.mxu_flops,
            self.upper_bound or other.upper_bound,
        )

    def scaled(self, factor: float) -> Cost:
        """This cost executed ``factor`` times."""
        return Cost(
            self.flops * factor,
            self.transcendentals * factor,
            self.bytes_accessed * factor,
            self.comm_bytes * factor,
            self.unknown,
            self.notes,
            self.lower_bound,
            self.mxu_flops * factor,
            self.upper_bound,
        )

    def maximum(self, other: Cost) -> Cost:
        """Per-quantity maximum (XLA's rule for a conditional's branches)."""
        return Cost(
            max(self.flops, other.flops),
            max(self.transcendentals, other.transcendentals),
            max(self.bytes_accessed, other.bytes_accessed),
            max(self.comm_bytes, other.comm_bytes),
            self.unknown or other.unknown,
            _merge_notes(self.notes, other.notes),
            self.lower_bound or other.lower_bound,
            max(self.mxu_flops, other.mxu_flops),
            self.upper_bound or other.upper_bound,
        )

    def with_note(self, note: str) -> Cost:
        return self._replace(notes=_merge_notes(self.notes, (note,)))

    def replace(self, **changes) -> Cost:
        return self._replace(**changes)


ZERO = Cost()
_new_cost = tuple.__new__  # Cost(...) without its keyword-handling constructor


def simple_cost(flops: float, transcendentals: float, bytes_accessed: float) -> Cost:
    """``Cost(flops=..., transcendentals=..., bytes_accessed=...)``, the other fields at their
    defaults, built without the named tuple's keyword handling (most ops' rules make one: a
    fused body's thousands of elementwise ops)."""
    return _new_cost(Cost, (flops, transcendentals, bytes_accessed, *_SIMPLE_REST))


_SIMPLE_REST = ZERO[3:]  # the defaults of the fields after bytes_accessed


def total(costs: list[Cost]) -> Cost:
    """The sum of ``costs``: the same as adding them one by one, without the intermediate sums."""
    flops = transcendentals = bytes_accessed = comm_bytes = mxu_flops = 0.0
    unknown = lower_bound = upper_bound = False
    notes: dict[str, None] = {}  # in order, each once (a tuple's `in` would make this quadratic)
    # Unpacked rather than read field by field (a fused body sums one cost per op); a zero cost
    # (a name or a view) adds nothing: every sum starts at +0.0, and x + 0.0 is x for any other x.
    for cost in costs:
        if cost is ZERO:
            continue
        f, t, b, c, u, n, lb, m, ub = cost  # Cost's nine fields, in their order
        flops += f
        transcendentals += t
        bytes_accessed += b
        comm_bytes += c
        mxu_flops += m
        unknown = unknown or u
        lower_bound = lower_bound or lb
        upper_bound = upper_bound or ub
        if n:
            notes.update(dict.fromkeys(n))
    return _new_cost(Cost, (
        flops, transcendentals, bytes_accessed, comm_bytes, unknown, _at_most(notes), lower_bound,
        mxu_flops, upper_bound,
    ))  # fmt: skip


MAX_NOTES = 16  # per cost: a body of 100k distinct opaque calls must not give every caller 100k
# The note of a cost flagged ``lower_bound``: kept however many notes a sum gathers.
UNKNOWN_TRIP_COUNT = "unknown trip count: loop body counted once (lower bound)"


def _at_most(notes: dict[str, None]) -> tuple[str, ...]:
    """The notes, the first ``MAX_NOTES`` of them and the lower-bound one, and a count of the
    rest (so that a summed cost stays small, whatever the body it sums)."""
    if len(notes) <= MAX_NOTES:
        return tuple(notes)
    first = list(notes)[:MAX_NOTES]
    short = [UNKNOWN_TRIP_COUNT] if UNKNOWN_TRIP_COUNT in notes else []
    kept = dict.fromkeys([*first, *short])
    more = sum(1 for n in notes if n not in kept and not n.startswith("… and "))
    return (*kept, f"… and {more} more notes") if more else tuple(kept)


def _merge_notes(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
    if not b:
        return a
    if not a:
        return b
    return a + tuple(n for n in b if n not in a)


Rule = Callable[[Instruction, "CostContext"], Cost]
RULES: dict[str, Rule] = {}  # the base model's rules, by opcode
OVERRIDES: dict[str, dict[str, Rule]] = {m: {} for m in COST_MODELS if m != BASE_MODEL}


def rule(*opcodes: str, model: str = BASE_MODEL) -> Callable[[Rule], Rule]:
    """Register a cost rule for the given opcodes: XLA's (the base), or ``model``'s override of
    XLA's rule (which must already be registered: an override replaces, it never adds)."""
    if model != BASE_MODEL and model not in OVERRIDES:
        raise ValueError(f"no cost model '{model}' (one of {COST_MODELS})")
    table = RULES if model == BASE_MODEL else OVERRIDES[model]

    def register(fn: Rule) -> Rule:
        for opcode in opcodes:
            if opcode in table:
                raise ValueError(f"two cost rules for '{opcode}' (model {model})")
            if table is not RULES and opcode not in RULES:
                raise ValueError(f"model {model} overrides '{opcode}', which has no base rule")
            table[opcode] = fn
        return fn

    return register


def rule_for(opcode: str, rules: dict[str, Rule] | None = None) -> Rule | None:
    """The rule registered for an opcode in ``rules`` (the base's by default); async wrappers
    ("<op>-start", "-update", "-done") share one."""
    rules = RULES if rules is None else rules
    fn = rules.get(opcode)
    if fn is None and "-" in opcode:
        fn = rules.get("*-" + opcode.rsplit("-", 1)[1])
    return fn


@dataclass(frozen=True)
class CostModel:
    """A cost model: its name and its hooks, the differences from XLA that are no one opcode's.

    Every hook is off in the base model (XLA's behaviour); a field's comment says what turning it
    on changes. Per-opcode differences are not here: they are override rules (:func:`rule`)."""

    name: str
    # A TPU array with a tiled layout is sized as stored, its minor dimensions rounded up to the
    # first tile (as libtpu's cost analysis does); XLA's counted elements up to jaxlib 0.11.1 (the
    # base model sizes as the installed XLA does: cost.xla_sizes).
    pad_to_tiles: bool = False
    # An op no rule knows is charged its default bytes (operands + result), flagged unknown;
    # XLA charges it nothing.
    unruled_op_bytes: bool = False
    # A while loop's body runs its trip count (XLA's known_trip_count, else inferred from the
    # counter; unknown: once, flagged lower bound) and its condition one more; XLA counts each once.
    loop_trip_counts: bool = False
    # The walk opens a conditional: its branches' ops are rows, the heaviest counted, the others
    # listed with count 0; XLA prices a conditional as one row, its branches' maximum.
    open_conditionals: bool = False
    # A fusion result (or tuple element) updated in place (inplace.in_place: a
    # dynamic-update-slice or scatter of a parameter, through bitcasts and nested fusions) writes
    # only its updates, and a parameter a scatter combines into is read only where it combines; a
    # result that is a parameter returned unchanged into the operand it aliases moves nothing (an
    # async collective fusion's buffers, passed on); XLA sees only a dynamic-update-slice root.
    fusion_in_place: bool = False
    # A fusion parameter is read at most once (min(XLA's bytes, its size)), however many
    # broadcast or reshape users XLA charges a re-read for.
    fusion_parameter_read_once: bool = False
    # A fusion parameter read through a view (bitcast, reshape, ...) that is not the root is read as
    # the view is, and one passed to a nested fusion is followed into it (scaled by the share of the
    # nested result its users slice); XLA stops at the view and looks at the nested fusion's users.
    # A gather reads only the rows it gathers, through a convert too (an embedding lookup reads its
    # tokens' rows, not the table: measured on an H100); XLA charges the whole operand. A pad is
    # read where the padded value is, at the parameter's share of it: a window sliced out of a
    # padded operand (a collective matmul's ring chunk) reads only that window.
    fusion_follow_reads: bool = False


MODELS: dict[str, CostModel] = {
    "xla": CostModel("xla"),
    "roofline": CostModel(
        "roofline",
        pad_to_tiles=True,
        unruled_op_bytes=True,
        loop_trip_counts=True,
        open_conditionals=True,
        fusion_in_place=True,
        fusion_parameter_read_once=True,
        fusion_follow_reads=True,
    ),
}


class Override(NamedTuple):
    """One place where a model differs from XLA: an opcode's rule, or a hook of the model."""

    kind: str  # "rule" or "hook"
    name: str  # the opcode, or the hook's field name
    summary: str  # the override rule's docstring's first sentence, or the hook's comment
    rule: Rule | None = None  # the override rule (None for a hook)


def rules_of(model: str) -> dict[str, Rule]:
    """``model``'s rule table: the base's, with its overrides in place."""
    return {**RULES, **OVERRIDES.get(model, {})}


def shape_sizes(model: str) -> ShapeSizes:
    """How ``model`` sizes shapes: the base model as the installed XLA's cost analysis does
    (:mod:`~hlo_roofline.cost.xla_sizes`), the others by their ``pad_to_tiles`` hook."""
    if model == BASE_MODEL:
        return xla_sizes.installed()
    return ShapeSizes(tiled=MODELS[model].pad_to_tiles, tuple_pointer_bytes=POINTER_BYTES)


def overrides(model: str = "roofline") -> list[Override]:
    """Where ``model`` differs from XLA's HloCostAnalysis (the base model): its override rules,
    by opcode, then the hooks it turns on. Empty for the base itself."""
    import inspect

    found = [
        Override("rule", opcode, _first_sentence(inspect.getdoc(fn) or ""), fn)
        for opcode, fn in sorted(OVERRIDES.get(model, {}).items())
    ]
    base, spec = MODELS[BASE_MODEL], MODELS[model]
    comments = _hook_comments()
    found += [
        Override("hook", name, comments.get(name, ""))
        for name in CostModel.__dataclass_fields__
        if name != "name" and getattr(spec, name) != getattr(base, name)
    ]
    return found


def overrides_markdown(model: str = "roofline") -> str:
    """:func:`overrides` as docs/cost-model.md lists them: a table, opcodes sharing a rule on one
    row (``tests/test_xla_parity.py`` holds the page to this)."""
    lines = ["| override | kind | what the model does instead of XLA |", "|---|---|---|"]
    grouped: dict[object, list[Override]] = {}
    for item in overrides(model):
        grouped.setdefault(item.rule if item.kind == "rule" else item.name, []).append(item)
    for items in grouped.values():
        first = items[0]
        names = ", ".join(f"`{i.name}`" for i in items)
        where = "opcode" if first.kind == "rule" else "hook"
        lines.append(f"| {names} | {where} | {first.summary.replace('|', '/')} |")
    return "\n".join(lines)


def _first_sentence(text: str) -> str:
    flat = " ".join(text.split())
    end = flat.find(". ")
    return flat if end < 0 else flat[: end + 1]


def _hook_comments() -> dict[str, str]:
    """Each hook's comment, as written above its field in :class:`CostModel`."""
    import inspect

    comments: dict[str, str] = {}
    pending: list[str] = []
    try:
        source = inspect.getsource(CostModel)
    except OSError:  # installed without its sources: the hooks are listed, unexplained
        return comments
    for line in source.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            pending.append(stripped.lstrip("# "))
        elif ":" in stripped and pending:
            comments[stripped.split(":")[0]] = " ".join(pending)
            pending = []
        else:
            pending = []
    return comments


# Bytes per element as XLA's shape-size function sees them (sub-byte types occupy a byte unless the
# layout packs them with E(bits)).
_ELEMENT_BYTES = {dtype: max(1, math.ceil(size)) for dtype, size in DTYPE_BYTES.items()}
# A pointer: an opaque value, and a tuple table's entry as jaxlib up to 0.11.1 sized it.
POINTER_BYTES = 8


def array_bytes(shape: Shape, pad_to_tiles: bool = False) -> int:
    """Bytes of one array: elements × element size, packed sub-byte types, dynamic-size metadata.

    With ``pad_to_tiles`` the minor dimensions are rounded up to the layout's first tile, which is
    what a TPU actually stores and moves.
    """
    layout = shape.layout
    elements = math.prod(shape.dims)
    if pad_to_tiles and layout is not None and layout.tiles:
        elements = tiled_elements(shape.dims, layout)
    bits = layout.element_size_bits if layout is not None else 0
    size = -(-elements * bits // 8) if bits else elements * _ELEMENT_BYTES[shape.dtype]
    if shape.dynamic:
        size += 4 * len(shape.dims)
    return size


def element_bytes(shape: Shape) -> float:
    """Bytes per element of an array (of a tuple's first leaf) as stored: a packed sub-byte type
    (``E(4)`` in its layout) is a fraction of a byte; 0 for a token or an opaque value."""
    leaves = shape.leaves()
    if not leaves:
        return 0.0
    leaf = leaves[0]
    bits = leaf.layout.element_size_bits if leaf.layout is not None else 0
    return bits / 8 if bits else float(_ELEMENT_BYTES.get(leaf.dtype, 0))


# How many computations' users a walk keeps indexed at once. A fused body's are asked while its
# fusion is priced (and its nested bodies'); kept for every body they were a third of what a large
# module's walk holds. GPT-2's step indexes about a thousand.
USERS_KEPT = 2048
# How many fused computations' costs a walk remembers before it forgets them and what its rules
# memoized (:meth:`CostContext.trim`). GPT-2's step remembers 1,162.
COSTS_KEPT = 2048


@dataclass
class CostContext:
    """What a rule may consult: the module, the model, shape sizes and callee costs."""

    module: Module
    model: str = "roofline"
    pad_to_tiles: bool = False
    tuple_pointer_bytes: int = POINTER_BYTES
    _computation_costs: dict[str, Cost] = field(default_factory=dict)
    _users: dict[str, dict[int, tuple[Instruction, ...]]] = field(default_factory=dict)
    _in_flight: frozenset[str] | None = None
    # What a rule works out once per instruction or computation and reuses from every caller, so
    # that a body called from many places (or nested fusions sharing bodies) is walked once.
    memo: dict[tuple, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # The model's hooks and rule table, looked up once (a rule reads them per op).
        self.cost_model: CostModel = MODELS[self.model]
        self.rules: dict[str, Rule] = rules_of(self.model)
        # opcode -> its rule (or None), as rule_for finds it: looked up once per opcode, not per op
        self._dispatch: dict[str, Rule | None] = {}

    def size(self, shape: Shape) -> int:
        """XLA's GetShapeSize: a tuple is its pointer table, a token 0, an opaque 8. Kept on the
        shape (its module's instructions share one per spelling), as stored and as tiled; a
        tuple's is not (its pointers' size is the context's)."""
        size = shape._tiled_bytes if self.pad_to_tiles else shape._bytes
        if size is None:
            if shape.dtype == "tuple":
                return self.tuple_pointer_bytes * len(shape.tuple_shapes)
            if shape.dtype == "token":
                size = 0
            elif shape.dtype == "opaque":
                size = POINTER_BYTES
            else:
                size = array_bytes(shape, self.pad_to_tiles)
            object.__setattr__(shape, "_tiled_bytes" if self.pad_to_tiles else "_bytes", size)
        return size

    def output_bytes(self, shape: Shape) -> int:
        """Bytes written for a result: the sum of its array leaves."""
        if shape.dtype != "tuple":
            return self.size(shape)
        return sum(self.size(leaf) for leaf in shape.leaves())

    def operand_bytes(self, instr: Instruction) -> int:
        size, tiled = self.size, self.pad_to_tiles  # the slot read inline: nearly every op's
        total = 0
        for op in instr.operands:
            shape = op.shape
            known = shape._tiled_bytes if tiled else shape._bytes
            total += size(shape) if known is None else known
        return total

    def read_and_written(self, instr: Instruction, result: Shape) -> int:
        """Every operand read once and ``result`` written: for ops whose result shape also holds
        what is not moved again (an async start's copy of its operands, a library call's scratch)."""
        return self.operand_bytes(instr) + self.output_bytes(result)

    def default_bytes(self, instr: Instruction) -> int:
        """XLA's default: every operand read once (a tuple operand is its pointer table) + outputs.
        (``output_bytes`` + ``operand_bytes``, written out: most rules of most ops run this.)"""
        tiled = self.pad_to_tiles
        shape = instr.shape
        if shape.dtype == "tuple":
            total = self.output_bytes(shape)
        else:
            total = shape._tiled_bytes if tiled else shape._bytes
            if total is None:
                total = self.size(shape)
        for op in instr.operands:
            shape = op.shape
            known = shape._tiled_bytes if tiled else shape._bytes
            total += self.size(shape) if known is None else known
        return total

    def cost(self, instr: Instruction) -> Cost:
        """The cost of one execution of ``instr`` (callees included)."""
        try:
            fn = self._dispatch[instr.opcode]
        except KeyError:
            fn = self._dispatch[instr.opcode] = rule_for(instr.opcode, self.rules)
        if fn is None:
            return Cost(
                bytes_accessed=self.default_bytes(instr)
                if self.cost_model.unruled_op_bytes
                else 0.0,
                unknown=True,
                notes=(f"no cost rule for opcode '{instr.opcode}'",),
            )
        return fn(instr, self)

    def in_flight_channels(self) -> frozenset[str]:
        """Channels of collectives launched by TPU async-collective starts (memoized)."""
        if self._in_flight is None:
            self._in_flight = attrs.in_flight_channels(self.module)
        return self._in_flight

    def users(self, comp: Computation) -> dict[int, tuple[Instruction, ...]]:
        """``id(instruction) -> its distinct users`` within one computation (memoized)."""
        kept = self._users
        users = kept.get(comp.name)
        if users is None:
            if len(kept) >= USERS_KEPT:  # the oldest index goes (made again if asked again)
                del kept[next(iter(kept))]
            users = kept[comp.name] = users_of(comp)
        return users

    def trim(self) -> None:
        """Forget the computations' costs and the rules' memos once they are many: all are worked
        out again, the same, if asked again. Only between two ops (no rule half way through)."""
        if len(self._computation_costs) > COSTS_KEPT:
            self._computation_costs.clear()
            self.memo.clear()

    def computation(self, comp: Computation) -> Cost:
        """Sum of the costs of every instruction of a computation (memoized)."""
        cached = self._computation_costs.get(comp.name)
        if cached is None:
            rule_of = self._dispatch.get  # cost() written out for the rules already looked up
            costs = [
                self.cost(instr) if (fn := rule_of(instr.opcode)) is None else fn(instr, self)
                for instr in comp.instructions
            ]
            cached = self._computation_costs[comp.name] = total(costs)
        return cached


def users_of(comp: Computation) -> dict[int, tuple[Instruction, ...]]:
    """``id(instruction) -> its distinct users`` within ``comp``, in order (an op reading a value
    twice is one user of it). A user's reads of one value are consecutive, so the last user listed
    is the only one to compare with (cheaper than de-duplicating each op's operands). Tuples (a
    fused body's users live as long as the walk; a list's spare room is a third of its memory): a
    value's first user makes a 1-tuple, a second a list, which becomes a tuple at the end."""
    users: dict[int, tuple[Instruction, ...] | list[Instruction]] = {}
    get = users.get
    grown: list[int] = []  # the values whose users became a list
    for instr in comp.instructions:
        operands = instr.operands
        if len(operands) == 1:  # most ops: no repeat to look for
            key = id(operands[0])
            found = get(key)
            if found is None:
                users[key] = (instr,)
            elif found.__class__ is tuple:
                users[key] = [*found, instr]
                grown.append(key)
            else:
                found.append(instr)
            continue
        for op in operands:
            key = id(op)
            found = get(key)
            if found is None:
                users[key] = (instr,)
            elif found[-1] is instr:
                continue
            elif found.__class__ is tuple:
                users[key] = [*found, instr]
                grown.append(key)
            else:
                found.append(instr)
    for key in grown:
        users[key] = tuple(users[key])
    return users  # every list became a tuple above


def callee(instr: Instruction, ctx: CostContext, key: str):
    """The computation an attribute such as ``to_apply=`` or ``body=`` names."""
    value = instr.attrs[key]
    return ctx.module.computations[value.strip("{} ").split(",")[0].strip().lstrip("%")]
