"""Walk a module and price every executed op: one row per non-container instruction.

Containers (while, call, and under the roofline model conditional) are opened and their bodies
walked with an execution count; everything else, fusions included, is one row whose cost comes from
the rule registered for its opcode.
"""

from __future__ import annotations

from dataclasses import dataclass

from hlo_roofline.cost import custom_call
from hlo_roofline.cost.base import COST_MODELS, Cost, CostContext, callee
from hlo_roofline.cost.collectives import find_collective
from hlo_roofline.cost.control_flow import branches, heaviest_branch, loop_multipliers
from hlo_roofline.cost.linalg import matmul_geometry
from hlo_roofline.hlo import attrs
from hlo_roofline.hlo.ir import Computation, Instruction, Module

# Ops that only name, view or order values: never "unpriced", left out of coverage.
BOOKKEEPING = frozenset(
    {"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all",
     "add-dependency", "domain"}
)  # fmt: skip
ROW_COLUMNS = (
    "name", "opcode", "computation", "count", "flops", "transcendentals", "bytes_accessed",
    "comm_bytes", "unknown", "fusion_kind", "dtype", "shape", "op_name", "source", "note",
    "fused_ops", "collective", "group_size", "mm_batch", "mm_m", "mm_n", "mm_k",
)  # fmt: skip
_NOT_LISTED = frozenset({"parameter", "get-tuple-element", "tuple", "bitcast", "constant"})
_RULE_ERRORS = (ValueError, IndexError, KeyError, ZeroDivisionError, AttributeError, TypeError)


@dataclass(frozen=True, slots=True)
class PricedOp:
    """One executed instruction, its execution count per step and its cost per execution."""

    instr: Instruction
    count: float
    cost: Cost


def price(instr: Instruction, ctx: CostContext) -> Cost:
    """The rule's cost, or a flagged unknown cost if the rule cannot make sense of the op."""
    try:
        return ctx.cost(instr)
    except RecursionError:
        return Cost(unknown=True, notes=("computation nesting too deep to price",))
    except _RULE_ERRORS as exc:
        return Cost(unknown=True, notes=(f"could not price {instr.opcode}: {exc!r}",))


def walk(
    module: Module, cost_model: str = "roofline", pad_to_tiles: bool = False
) -> list[PricedOp]:
    """Every executed op of the module's entry, with nested bodies opened."""
    if cost_model not in COST_MODELS:
        raise ValueError(f"cost_model must be one of {COST_MODELS}, not {cost_model!r}")
    ctx = CostContext(module, cost_model, pad_to_tiles)
    ops: list[PricedOp] = []

    def visit(comp: Computation, count: float, note: str | None, depth: int) -> None:
        for instr in comp.instructions:
            opened = depth < 64 and _open(instr, count, note, depth)
            if not opened:
                cost = price(instr, ctx)
                ops.append(PricedOp(instr, count, cost.with_note(note) if note else cost))

    def _open(instr: Instruction, count: float, note: str | None, depth: int) -> bool:
        try:
            if instr.opcode == "while":
                body_times, cond_times, loop_note = loop_multipliers(instr, ctx)
                inner_note = loop_note or note
                visit(callee(instr, ctx, "body"), count * body_times, inner_note, depth + 1)
                visit(callee(instr, ctx, "condition"), count * cond_times, inner_note, depth + 1)
                return True
            if instr.opcode == "call":
                visit(callee(instr, ctx, "to_apply"), count, note, depth + 1)
                return True
            if instr.opcode == "conditional" and ctx.roofline:
                taken = heaviest_branch(instr, ctx)
                for i, comp in enumerate(branches(instr, ctx)):
                    branch_note = (
                        None
                        if i == taken
                        else f"branch {i} not counted (branch {taken} does the most work)"
                    )
                    visit(comp, count if i == taken else 0, branch_note or note, depth + 1)
                return True
        except _RULE_ERRORS:
            return False  # priced as one flagged row instead
        return False

    visit(module.entry, 1, None, 0)
    return ops


