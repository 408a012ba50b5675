"""Custom calls priced by their target name: the calls XLA:TPU's multislice (megascale) rewrite
adds around a DCN transfer, which MaxText's multi-slice programs carry.

``custom_call.custom_call`` (the roofline model's rule for every custom call) looks a target up
here first: a rule here is ``def f(instr, ctx) -> Cost``, registered with
:func:`target_rule`.
"""

from __future__ import annotations

from collections.abc import Callable

from hlo_roofline.cost.base import ZERO, Cost, CostContext
from hlo_roofline.hlo.ir import DTYPE_BYTES, Instruction

TargetRule = Callable[[Instruction, CostContext], Cost]
TARGET_RULES: dict[str, TargetRule] = {}


def target_rule(*names: str) -> Callable[[TargetRule], TargetRule]:
    def register(fn: TargetRule) -> TargetRule:
        for name in names:
            if name in TARGET_RULES:
                raise ValueError(f"two cost rules for custom call '{name}'")
            TARGET_RULES[name] = fn
        return fn

    return register


@target_rule("SliceId")
def slice_id(instr: Instruction, ctx: CostContext) -> Cost:
    """This device's slice of a multislice job (``jax.lax.axis_index`` over the slices' axis):
    a scalar the runtime knows, no operand, as ``partition-id`` is for a device; no work."""
    return ZERO


@target_rule("ZeroCrop")
def zero_crop(instr: Instruction, ctx: CostContext) -> Cost:
    """Zeroes the tile padding of a DCN payload in place before megascale sends it: its result
    aliases its operand (``output_to_operand_aliasing``) and has the operand's shape padded to
    whole tiles (``bf16[100,333]`` → ``bf16[104,384]`` under ``T(8,128)``). It writes the
    padding's elements, nothing else; an operand already whole tiles costs nothing."""
    if not instr.operands or instr.shape.is_tuple:
        return Cost(unknown=True, notes=("custom call 'ZeroCrop' of an unexpected form: unpriced",))
    operand = instr.operands[0].shape
    padding = max(instr.shape.elements - operand.elements, 0)
    return Cost(bytes_accessed=padding * DTYPE_BYTES.get(instr.shape.dtype, 0))
