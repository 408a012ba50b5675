"""The checks of a parsed module that are not about its text's syntax, as XLA's verifier runs after
its parser: a computation's parameters numbered 0..n-1, the computations an op cannot do without,
callers and callees that agree on shapes, and a call graph without cycles.

The parser calls these as it goes, where the first error in the text is the one reported; each
points at the line of the instruction that breaks the rule.
"""

from __future__ import annotations

import itertools
import re

from hlo_roofline.hlo.attrs import conv_dims, dot_dims, int_attr, ints, window
from hlo_roofline.hlo.errors import SourceLine, line_text
from hlo_roofline.hlo.ir import Computation, Instruction, Shape

# Attributes an opcode cannot do without: XLA's parser rejects the op when they are missing.
REQUIRED_CALLEES = {
    "fusion": ("calls",), "while": ("body", "condition"), "call": ("to_apply",),
    "reduce": ("to_apply",), "reduce-window": ("to_apply",), "map": ("to_apply",),
    "scatter": ("to_apply",), "select-and-scatter": ("select", "scatter"),
    "all-reduce": ("to_apply",), "reduce-scatter": ("to_apply",), "async-start": ("calls",),
}  # fmt: skip
CALLER_OPCODES = frozenset({*REQUIRED_CALLEES, "conditional"})  # checked even without callees


def check_parameter_numbers(parameters: list[Instruction], text: str) -> list[Instruction]:
    """A computation's parameters are numbered 0..n-1, each once (callers pass them by number).
    Returns them by number (the computation's ``parameters``, found here once)."""
    count = len(parameters)
    ordered: list[Instruction | None] = [None] * count
    for param in parameters:
        number = int(param.payload) if len(param.payload) < 19 else count
        if number >= count or ordered[number] is not None:
            line = SourceLine(param.line, line_text(text, param.line))
            problem = "used twice" if number < count else f"of {count} parameters"
            col = line.text.find("parameter(")
            raise line.error(f"parameter number {number} {problem}", max(col + 10, 0))
        ordered[number] = param
    return ordered  # type: ignore[return-value]  # every place filled above


def check_caller(
    instr: Instruction,
    attrs: dict[str, str],
    number: int,
    text: str,
    agree: dict[tuple[int, int], bool],
) -> None:
    """An op that calls computations, once they are linked (``instr.called``; ``attrs`` are its
    attributes): the callees it cannot do without are named, and callee and caller agree on
    shapes (``agree`` remembers pairs of shapes compared across calls)."""
    for key in REQUIRED_CALLEES.get(instr.opcode, ()):
        if key not in attrs:
            raise SourceLine(number, line_text(text, number)).error(
                f"{instr.opcode} needs {key}=", 0
            )
    if instr.opcode == "conditional" and not instr.called:
        line = SourceLine(number, line_text(text, number))
        raise line.error("conditional needs branch_computations=", 0)
    if instr.opcode in _PASSES_OPERANDS and instr.called:
        _check_call(instr, number, text, agree)


# Ops whose callee receives their operands as its parameters and whose result is the callee's
# result: XLA requires the shapes to agree, and the cost rules follow values across the boundary
# by parameter number. (Not async starts: a TPU SparseCore offload's ``call-start()`` passes its
# computation's parameters another way.)
_PASSES_OPERANDS = frozenset({"fusion", "call", "while", "conditional"})


def _compatible(a: Shape, b: Shape, fp: bool = False) -> bool:
    """Same element type, dimensions and tuple structure; layouts may differ (XLA's Compatible).
    With ``fp``, floating-point types may differ too (its CompatibleIgnoringFpPrecision)."""
    if a is b:
        return True
    if a.dims != b.dims or len(a.tuple_shapes) != len(b.tuple_shapes):
        return False
    if a.dtype != b.dtype and not (fp and _same_type(a.dtype, b.dtype)):
        return False
    return all(_compatible(x, y, fp) for x, y in zip(a.tuple_shapes, b.tuple_shapes, strict=True))


def _check_call(
    instr: Instruction, number: int, text: str, agree: dict[tuple[int, int], bool]
) -> None:
    """The callee's parameters take the caller's operands; its root gives the caller's result.
    ``agree`` remembers pairs of shapes compared (parsed shapes are shared objects)."""

    def compatible(a: Shape, b: Shape) -> bool:
        key = (id(a), id(b))
        found = agree.get(key)
        if found is None:
            found = agree[key] = _compatible(a, b)
        return found

    opcode = instr.opcode
    if opcode == "while":
        if len(instr.called) != 2:
            return  # body= and condition= naming one computation: nothing else to compare
        body, condition = instr.called
        plan = [(body, instr.operands, instr.shape), (condition, instr.operands, None)]
        root = condition.root
        if root is not None and (root.shape.dtype != "pred" or root.shape.dims):
            line = SourceLine(number, line_text(text, number))
            message = f"condition %{condition.name} returns {root.shape}, not pred[]"
            raise line.error(message, max(line.text.find("condition="), 0))
        if not compatible(instr.shape, instr.operands[0].shape):
            _call_error(instr, number, text, "a while loop's result must have its operand's shape")
    elif opcode == "conditional":
        branches = instr.called
        if len(instr.operands) != len(branches) + 1:
            message = (
                f"conditional with {len(branches)} branches takes {len(branches) + 1} operands"
            )
            _call_error(instr, number, text, f"{message}, not {len(instr.operands)}")
        plan = [(b, instr.operands[k + 1 : k + 2], instr.shape) for k, b in enumerate(branches)]
    else:
        plan = [(instr.called[0], instr.operands, instr.shape)]
    for callee, operands, result in plan:
        params = callee.parameters
        if len(params) != len(operands):
            message = f"%{callee.name} takes {len(params)} parameters, given {len(operands)}"
            _call_error(instr, number, text, message)
        for param, operand in zip(params, operands, strict=True):
            if param.shape is not operand.shape and not compatible(param.shape, operand.shape):
                message = (
                    f"parameter {param.payload} of %{callee.name} is {param.shape}, "
                    f"but %{operand.name} passed to it is {operand.shape}"
                )
                _call_error(instr, number, text, message, operand.name)
        if (
            result is not None
            and callee.root is not None
            and callee.root.shape is not result
            and not compatible(callee.root.shape, result)
        ):
            message = f"%{callee.name} returns {callee.root.shape}, not the {opcode}'s {result}"
            _call_error(instr, number, text, message)


