"""Trace events that name an op the embedded HLO does not hold, given to the ops they ran for.

XLA:GPU names some device work after instructions it creates while emitting the program, after
the module embedded in the trace was printed (both seen on H100 and H200 traces, jax 0.11):

* An async fusion (``fusion-start``/``fusion-done``: a scanned layer's weights sliced, its
  activations written back, as copies on their own stream) is emitted as a fresh fusion named by
  its kind, ``loop_dynamic_slice_fusion.18``. Its event is a copy whose ``memcpy_details`` say
  how many bytes it moved: it is given to the ``fusion-start`` of that kind that moves those bytes.
  Candidates alike in kind and bytes are the same work at the same price, and are paired in
  schedule order.
* With command buffers (CUDA graphs, XLA's default) every kernel of a graph carries the graph's
  name, ``command_buffer_17``. XLA names a fusion's kernel after the fusion (``.`` → ``_``), or
  after the fusion whose kernel it reuses (its ``deduplicated_name``), so a kernel only one op
  runs is given that op. Kernels several fusions share, and library kernels (cuBLAS, copies),
  cannot be told apart and stay unmatched.
"""

from __future__ import annotations

import re
from collections import defaultdict

from hlo_roofline.cost.base import array_bytes
from hlo_roofline.hlo import Instruction, Module
from hlo_roofline.measured.trace import OpEvent

__all__ = ["COMMAND_BUFFER", "resolve"]

COMMAND_BUFFER = re.compile(r"command_buffer(_\d+)?$")
_NUMBERED = re.compile(r"^(.*)\.(\d+)$")
_KIND_PREFIX = {"kLoop": "loop", "kInput": "input", "kOutput": "output"}
_DEDUPLICATED = re.compile(r'deduplicated_name="([^"]+)"')


def _sanitized(name: str) -> str:
    """A kernel's name as XLA:GPU derives it from its op's (LLVM-safe characters only)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def _kernel_owners(module: Module) -> dict[str, str]:
    """Kernel name → the one fusion that runs it (kernels fusions share are left out)."""
    owners: dict[str, str | None] = {}
    for instr in module.instructions():
        if instr.opcode != "fusion":
            continue
        shared = _DEDUPLICATED.search(instr.attrs.get("metadata", ""))
        kernel = _sanitized(shared.group(1) if shared else instr.name)
        owners[kernel] = instr.name if kernel not in owners else None
    return {kernel: op for kernel, op in owners.items() if op is not None}


def _async_kind_and_bytes(start: Instruction) -> tuple[str, int] | None:
    """(the name stem XLA gives the emitted fusion, the bytes its copy moves) of a fusion-start."""
    if not start.called or not start.called[0].instructions:
        return None
    body = start.called[0]
    prefix = _KIND_PREFIX.get(start.attrs.get("kind", ""))
    root = body.root
    if prefix is None or root is None:
        return None
    stem = f"{prefix}_{root.opcode.replace('-', '_')}_fusion"
    if root.opcode == "dynamic-update-slice" and len(root.operands) > 1:
        return stem, array_bytes(root.operands[1].shape)  # the update is what is copied
    return stem, array_bytes(root.shape)


def _async_pairs(unknown: dict[str, int | None], module: Module) -> dict[str, str]:
    """Emitted async fusion names → their fusion-start, by kind and bytes (then in order)."""
    candidates: dict[tuple[str, int], list[str]] = defaultdict(list)
    for instr in module.instructions():
        if instr.opcode == "fusion-start" and (key := _async_kind_and_bytes(instr)):
            candidates[key].append(instr.name)
    emitted: dict[tuple[str, int], list[tuple[int, str]]] = defaultdict(list)
    for name, copied in unknown.items():
        m = _NUMBERED.match(name)
        if m and copied is not None:
            emitted[m.group(1), copied].append((int(m.group(2)), name))
    pairs = {}
    for key, names in emitted.items():
        starts = candidates.get(key, [])
        if len(names) <= len(starts):
            pairs.update(
                {name: start for (_, name), start in zip(sorted(names), starts, strict=False)}
            )
    return pairs


def resolve(events: list[OpEvent], module: Module) -> dict[str, str]:
    """Give events naming no op of ``module`` to the op they ran for, where the trace says which
    (in place); returns the renames made, event name → op."""
    names = {i.name for i in module.instructions()}
    unknown: dict[str, int | None] = {}
    for e in events:
        if e.op not in names and not COMMAND_BUFFER.match(e.op):
            unknown.setdefault(e.op, e.copied_bytes)
    renames = _async_pairs(unknown, module)
    by_kernel: dict[str, str] | None = None
    for e in events:
        if e.op in names:
            continue
        if e.op in renames:
            e.op = renames[e.op]
        elif COMMAND_BUFFER.match(e.op):
            if by_kernel is None:
                by_kernel = _kernel_owners(module)
            op = by_kernel.get(e.kernel)
            if op is not None:
                renames[e.kernel] = op
                e.op = op
    return renames
