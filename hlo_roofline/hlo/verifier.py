"""The checks of a parsed module that are not about its text's syntax, as XLA's verifier runs after
its parser: a computation's parameters numbered 0..n-1, the computations an op cannot do without,
callers and callees that agree on shapes, and a call graph without cycles.

The parser calls these as it goes, where the first error in the text is the one reported; each
points at the line of the instruction that breaks the rule.
"""

from __future__ import annotations

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


def _compatible(a: Shape, b: Shape) -> bool:
    """Same element type, dimensions and tuple structure; layouts may differ (XLA's Compatible)."""
    if a is b:
        return True
    if a.dtype != b.dtype or a.dims != b.dims or len(a.tuple_shapes) != len(b.tuple_shapes):
        return False
    return all(_compatible(x, y) for x, y in zip(a.tuple_shapes, b.tuple_shapes, strict=True))


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
    if all(
        callee.line < instr.computation.line for instr, _ in callers for callee in instr.called
    ):
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