def _call_error(
    instr: Instruction, number: int, text: str, message: str, operand: str | None = None
) -> None:
    line = SourceLine(number, line_text(text, number))
    col = line.text.find("%" + operand, line.text.find("(")) if operand else -1
    if col < 0:
        col = line.text.find(instr.opcode + "(", line.text.find("="))
    raise line.error(message, max(col, 0))


def check_acyclic(callers: list[tuple[Instruction, int]], text: str) -> None:
    """Reject a computation that calls itself, directly or not (XLA's call graph is acyclic, and
    everything that walks it relies on that)."""
    if all(callee.line < instr.computation.line for instr, _ in callers for callee in instr.called):
        return  # every callee written above its caller (XLA prints them so): no path comes back
    calls: dict[int, list[tuple[Computation, Instruction, int]]] = {}
    for instr, number in callers:
        for callee in instr.called:
            calls.setdefault(id(instr.computation), []).append((callee, instr, number))
    done: set[int] = set()
    for instr, _ in callers:
        root = instr.computation
        if id(root) in done:
            continue
        # Depth-first, without recursion: a path of (computation, its calls not yet followed).
        path = [(root, iter(calls.get(id(root), ())))]
        on_path = {id(root)}
        while path:
            comp, pending = path[-1]
            step = next(pending, None)
            if step is None:
                path.pop()
                on_path.discard(id(comp))
                done.add(id(comp))
                continue
            callee, caller, number = step
            if id(callee) in on_path:
                line = SourceLine(number, line_text(text, number))
                message = f"computation '%{callee.name}' calls itself (through %{caller.name})"
                raise line.error(message, max(line.text.find("%" + callee.name), 0))
            if id(callee) not in done:
                path.append((callee, iter(calls.get(id(callee), ()))))
                on_path.add(id(callee))


# -- shapes: what the cost model reads must agree with itself (XLA's shape inference) -------------

# Ops whose operands have the result's dimensions (XLA's elementwise ops; the element type may
# differ: compare gives pred, convert another type). ``select`` and ``clamp`` may take a scalar.
ELEMENTWISE = frozenset({
    "abs", "add", "and", "atan2", "cbrt", "ceil", "clz", "compare", "complex", "convert", "copy",
    "cos", "count-leading-zeros", "divide", "erf", "exp", "exponential", "exponential-minus-one",
    "expm1", "floor", "imag", "is-finite", "log", "log-plus-one", "log1p", "logistic", "maximum",
    "minimum", "multiply", "negate", "not", "or", "popcnt", "power", "real", "reduce-precision",
    "remainder", "round-nearest-afz", "round-nearest-even", "rsqrt", "shift-left",
    "shift-right-arithmetic", "shift-right-logical", "sign", "sin", "sqrt", "stochastic-convert",
    "subtract", "tan", "tanh", "xor", "select", "clamp",
})  # fmt: skip
# The operands that may be scalars: select's predicate, clamp's bounds.
_SCALAR_OPERANDS_OK = {"select": (0,), "clamp": (0, 2)}
# Ops whose operands from the given one on have the result's element type (compare's two operands
# have one type, its result is pred). Floating-point types may differ: XLA's verifier allows mixed
# precision where a backend does (a TPU module adds bf16 to f32 after its normalization passes).
_SAME_TYPE = {
    **dict.fromkeys((
        "add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "remainder", "and",
        "or", "xor", "shift-left", "shift-right-arithmetic", "shift-right-logical", "atan2", "clamp",
    ), 0),
    "select": 1,
}  # fmt: skip


def _same_type(a: str, b: str) -> bool:
    """One element type, or two floating-point ones (XLA's SameElementTypeIgnoringFpPrecision)."""
    return a == b or ((a[0] == "f" or a == "bf16") and (b[0] == "f" or b == "bf16"))


class _Refused(Exception):
    """A shape rule broken: the message and the attribute (or operand) it points at."""

    def __init__(self, message: str, key: str = "") -> None:
        super().__init__(message)
        self.message, self.key = message, key


# How many instructions that passed are remembered (their attribute text with each): a module whose
# metadata makes every text distinct remembers no more than this.
_PASSED_KEPT = 4096


