"""Buffers an op updates in place: what a dynamic-update-slice or scatter touches, not the buffer.

XLA runs a dynamic-update-slice or a scatter in place when its buffer operand can share the
result's buffer (``HloDataflowAnalysis::CanShareOperandBufferWithUser``): only the update (and, for
a scatter, the indices and the rows it combines into) moves. A fusion is in place the same way when
its result (or a tuple element of it) is such an op, through views (bitcast, a reshape that is
one), nested fusions and get-tuple-element, and the op's buffer comes from a fusion parameter
through views: that parameter and that result are one buffer, never read or written whole.

A fusion result that is one of its parameters returned unchanged into the buffer it aliases
(``output_to_operand_aliasing``) moves nothing at all, and a result a fused collective writes moves
by DMA (:func:`passed_through`, :func:`collective_results`): XLA:TPU's async collective fusions
hand their collective's source and destination on this way to the fusion that continues it.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import NamedTuple

from hlo_roofline.cost.collectives import COLLECTIVES
from hlo_roofline.hlo import attrs
from hlo_roofline.hlo.ir import Instruction, Shape

# Ops that only view a buffer: an in-place update seen through them is still in place (in an
# optimized module a reshape that is left is a copy, so only bitcasts).
VIEWS = frozenset({"bitcast"})
_MAX_DEPTH = 64


class InPlace(NamedTuple):
    """One buffer updated in place: the operand it arrives as, and what the update touches."""

    operand: int  # the op's operand (a fusion's parameter number) that is the buffer
    updates: tuple[Shape, ...]  # what is written: a dynamic-update-slice's update, scatter updates
    combines: bool  # the old values where it writes are read too (a scatter's combiner)

    @property
    def update_elements(self) -> int:
        return sum(s.elements for s in self.updates if s.is_array)


def _update_shapes(op: Instruction) -> tuple[Shape, ...]:
    """The shapes an in-place op writes: a dynamic-update-slice's update, a scatter's updates."""
    if op.opcode == "dynamic-update-slice":
        return (op.operands[1].shape,)
    n = len(op.operands) // 2
    return tuple(u.shape for u in op.operands[n + 1 :])


def _unviewed(value: Instruction) -> Instruction:
    for _ in range(_MAX_DEPTH):
        if value.opcode not in VIEWS or not value.operands:
            break
        value = value.operands[0]
    return value


def _buffer_parameter(value: Instruction) -> int | None:
    """The fusion parameter number ``value`` is (through views), or None."""
    return _unviewed(value).parameter_number


def _producer_in_place(value: Instruction, depth: int = 0) -> InPlace | None:
    """The in-place update ``value`` is (through views and nested fusions), its buffer named by
    the parameter of ``value``'s computation it comes from."""
    value = _unviewed(value)
    if depth > _MAX_DEPTH or not value.operands:
        return None
    if value.opcode == "dynamic-update-slice":
        buffers = [value.operands[0]]
    elif value.opcode == "scatter":
        buffers = value.operands[: len(value.operands) // 2]
    elif value.opcode == "fusion" and value.called and value.called[0].root is not None:
        inner = _producer_in_place(value.called[0].root, depth + 1)
        if inner is None or inner.operand >= len(value.operands):
            return None
        param = _buffer_parameter(value.operands[inner.operand])
        return inner._replace(operand=param) if param is not None else None
    else:
        return None
    param = _buffer_parameter(buffers[0])
    if param is None:
        return None
    return InPlace(param, _update_shapes(value), value.opcode == "scatter")


def in_place(instr: Instruction) -> dict[int, InPlace]:
    """``result leaf index -> InPlace`` for every result of ``instr`` updated in place: a
    dynamic-update-slice's or scatter's own buffers, a fusion's results that are such an update
    of one of its parameters. Empty for anything else."""
    code = instr.opcode
    if code == "dynamic-update-slice" and len(instr.operands) >= 2:
        return {0: InPlace(0, _update_shapes(instr), False)}
    if code == "scatter" and len(instr.operands) >= 3:
        shapes = _update_shapes(instr)
        return {i: InPlace(i, shapes[i : i + 1], True) for i in range(len(shapes))}
    if code != "fusion" or not instr.called or instr.called[0].root is None:
        return {}
    root = _unviewed(instr.called[0].root)
    if instr.shape.is_tuple and any(e.is_tuple for e in instr.shape.tuple_shapes):
        return {}  # nested tuples: the leaves are not the root's operands one for one
    if root.opcode == "tuple" and instr.shape.is_tuple:
        found = {}
        for i, element in enumerate(root.operands):
            if element.shape.is_array:
                alias = _producer_in_place(element)
                if alias is not None and alias.operand < len(instr.operands):
                    found[i] = alias
        return found
    alias = _producer_in_place(root)
    return {0: alias} if alias is not None and alias.operand < len(instr.operands) else {}


def _root_elements(fusion: Instruction) -> list[Instruction]:
    """The values a fusion returns, one per result leaf (none for nested tuples)."""
    root = fusion.called[0].root if fusion.called else None
    if root is None:
        return []
    if not fusion.shape.is_tuple:
        return [root]
    root = _unviewed(root)
    if root.opcode != "tuple" or any(e.is_tuple for e in fusion.shape.tuple_shapes):
        return []
    return list(root.operands)


FRESH_BUFFER_TARGETS = frozenset({"AllocateBuffer"})  # XLA:TPU's uninitialised buffer


def fresh_buffer_results(fusion: Instruction) -> frozenset[int]:
    """The result leaves of a fusion that a dynamic-update-slice writes into a buffer the fusion
    allocates itself (XLA:TPU's ``AllocateBuffer`` custom call: a gather's result assembled slice
    by slice, a beam cache reordered into a fresh array): only the slice is written, the rest of
    the buffer is neither read nor written, so no loop passes it."""
    if fusion.opcode != "fusion":
        return frozenset()
    fresh = set()
    for i, value in enumerate(_root_elements(fusion)):
        value = _unviewed(value)
        if value.opcode != "dynamic-update-slice" or not value.operands:
            continue
        buffer = _unviewed(value.operands[0])
        if buffer.opcode == "custom-call" and (
            buffer.attrs.get("custom_call_target", "").strip('"') in FRESH_BUFFER_TARGETS
        ):
            fresh.add(i)
    return frozenset(fresh)


def passed_through(fusion: Instruction) -> dict[int, int]:
    """``result leaf -> operand`` for each result of a fusion that is one of its parameters
    returned unchanged (through views) into the very buffer it aliases
    (``output_to_operand_aliasing``): one buffer, which the fusion neither reads nor writes."""
    aliasing = attrs.output_operand_aliasing(fusion) if fusion.opcode == "fusion" else {}
    if not aliasing:
        return {}
    found = {}
    tupled = fusion.shape.is_tuple
    for i, value in enumerate(_root_elements(fusion)):
        alias = aliasing.get((i,) if tupled else ())
        if alias is not None and not alias[1] and _buffer_parameter(value) == alias[0]:
            found[i] = alias[0]
    return found


def is_collective(op: Instruction) -> bool:
    """A collective, or the custom call marking the start or done of a TPU async collective
    (whose operands are the collective and its buffers)."""
    return op.opcode in COLLECTIVES or bool(attrs.collective_marker(op))


def collective_results(fusion: Instruction) -> dict[int, Instruction]:
    """Result leaves of a fusion that a fused collective writes (the returned value is one,
    through views), every result where the root marks an async collective's start or done: a
    DMA writes them, once, into their buffer. ``leaf -> the collective`` (or the marker)."""
    root = fusion.called[0].root if fusion.called else None
    if root is None:
        return {}
    if attrs.async_marker(fusion):
        return dict.fromkeys(range(len(fusion.shape.leaves())), root)
    values = map(_unviewed, _root_elements(fusion))
    return {i: value for i, value in enumerate(values) if is_collective(value)}


def handed_on(
    fusion: Instruction, passed: dict[int, int], taken: Callable[[Instruction], bool]
) -> frozenset[int]:
    """Operands a fusion's body only returns unchanged (at the results in ``passed``) or hands to
    ops ``taken`` says move it themselves (a collective's DMA), through views: no loop of the
    fusion's own reads them."""
    body = fusion.called[0] if fusion.called else None
    if body is None or body.root is None:
        return frozenset()
    users: dict[int, list[Instruction]] = {}
    for inner in body.instructions:
        for op in dict.fromkeys(inner.operands):
            users.setdefault(id(op), []).append(inner)
    root, tupled = body.root, fusion.shape.is_tuple

    def returned_unchanged(value: Instruction) -> bool:
        if not tupled:
            return 0 in passed
        return all(i in passed for i, e in enumerate(root.operands) if e is value)

    def free(value: Instruction, depth: int = 0) -> bool:
        if depth > _MAX_DEPTH:
            return False
        for user in users.get(id(value), ()):
            if (user is root and returned_unchanged(value)) or taken(user):
                continue
            if user.opcode in VIEWS and not user.is_root and free(user, depth + 1):
                continue
            return False
        return True

    return frozenset(
        p.parameter_number for p in body.parameters if p.parameter_number is not None and free(p)
    )


class Moved(NamedTuple):
    """What of a fusion no loop of its own moves: results and operands."""

    results: frozenset[int]  # result leaves
    operands: frozenset[int]


NOTHING_MOVED = Moved(frozenset(), frozenset())


def moved_by_dma(fusion: Instruction) -> Moved:
    """The results and operands of a fusion that a collective's DMA moves or nothing does:
    results returned unchanged (:func:`passed_through`) or written by a fused collective
    (:func:`collective_results`), operands only those take (:func:`handed_on`)."""
    if fusion.opcode != "fusion" or not fusion.called:
        return NOTHING_MOVED
    passed = passed_through(fusion)
    made = collective_results(fusion)
    if not passed and not made:
        return NOTHING_MOVED
    return Moved(frozenset(made) | frozenset(passed), handed_on(fusion, passed, is_collective))


_SLICES = frozenset({"slice", "dynamic-slice"})
_opcode = operator.attrgetter("opcode")


def sliced_reads(fusion: Instruction) -> dict[int, int]:
    """``operand index -> elements`` for each fusion operand its body reads only through slices
    (through bitcasts): the largest slice, the most one iteration of the fusion's loop reads of it
    (``h[:, :n] * h[:, n:]`` reads two halves, a loop over one half's elements)."""
    if fusion.opcode != "fusion" or not fusion.called:
        return {}
    body = fusion.called[0]
    if _SLICES.isdisjoint(map(_opcode, body.instructions)):  # most bodies: no slice, nothing found
        return {}
    users: dict[int, list[Instruction]] = {}  # of the parameters and views, the only ones asked
    for inner in body.instructions:
        for op in inner.operands:
            if op.opcode == "parameter" or op.opcode in VIEWS:
                listed = users.get(id(op))
                if listed is None:
                    users[id(op)] = [inner]
                elif listed[-1] is not inner:  # an op reading one value twice: one user
                    listed.append(inner)
    found = {}
    for param in body.parameters:
        if param.parameter_number is None or param.is_root:
            continue
        largest, todo, ok = 0, [param], True
        while todo and ok:
            value = todo.pop()
            for user in users.get(id(value), ()):
                if user.opcode in VIEWS and not user.is_root:
                    todo.append(user)
                elif user.opcode in _SLICES and user.operands[0] is value:
                    largest = max(largest, user.shape.elements)
                else:
                    ok = False
                    break
        if ok and largest:
            found[param.parameter_number] = largest
    return found