def dtype_of(instr: Instruction) -> str:
    """The dtype an op computes in: a dot's or convolution's input type, else its result type."""
    target = instr
    if instr.opcode == "fusion" and instr.called:
        for inner in instr.called[0].instructions:
            if inner.opcode in ("dot", "convolution", "scaled-dot", "ragged-dot"):
                target = inner
                break
    if target.opcode in ("dot", "convolution", "scaled-dot", "ragged-dot") and target.operands:
        return target.operands[0].shape.dtype
    leaves = instr.shape.leaves()
    return leaves[0].dtype if leaves else instr.shape.dtype


def rows(module: Module, ops: list[PricedOp]) -> dict[str, list]:
    """Report columns: identity, metadata and per-step totals (cost × count)."""
    shape_text: dict[int, str] = {}
    columns: dict[str, list] = {name: [] for name in ROW_COLUMNS}
    (name, opcode, computation, count_, flops, transcendentals, bytes_accessed, comm_bytes,
     unknown, fusion_kind, dtype, shape, op_name, source, note, fused_ops, collective,
     group_size, mm_batch, mm_m, mm_n, mm_k) = columns.values()  # fmt: skip
    for op in ops:
        instr, count, cost = op.instr, op.count, op.cost
        meta = attrs.metadata(instr)
        key = id(instr.shape)
        text = shape_text.get(key)
        if text is None:
            text = shape_text[key] = str(instr.shape)
        name.append(instr.name)
        opcode.append(instr.opcode)
        computation.append(instr.computation.name)
        count_.append(float(count))
        flops.append(cost.flops * count)
        transcendentals.append(cost.transcendentals * count)
        bytes_accessed.append(cost.bytes_accessed * count)
        comm_bytes.append(cost.comm_bytes * count)
        unknown.append(cost.unknown)
        fusion_kind.append(attrs.fusion_kind(instr) if instr.opcode == "fusion" else "")
        dtype.append(dtype_of(instr))
        shape.append(text)
        op_name.append(meta.op_name)
        source.append(attrs.source(instr, module))
        note.append("; ".join(cost.notes))
        fused_ops.append(_fused_ops(instr) if instr.opcode == "fusion" else "")
        found = find_collective(instr) if not instr.opcode.endswith("-done") else None
        collective.append(found.opcode.removesuffix("-start") if found is not None else "")
        group_size.append(attrs.replica_group_size(found, module) if found is not None else 0)
        geometry = _geometry(instr)
        for column, value in zip(
            (mm_batch, mm_m, mm_n, mm_k), geometry or (0, 0, 0, 0), strict=True
        ):
            column.append(value)
    return columns


def _geometry(instr: Instruction) -> tuple[int, int, int, int] | None:
    try:
        if instr.opcode == "custom-call":
            return custom_call.geometry(instr)
        return matmul_geometry(instr)
    except _RULE_ERRORS:
        return None


def _fused_ops(fusion: Instruction) -> str:
    """What a fusion computes, e.g. "dot, add, exponential ×2" (views and plumbing left out)."""
    counts: dict[str, int] = {}
    for inner in fusion.called[0].instructions:
        if inner.opcode not in _NOT_LISTED:
            counts[inner.opcode] = counts.get(inner.opcode, 0) + 1
    return ", ".join(op if n == 1 else f"{op} ×{n}" for op, n in counts.items())


def summarize(ops: list[PricedOp], cost_model: str) -> dict:
    """Module totals, and how much of the step could be priced."""
    flops = transcendentals = bytes_accessed = comm_bytes = 0.0
    priced = counted = 0.0
    notes: dict[str, None] = {}
    unknown_ops: list[str] = []
    for op in ops:
        cost, count = op.cost, op.count
        flops += cost.flops * count
        transcendentals += cost.transcendentals * count
        bytes_accessed += cost.bytes_accessed * count
        comm_bytes += cost.comm_bytes * count
        for n in cost.notes:
            notes[n] = None
        if count == 0 or op.instr.opcode in BOOKKEEPING:
            continue
        counted += count
        if cost.unknown:
            unknown_ops.append(op.instr.name)
        else:
            priced += count
    return {
        "cost_model": cost_model,
        "flops": flops,
        "transcendentals": transcendentals,
        "bytes_accessed": bytes_accessed,
        "comm_bytes": comm_bytes,
        "coverage": priced / counted if counted else 1.0,
        "unknown_ops": unknown_ops,
        "lower_bound": any("lower bound" in n for n in notes),
        "notes": list(notes),
    }