def check_shapes(computations, text: str) -> None:
    """Every instruction whose shapes the cost model reads agrees with its operands, as XLA's shape
    inference has it: dot and convolution dimension numbers, elementwise operands, reduce
    dimensions, slice, pad and concatenate bounds, gather and scatter dimension numbers, tuple
    indices, transposes, broadcasts, reshapes, dynamic slices and reduce windows, tuples, iota,
    reverse, sort, map and the collectives' result shapes, and element types where an op keeps
    them. The first that does not is an :class:`HloParseError` at its line and attribute."""
    rules = _SHAPE_RULES
    # What a rule reads of an instruction is its opcode, its shape, its operands' shapes and its
    # attributes: an instruction equal to one that passed in all four passes too. Shapes are
    # compared by identity (the parser shares one object per spelling, all alive here) and
    # attributes by their text (where it is not split yet); a module repeats a few hundred
    # such instructions over thousands of lines.
    passed: set[tuple] = set()
    for computation in computations.values():
        for instr in computation.instructions:
            rule = rules.get(instr.opcode)
            if rule is None:
                continue
            shape = instr.shape
            if rule is _elementwise and all(o.shape is shape for o in instr.operands):
                continue  # most ops of a large module: operands of its very shape
            # an elementwise op's check compares dimensions: cheaper than its key (a convert)
            attr_text = instr.attr_text if rule is not _elementwise else None
            if attr_text is not None:
                key = (instr.opcode, id(shape), attr_text, *[id(o.shape) for o in instr.operands])
                if key in passed:
                    continue
            try:
                rule(instr)
                if attr_text is not None and len(passed) < _PASSED_KEPT:
                    passed.add(key)
            except _Refused as refused:
                line = SourceLine(instr.line, line_text(text, instr.line))
                col = line.text.find(refused.key + "=") if refused.key else -1
                if col < 0:
                    col = line.text.find(instr.opcode + "(", max(line.text.find("="), 0))
                raise line.error(f"%{instr.name}: {refused.message}", max(col, 0)) from None
            except (ValueError, IndexError, KeyError) as exc:  # an attribute that does not read
                line = SourceLine(instr.line, line_text(text, instr.line))
                col = line.text.find(instr.opcode + "(", max(line.text.find("="), 0))
                message = f"%{instr.name}: malformed {instr.opcode} ({exc})"
                raise line.error(message, max(col, 0)) from None


def _array(instr: Instruction, what: str) -> tuple[int, ...] | None:
    shape = instr.shape
    return shape.dims if shape.is_array else None


def _operand_dims(instr: Instruction, k: int) -> tuple[int, ...] | None:
    if k >= len(instr.operands):
        raise _Refused(f"{instr.opcode} needs at least {k + 1} operands, has {len(instr.operands)}")
    shape = instr.operands[k].shape
    return shape.dims if shape.is_array else None


def _in_range(dims: tuple[int, ...], rank: int, key: str, what: str) -> None:
    for d in dims:
        if not 0 <= d < rank:
            raise _Refused(f"{key}={{{_spelled(dims)}}}: {d} is not a dimension of {what}", key)
    if len(set(dims)) != len(dims):
        raise _Refused(f"{key}={{{_spelled(dims)}}} names a dimension twice", key)


def _spelled(dims) -> str:
    return ",".join(map(str, dims))


def _result_is(instr: Instruction, want: tuple[int, ...], key: str = "") -> None:
    have = _array(instr, "result")
    if have is not None and tuple(have) != tuple(want):
        raise _Refused(
            f"its result is [{_spelled(have)}] but its operands give [{_spelled(want)}]", key
        )


def _dot(instr: Instruction) -> None:
    if "sparsity" in instr.attrs:  # a sparse dot's lhs holds half its contracting dimension
        return
    lhs, rhs = _operand_dims(instr, 0), _operand_dims(instr, 1)
    if lhs is None or rhs is None:
        return
    d = dot_dims(instr)
    _in_range(d.lhs_batch + d.lhs_contracting, len(lhs), "lhs_contracting_dims", "its lhs")
    _in_range(d.rhs_batch + d.rhs_contracting, len(rhs), "rhs_contracting_dims", "its rhs")
    if len(d.lhs_batch) != len(d.rhs_batch):
        raise _Refused("lhs_batch_dims and rhs_batch_dims differ in number", "lhs_batch_dims")
    if len(d.lhs_contracting) != len(d.rhs_contracting):
        raise _Refused(
            "lhs_contracting_dims and rhs_contracting_dims differ in number", "lhs_contracting_dims"
        )
    for key, a, b in (("lhs_batch_dims", d.lhs_batch, d.rhs_batch),
                      ("lhs_contracting_dims", d.lhs_contracting, d.rhs_contracting)):  # fmt: skip
        for i, j in zip(a, b, strict=True):
            if lhs[i] != rhs[j]:
                raise _Refused(
                    f"{key}: lhs dimension {i} has {lhs[i]} elements, rhs dimension {j} has "
                    f"{rhs[j]}",
                    key,
                )
    lhs_free = [lhs[i] for i in range(len(lhs)) if i not in d.lhs_batch + d.lhs_contracting]
    rhs_free = [rhs[i] for i in range(len(rhs)) if i not in d.rhs_batch + d.rhs_contracting]
    _result_is(
        instr, (*(lhs[i] for i in d.lhs_batch), *lhs_free, *rhs_free), "lhs_contracting_dims"
    )


