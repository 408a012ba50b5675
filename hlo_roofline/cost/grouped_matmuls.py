"""Grouped matmuls, priced from their shapes on the matrix unit.

A mixture-of-experts layer multiplies each token's rows by its expert's weights: a grouped matmul,
whose rows are split into groups by runtime group sizes. Two kernels run it on a TPU, and neither
is an op XLA prices:

- megablox (``jax.experimental.pallas.ops.tpu.megablox``, MaxText's ``sparse_matmul``): Pallas
  kernels named ``gmm`` (``lhs [m, k]`` by ``rhs [groups, k, n]``, or ``[groups, n, k]`` transposed,
  into ``[m, n]``) and ``tgmm`` (the weights' gradient: ``[m, k]`` and ``[m, n]`` into
  ``[groups, k, n]``), after five scalar-prefetch operands (the tile count, group offsets, group
  and tile ids, the group offset);
- XLA's ``ragged-dot`` (``jax.lax.ragged_dot``): XLA:TPU lowers it to a Mosaic kernel of the same
  form named ``ragged-dot-<mode>`` (``ragged-dot-none``; the gradient's weight form too), its
  group offsets made by a ``ragged-dot-metadata`` call.

Every row of ``lhs`` belongs to at most one group, so the work is 2·m·k·n, all of it on the matrix
unit: each group's rows times its weights (the ``tgmm`` form: each row's outer product summed into
its group). The kernels' own ``cost_estimate`` says the same FLOPs but not where they run. The
group sizes are runtime values: rows past the last group (or outside the local groups of an
expert-parallel shard, ``group_offset``) are skipped by the kernel, so the count is exact when the
groups cover every row and an upper bound otherwise, flagged so. Bytes are the operands and the
result (the kernels read a weight block again for each row tile that crosses into a group; that
is not counted).
"""

from __future__ import annotations

import re

from hlo_roofline.cost.attention_kernels import kernel_name
from hlo_roofline.cost.base import Cost, CostContext
from hlo_roofline.hlo.ir import INDEX_DTYPES, Instruction, Shape

# megablox's kernels, and XLA:TPU's lowering of ragged-dot (not its metadata kernel)
_GROUPED = re.compile(r"t?gmm|ragged-dot-(?!metadata)[\w-]+")


def _names(instr: Instruction, target: str) -> list[str]:
    """The names the kernel may go by: its ``pallas_call``'s (or instruction's), and the function
    ``jit`` wraps around it (megablox's ``jit(gmm)/pallas_call``, also under ``transpose(jvp(…))``;
    XLA then names the instruction after the scope, ``transpose_jvp_jit_gmm___``)."""
    names = [kernel_name(instr, target)]
    op_name = re.search(r'op_name="([^"]*)/pallas_call"', instr.attrs.get("metadata", ""))
    if op_name and (wrapped := re.search(r"jit\((\w+)\)\)*$", op_name.group(1))):
        names.append(wrapped.group(1))
    return names


def is_grouped_matmul(instr: Instruction, target: str) -> bool:
    """The custom call runs a grouped matmul kernel (by the name its kernel carries)."""
    return target == "tpu_custom_call" and any(
        _GROUPED.fullmatch(name) for name in _names(instr, target)
    )


def _floats(instr: Instruction) -> list[Shape]:
    return [
        op.shape
        for op in instr.operands
        if op.shape.is_array and op.shape.dtype not in INDEX_DTYPES and op.shape.dims
    ]


def _same_dims(dims: tuple[int, ...], *sizes: int) -> bool:
    return sorted(dims) == sorted(sizes)


def grouped_geometry(instr: Instruction) -> tuple[int, int, int] | None:
    """(m, k, n) of a grouped matmul: m rows split into groups, contracted over k into n columns
    (the ``tgmm`` form: contracted over the m rows into each group's ``k × n``); None if the
    shapes are neither form."""
    floats = _floats(instr)
    result = instr.shape if instr.shape.is_array else None
    if result is None or len(floats) < 2:
        return None
    lhs, rhs = floats[0], floats[1]
    if len(result.dims) == 2 and len(lhs.dims) == 2 and len(rhs.dims) == 3:  # gmm
        m, n = result.dims
        k = lhs.dims[1]
        if lhs.dims[0] == m and _same_dims(rhs.dims[1:], k, n):
            return m, k, n
    if len(result.dims) == 3 and len(lhs.dims) == 2 and len(rhs.dims) == 2:  # tgmm
        _, k, n = result.dims
        if k and lhs.elements % k == 0:
            m = lhs.elements // k
            if _same_dims(lhs.dims, m, k) and _same_dims(rhs.dims, m, n):
                return m, k, n
    return None


def grouped_matmul_cost(instr: Instruction, target: str, ctx: CostContext) -> Cost | None:
    """A grouped matmul's cost from its shapes, or None (not one, or shapes it does not take)."""
    if not is_grouped_matmul(instr, target):
        return None
    geometry = grouped_geometry(instr)
    if geometry is None:
        return None
    m, k, n = geometry
    flops = 2 * m * k * n
    return Cost(
        flops=flops,
        mxu_flops=flops,  # every one is in a group's product: matrix-unit work
        bytes_accessed=ctx.read_and_written(instr, instr.shape),
        notes=(
            f"kernel '{_names(instr, target)[-1]}': grouped matmul from its shapes, "
            f"2·{m}·{k}·{n}; its group sizes are runtime values: every row counted in a group "
            "(upper bound where the groups leave rows out)",
        ),
        upper_bound=True,
    )