def _convolution(instr: Instruction) -> None:
    lhs, rhs = _operand_dims(instr, 0), _operand_dims(instr, 1)
    out = _array(instr, "result")
    labels = instr.attrs.get("dim_labels", "")
    if lhs is None or rhs is None or out is None or not labels:
        return
    lhs_labels, _, rest = labels.partition("_")
    rhs_labels, _, out_labels = rest.partition("->")
    for spelled, dims, what in ((lhs_labels, lhs, "lhs"), (rhs_labels, rhs, "rhs"),
                                (out_labels, out, "result")):  # fmt: skip
        if len(spelled) != len(dims):
            raise _Refused(f"dim_labels={labels}: {len(spelled)} labels for its {len(dims)}-"
                           f"dimensional {what}", "dim_labels")  # fmt: skip
    c = conv_dims(instr)
    groups = int_attr(instr, "feature_group_count", 1)
    batch_groups = int_attr(instr, "batch_group_count", 1)
    if groups < 1 or batch_groups < 1:
        raise _Refused("group counts must be positive", "feature_group_count")
    if lhs[c.input_feature] != rhs[c.kernel_input_feature] * groups:
        raise _Refused(
            f"its input has {lhs[c.input_feature]} features, its kernel {rhs[c.kernel_input_feature]}"
            f" input features × {groups} groups", "dim_labels"
        )  # fmt: skip
    if out[c.output_feature] != rhs[c.kernel_output_feature]:
        raise _Refused(f"its result has {out[c.output_feature]} features, its kernel "
                       f"{rhs[c.kernel_output_feature]}", "dim_labels")  # fmt: skip
    if out[c.output_feature] % batch_groups:
        raise _Refused(f"its result's {out[c.output_feature]} features are not a multiple of "
                       f"batch_group_count={batch_groups}", "batch_group_count")  # fmt: skip
    if (
        lhs[c.input_batch] % batch_groups
        or out[c.output_batch] != lhs[c.input_batch] // batch_groups
    ):
        raise _Refused(f"its result's batch {out[c.output_batch]} is not its input's "
                       f"{lhs[c.input_batch]} ÷ {batch_groups}", "dim_labels")  # fmt: skip
    spatial = window(instr)
    if len(spatial) != len(c.input_spatial):
        raise _Refused(
            f"window has {len(spatial)} dimensions, its input {len(c.input_spatial)} spatial",
            "window" if spatial else "dim_labels",
        )
    for k, w in enumerate(spatial):
        size = lhs[c.input_spatial[k]]
        if rhs[c.kernel_spatial[k]] != w.size:
            raise _Refused(f"window size {w.size} is not its kernel's {rhs[c.kernel_spatial[k]]}",
                           "window")  # fmt: skip
        want = _windowed(size, w)
        if out[c.output_spatial[k]] != want:
            raise _Refused(f"spatial dimension {k} of its result is {out[c.output_spatial[k]]}, "
                           f"its window gives {want}", "window")  # fmt: skip


def _windowed(size: int, w) -> int:
    """A dimension of ``size`` after a window (XLA's InferWindowOutputShape)."""
    if w.stride < 1 or w.base_dilation < 1 or w.window_dilation < 1:
        raise _Refused("window strides and dilations must be positive", "window")
    base = (size - 1) * w.base_dilation + 1 if size else 0
    padded = base + w.pad_low + w.pad_high
    span = (w.size - 1) * w.window_dilation + 1 if w.size else 0
    return (padded - span) // w.stride + 1 if padded >= span else 0


def _elementwise(instr: Instruction) -> None:
    out = _array(instr, "result")
    if out is None:
        return
    opcode = instr.opcode
    for k, operand in enumerate(instr.operands):
        shape = operand.shape
        if not shape.is_array or tuple(shape.dims) == tuple(out):
            continue
        if not shape.dims and k in _SCALAR_OPERANDS_OK.get(opcode, ()):
            continue
        raise _Refused(
            f"operand {k} (%{operand.name}) is [{_spelled(shape.dims)}], its result "
            f"[{_spelled(out)}]: an elementwise op's operands have its dimensions"
        )
    first = _SAME_TYPE.get(opcode)
    if first is not None:
        _types_agree(instr.operands[first:], instr.shape.dtype, "its result")
    elif opcode == "compare" and len(instr.operands) == 2:
        a, b = instr.operands
        _types_agree((b,), a.shape.dtype, f"operand 0 (%{a.name})")


def _types_agree(operands, dtype: str, what: str) -> None:
    for operand in operands:
        have = operand.shape.dtype
        if have != dtype and operand.shape.is_array and not _same_type(have, dtype):
            raise _Refused(f"%{operand.name} is {have}, {what} {dtype}: their element types differ")


def _reduce(instr: Instruction) -> None:
    half = len(instr.operands) // 2
    if len(instr.operands) % 2 or not half:
        raise _Refused(f"reduce takes inputs and as many init values, not {len(instr.operands)}")
    dims = ints(instr, "dimensions")
    results = instr.shape.tuple_shapes if instr.shape.is_tuple else (instr.shape,)
    if len(results) != half:
        raise _Refused(f"reduce of {half} inputs gives {len(results)} results")
    for k in range(half):
        source = _operand_dims(instr, k)
        init = instr.operands[half + k].shape
        if source is None:
            continue
        if init.is_array and init.dims:
            raise _Refused(f"init value %{instr.operands[half + k].name} is not a scalar")
        _in_range(dims, len(source), "dimensions", f"its {len(source)}-dimensional input")
        want = tuple(n for i, n in enumerate(source) if i not in dims)
        if results[k].is_array and tuple(results[k].dims) != want:
            raise _Refused(
                f"reducing [{_spelled(source)}] over {{{_spelled(dims)}}} gives [{_spelled(want)}]"
                f", not [{_spelled(results[k].dims)}]", "dimensions"
            )  # fmt: skip


def _slice(instr: Instruction) -> None:
    source = _operand_dims(instr, 0)
    if source is None:
        return
    spec = instr.attrs.get("slice", "")
    parts = re.findall(r"\[([^\]]*)\]", spec)
    if len(parts) != len(source):
        raise _Refused(f"slice has {len(parts)} ranges for a {len(source)}-dimensional operand",
                       "slice")  # fmt: skip
    want = []
    for k, part in enumerate(parts):
        fields = [int(v) for v in part.split(":")]
        start, limit = fields[0], fields[1]
        stride = fields[2] if len(fields) > 2 else 1
        if not 0 <= start <= limit <= source[k] or stride < 1:
            raise _Refused(f"slice [{part}] is outside dimension {k} of {source[k]}", "slice")
        want.append(-(-(limit - start) // stride))
    _result_is(instr, tuple(want), "slice")


def _pad(instr: Instruction) -> None:
    source = _operand_dims(instr, 0)
    if source is None:
        return
    spec = instr.attrs.get("padding", "")
    parts = [p for p in spec.split("x") if p] if spec else []
    if len(parts) != len(source):
        raise _Refused(f"padding has {len(parts)} dimensions for a {len(source)}-dimensional "
                       "operand", "padding")  # fmt: skip
    want = []
    for k, part in enumerate(parts):
        fields = [int(v) for v in part.split("_")]
        low, high = fields[0], fields[1]
        interior = fields[2] if len(fields) > 2 else 0
        if interior < 0:
            raise _Refused(f"padding {part}: interior padding is negative", "padding")
        size = source[k]
        grown = low + high + size + max(size - 1, 0) * interior
        if grown < 0:
            raise _Refused(f"padding {part} leaves dimension {k} negative", "padding")
        want.append(grown)
    _result_is(instr, tuple(want), "padding")


def _concatenate(instr: Instruction) -> None:
    dims = ints(instr, "dimensions")
    shapes = [o.shape.dims for o in instr.operands if o.shape.is_array]
    if len(shapes) != len(instr.operands) or not shapes:
        return
    rank = len(shapes[0])
    if len(dims) != 1 or not 0 <= dims[0] < rank:
        raise _Refused(f"dimensions={{{_spelled(dims)}}} is not one dimension of its operands",
                       "dimensions")  # fmt: skip
    axis = dims[0]
    for k, dims_k in enumerate(shapes):
        if len(dims_k) != rank or any(a != b for i, (a, b) in enumerate(
                zip(dims_k, shapes[0], strict=True)) if i != axis):  # fmt: skip
            raise _Refused(
                f"operand {k} is [{_spelled(dims_k)}], operand 0 [{_spelled(shapes[0])}]: they "
                f"may differ in dimension {axis} alone",
                "dimensions",
            )
    want = list(shapes[0])
    want[axis] = sum(s[axis] for s in shapes)
    _result_is(instr, tuple(want), "dimensions")
    _types_agree(instr.operands, instr.shape.dtype, "its result")


def _gather(instr: Instruction) -> None:
    operand, indices = _operand_dims(instr, 0), _operand_dims(instr, 1)
    out = _array(instr, "result")
    if operand is None or indices is None or out is None:
        return
    offset = ints(instr, "offset_dims")
    collapsed = ints(instr, "collapsed_slice_dims")
    batching = ints(instr, "operand_batching_dims")
    index_map = ints(instr, "start_index_map")
    sizes = ints(instr, "slice_sizes")
    vector_dim = int_attr(instr, "index_vector_dim", len(indices))
    _ascending(offset, "offset_dims")
    _ascending(collapsed, "collapsed_slice_dims")
    _batching(operand, indices, batching, ints(instr, "start_indices_batching_dims"), vector_dim,
              "operand_batching_dims", "start_indices_batching_dims")  # fmt: skip
    if len(sizes) != len(operand):
        raise _Refused(f"slice_sizes has {len(sizes)} sizes for a {len(operand)}-dimensional "
                       "operand", "slice_sizes")  # fmt: skip
    for k, (size, bound) in enumerate(zip(sizes, operand, strict=True)):
        if not 0 <= size <= bound:
            raise _Refused(f"slice size {size} is outside dimension {k} of {bound}", "slice_sizes")
    _in_range(collapsed + batching, len(operand), "collapsed_slice_dims", "its operand")
    _in_range(index_map, len(operand), "start_index_map", "its operand")
    for d in collapsed + batching:
        if sizes[d] > 1:
            raise _Refused(f"collapsed dimension {d} has slice size {sizes[d]}",
                           "collapsed_slice_dims")  # fmt: skip
    vector = _index_vector(indices, vector_dim)
    if len(index_map) != vector:
        raise _Refused(f"start_index_map has {len(index_map)} dimensions, its index vectors "
                       f"{vector}", "start_index_map")  # fmt: skip
    batch = [n for i, n in enumerate(indices) if i != vector_dim]
    window = [sizes[i] for i in range(len(operand)) if i not in collapsed + batching]
    if len(offset) != len(window):
        raise _Refused(f"offset_dims has {len(offset)} dimensions, its slices {len(window)}",
                       "offset_dims")  # fmt: skip
    rank = len(batch) + len(offset)
    _in_range(offset, rank, "offset_dims", f"its {rank}-dimensional result")
    want, windows, batches = [], iter(window), iter(batch)
    for i in range(rank):
        want.append(next(windows) if i in offset else next(batches))
    _result_is(instr, tuple(want), "offset_dims")


def _ascending(dims: tuple[int, ...], key: str) -> None:
    if any(a >= b for a, b in itertools.pairwise(dims)):
        raise _Refused(f"{key}={{{_spelled(dims)}}} is not in ascending order", key)


def _batching(operand, indices, batching, index_batching, vector_dim, key, index_key) -> None:
    """A gather's or scatter's batching dimensions: one of its indices' (not the index vector's)
    for each of its operand's, of the same size."""
    if len(batching) != len(index_batching):
        raise _Refused(f"{key} has {len(batching)} dimensions, {index_key} {len(index_batching)}",
                       key)  # fmt: skip
    _in_range(batching, len(operand), key, "its operand")
    _in_range(index_batching, len(indices), index_key, "its indices")
    for d, i in zip(batching, index_batching, strict=True):
        if i == vector_dim or operand[d] != indices[i]:
            what = "the index vector" if i == vector_dim else f"{indices[i]} indices"
            raise _Refused(f"batching dimension {d} of its operand ({operand[d]}) is paired with "
                           f"dimension {i} of its indices ({what})", index_key)  # fmt: skip


def _index_vector(indices: tuple[int, ...], vector_dim: int) -> int:
    """How many indices each index vector of a gather or scatter holds (1 where
    ``index_vector_dim`` is one past the indices' dimensions: each index a scalar)."""
    if not 0 <= vector_dim <= len(indices):
        raise _Refused(f"index_vector_dim={vector_dim} is outside its indices", "index_vector_dim")
    return indices[vector_dim] if vector_dim < len(indices) else 1


def _scatter(instr: Instruction) -> None:
    count = len(instr.operands)
    if count < 3 or count % 2 == 0:
        raise _Refused(f"scatter takes inputs, indices and as many updates, not {count} operands")
    half = (count - 1) // 2
    operand, indices = _operand_dims(instr, 0), _operand_dims(instr, half)
    if operand is None or indices is None:
        return
    window_dims = ints(instr, "update_window_dims")
    inserted = ints(instr, "inserted_window_dims")
    batching = ints(instr, "input_batching_dims")
    to_operand = ints(instr, "scatter_dims_to_operand_dims")
    vector_dim = int_attr(instr, "index_vector_dim", len(indices))
    _ascending(window_dims, "update_window_dims")
    _ascending(inserted, "inserted_window_dims")
    _batching(operand, indices, batching, ints(instr, "scatter_indices_batching_dims"), vector_dim,
              "input_batching_dims", "scatter_indices_batching_dims")  # fmt: skip
    _in_range(inserted + batching, len(operand), "inserted_window_dims", "its operand")
    _in_range(to_operand, len(operand), "scatter_dims_to_operand_dims", "its operand")
    vector = _index_vector(indices, vector_dim)
    if len(to_operand) != vector:
        raise _Refused(f"scatter_dims_to_operand_dims has {len(to_operand)} dimensions, its index "
                       f"vectors {vector}", "scatter_dims_to_operand_dims")  # fmt: skip
    if len(window_dims) + len(inserted) + len(batching) != len(operand):
        raise _Refused(
            f"update_window_dims ({len(window_dims)}) and inserted_window_dims "
            f"({len(inserted + batching)}) do not add up to its operand's {len(operand)} dimensions",
            "update_window_dims",
        )
    batch = [n for i, n in enumerate(indices) if i != vector_dim]
    kept = [n for i, n in enumerate(operand) if i not in inserted + batching]
    for k in range(half):
        update = _operand_dims(instr, half + 1 + k)
        source = _operand_dims(instr, k)
        if update is None:
            continue
        if source is not None and tuple(source) != tuple(operand):
            raise _Refused(f"input {k} is [{_spelled(source)}], input 0 [{_spelled(operand)}]")
        if len(update) != len(batch) + len(window_dims):
            raise _Refused(
                f"update {k} has {len(update)} dimensions, not {len(batch)} scatter and "
                f"{len(window_dims)} window dimensions",
                "update_window_dims",
            )
        _in_range(window_dims, len(update), "update_window_dims", f"update {k}")
        windows = [update[d] for d in window_dims]
        for d, (size, bound) in enumerate(zip(windows, kept, strict=True)):
            if size > bound:
                raise _Refused(f"update window dimension {d} ({size}) is larger than the "
                               f"operand's {bound}", "update_window_dims")  # fmt: skip
        scattered = [update[d] for d in range(len(update)) if d not in window_dims]
        if scattered != batch:
            raise _Refused(f"update {k}'s scatter dimensions [{_spelled(scattered)}] are not its "
                           f"indices' [{_spelled(batch)}]", "update_window_dims")  # fmt: skip
    results = instr.shape.tuple_shapes if instr.shape.is_tuple else (instr.shape,)
    if len(results) == half and results[0].is_array and tuple(results[0].dims) != tuple(operand):
        raise _Refused(f"its result is [{_spelled(results[0].dims)}], its input "
                       f"[{_spelled(operand)}]")  # fmt: skip


def _get_tuple_element(instr: Instruction) -> None:
    if len(instr.operands) != 1:
        raise _Refused(f"get-tuple-element takes one operand, not {len(instr.operands)}")
    source = instr.operands[0].shape
    index = int_attr(instr, "index", -1)
    if not source.is_tuple or not 0 <= index < len(source.tuple_shapes):
        what = f"a tuple of {len(source.tuple_shapes)}" if source.is_tuple else "not a tuple"
        raise _Refused(f"index={index} is outside its operand ({what})", "index")
    element = source.tuple_shapes[index]
    if element is not instr.shape and not _compatible(element, instr.shape):
        raise _Refused(f"element {index} is {element}, its result {instr.shape}", "index")


def _transpose(instr: Instruction) -> None:
    source, out = _operand_dims(instr, 0), _array(instr, "result")
    if source is None or out is None:
        return
    perm = ints(instr, "dimensions")
    if sorted(perm) != list(range(len(source))):
        raise _Refused(f"dimensions={{{_spelled(perm)}}} is not a permutation of its operand's "
                       f"{len(source)} dimensions", "dimensions")  # fmt: skip
    _result_is(instr, tuple(source[d] for d in perm), "dimensions")


def _broadcast(instr: Instruction) -> None:
    source, out = _operand_dims(instr, 0), _array(instr, "result")
    if source is None or out is None:
        return
    dims = ints(instr, "dimensions")
    if len(dims) != len(source):
        raise _Refused(f"dimensions={{{_spelled(dims)}}} maps {len(dims)} dimensions, its operand "
                       f"has {len(source)}", "dimensions")  # fmt: skip
    _in_range(dims, len(out), "dimensions", f"its {len(out)}-dimensional result")
    for k, d in enumerate(dims):
        if out[d] != source[k]:
            raise _Refused(f"operand dimension {k} ({source[k]}) broadcast to result dimension "
                           f"{d} ({out[d]})", "dimensions")  # fmt: skip


def _reshape(instr: Instruction) -> None:
    source = instr.operands[0].shape if instr.operands else None
    if source is None or not source.is_array or not instr.shape.is_array:
        return
    if source.elements != instr.shape.elements:
        raise _Refused(f"reshape of [{_spelled(source.dims)}] ({source.elements} elements) to "
                       f"[{_spelled(instr.shape.dims)}] ({instr.shape.elements})")  # fmt: skip


def _dynamic_slice(instr: Instruction) -> None:
    source = _operand_dims(instr, 0)
    if source is None:
        return
    _index_count(instr, 1, len(source))
    sizes = ints(instr, "dynamic_slice_sizes")
    if len(sizes) != len(source):
        raise _Refused(f"dynamic_slice_sizes has {len(sizes)} sizes for a {len(source)}-"
                       "dimensional operand", "dynamic_slice_sizes")  # fmt: skip
    for k, (size, bound) in enumerate(zip(sizes, source, strict=True)):
        if not 0 <= size <= bound:
            raise _Refused(f"slice size {size} is outside dimension {k} of {bound}",
                           "dynamic_slice_sizes")  # fmt: skip
    _result_is(instr, tuple(sizes), "dynamic_slice_sizes")


def _dynamic_update_slice(instr: Instruction) -> None:
    source, update = _operand_dims(instr, 0), _operand_dims(instr, 1)
    if source is None or update is None:
        return
    _index_count(instr, 2, len(source))
    if len(update) != len(source) or any(u > o for u, o in zip(update, source, strict=True)):
        raise _Refused(f"its update [{_spelled(update)}] does not fit its operand "
                       f"[{_spelled(source)}]")  # fmt: skip
    _result_is(instr, tuple(source))


def _index_count(instr: Instruction, first: int, rank: int) -> None:
    """A dynamic slice's start indices, from operand ``first`` on: one for each of the ``rank``
    dimensions it slices, or one vector of them (the form XLA's parser still reads)."""
    indices = instr.operands[first:]
    if len(indices) == rank:
        return
    if len(indices) == 1 and indices[0].shape.dims == (rank,):
        return
    raise _Refused(f"{len(indices)} start indices for a {rank}-dimensional operand")


def _iota(instr: Instruction) -> None:
    out = _array(instr, "result")
    if out is None:
        return
    d = int_attr(instr, "iota_dimension", 0)
    if not 0 <= d < len(out):
        raise _Refused(f"iota_dimension={d} is not a dimension of its {len(out)}-dimensional "
                       "result", "iota_dimension")  # fmt: skip


def _reverse(instr: Instruction) -> None:
    source = _operand_dims(instr, 0)
    if source is None:
        return
    _in_range(ints(instr, "dimensions"), len(source), "dimensions", "its operand")
    _result_is(instr, tuple(source))


def _sort(instr: Instruction) -> None:
    first = _operand_dims(instr, 0)
    if first is None:
        return
    _in_range(ints(instr, "dimensions"), len(first), "dimensions", "its operand")
    results = instr.shape.tuple_shapes if instr.shape.is_tuple else (instr.shape,)
    if len(results) != len(instr.operands):
        raise _Refused(f"sort of {len(instr.operands)} operands gives {len(results)} results")
    for operand, result in zip(instr.operands, results, strict=True):
        for shape in (operand.shape, result):
            if shape.is_array and shape.dims != first:
                raise _Refused(f"{shape} is not [{_spelled(first)}]: a sort's operands and "
                               "results have one shape")  # fmt: skip


def _tuple(instr: Instruction) -> None:
    shape = instr.shape
    if not shape.is_tuple:
        return
    elements, operands = shape.tuple_shapes, instr.operands
    if len(elements) != len(operands):
        raise _Refused(f"a tuple of {len(elements)} elements made of {len(operands)} operands")
    for k, (element, operand) in enumerate(zip(elements, operands, strict=True)):
        if element is not operand.shape and not _compatible(element, operand.shape, fp=True):
            raise _Refused(f"element {k} is {element}, its operand %{operand.name} "
                           f"{operand.shape}")  # fmt: skip


def _leaf_pairs(instr: Instruction) -> list[tuple[Shape, Shape]]:
    """A collective's operands and results, leaf by leaf (one result per operand)."""
    sources = [leaf for o in instr.operands for leaf in o.shape.leaves()]
    results = instr.shape.leaves()
    if len(sources) != len(results):
        raise _Refused(f"{instr.opcode} of {len(sources)} arrays gives {len(results)}")
    return list(zip(sources, results, strict=True))


def _same_shapes(instr: Instruction) -> None:
    """all-reduce, all-to-all, collective-permute: each result has its operand's shape."""
    if instr.opcode == "collective-permute" and len(instr.operands) != 1:
        return  # in place: an output buffer and start indices as well
    for source, result in _leaf_pairs(instr):
        if source.dims != result.dims or not _same_type(source.dtype, result.dtype):
            raise _Refused(f"its result {result} is not its operand's {source}")


def _gathered(instr: Instruction) -> None:
    """all-gather and reduce-scatter: each result has its operand's shape but in dimension
    ``dimensions``, which the op multiplies (all-gather) or divides (reduce-scatter)."""
    dims = ints(instr, "dimensions")
    for source, result in _leaf_pairs(instr):
        if len(dims) != 1 or not 0 <= dims[0] < len(source.dims):
            raise _Refused(f"dimensions={{{_spelled(dims)}}} is not one dimension of {source}",
                           "dimensions")  # fmt: skip
        d = dims[0]
        whole, part = (result, source) if instr.opcode == "all-gather" else (source, result)
        others = len(result.dims) == len(source.dims) and all(
            a == b for i, (a, b) in enumerate(zip(source.dims, result.dims, strict=True)) if i != d
        )
        if not others or (whole.dims[d] % part.dims[d] if part.dims[d] else whole.dims[d]):
            raise _Refused(f"its result {result} does not come of its operand {source} over "
                           f"dimension {d}", "dimensions")  # fmt: skip


def _reduce_window(instr: Instruction) -> None:
    half = len(instr.operands) // 2
    source = _operand_dims(instr, 0) if half else None
    if source is None:
        return
    spatial = window(instr)
    if len(spatial) != len(source):
        raise _Refused(f"window has {len(spatial)} dimensions, its operand {len(source)}",
                       "window")  # fmt: skip
    want = tuple(_windowed(n, w) for n, w in zip(source, spatial, strict=True))
    results = instr.shape.tuple_shapes if instr.shape.is_tuple else (instr.shape,)
    for result in results:
        if result.is_array and tuple(result.dims) != want:
            raise _Refused(f"its window over [{_spelled(source)}] gives [{_spelled(want)}], not "
                           f"[{_spelled(result.dims)}]", "window")  # fmt: skip


_SHAPE_RULES = {
    "transpose": _transpose,
    "broadcast": _broadcast,
    "reshape": _reshape,
    "dynamic-slice": _dynamic_slice,
    "dynamic-update-slice": _dynamic_update_slice,
    "reduce-window": _reduce_window,
    "dot": _dot,
    "convolution": _convolution,
    "reduce": _reduce,
    "slice": _slice,
    "pad": _pad,
    "concatenate": _concatenate,
    "gather": _gather,
    "scatter": _scatter,
    "get-tuple-element": _get_tuple_element,
    "iota": _iota,
    "reverse": _reverse,
    "sort": _sort,
    "map": _elementwise,  # its operands have its dimensions, no scalar among them
    "tuple": _tuple,
    "all-reduce": _same_shapes,
    "all-to-all": _same_shapes,
    "collective-permute": _same_shapes,
    "all-gather": _gathered,
    "reduce-scatter": _gathered,
    **dict.fromkeys(ELEMENTWISE, _elementwise),
}
