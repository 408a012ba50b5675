"""The third roofline: does the step fit the chip's memory?

The book bounds a step by compute, by bandwidth, and by "the total memory available to store data".
The first two are priced per op; this module answers the third for the whole step, per device:

    need = arguments + outputs − what donation aliases + temporaries (+ XLA's reserved space)

From the compiler when it compiled the program (``Compiled.memory_analysis()``: its buffer
assignment), from the compiler's own refusal when it did not (XLA:TPU's "Ran out of memory on HBM"
names what it needed and what it had), or, from HLO text alone, the entry computation's parameters
and outputs (temporaries unknown: a lower bound). :func:`judge` then compares the need with the HBM
of one device of a chip: fits, tight (more than 90%), or does not fit, with the largest buffers and
the remedies the book tries first (donate, shard over more devices, rematerialise).
"""

from __future__ import annotations

import heapq
import math
import re
from typing import NamedTuple

from hlo_roofline import schema
from hlo_roofline.cost.base import NAMING_OPS, array_bytes
from hlo_roofline.hlo import Module

__all__ = [
    "TIGHT",
    "Buffer",
    "advice_text",
    "describe",
    "from_dump",
    "from_error",
    "from_module",
    "from_stats",
    "is_out_of_memory",
    "judge",
    "largest_temporaries",
    "verdict_of",
    "verdict_text",
]

TIGHT = 0.90  # above this share of HBM a step "fits" only until the next allocation
LARGEST = 5  # buffers listed as the biggest contributors
FITS, TIGHT_FIT, DOES_NOT_FIT, UNKNOWN = schema.FIT_VERDICTS
_OLD_VERDICTS = {"does not fit": DOES_NOT_FIT}  # reports written before the codes


class Buffer(NamedTuple):
    """One array that occupies HBM for the step, per device."""

    name: str
    kind: str  # "parameter", "output" or "temporary"
    bytes: int
    shape: str = ""  # per device
    global_shape: str = ""  # of the whole array, where it is sharded over devices

    def as_dict(self) -> dict:
        return self._asdict()


def from_stats(stats: dict, parameters: list[Buffer], donatable: int, temporaries=()) -> dict:
    """The need from the compiler's buffer assignment (``Compiled.memory_analysis()``'s fields).

    ``parameters`` are the step's inputs per device (named by their place in the arguments),
    ``temporaries`` the largest intermediate results of the optimized module (:func:`from_module`).
    """
    arguments = stats["argument_size_in_bytes"]
    outputs = stats["output_size_in_bytes"]
    aliased = stats["alias_size_in_bytes"]
    temp = stats["temp_size_in_bytes"]
    code = stats.get("generated_code_size_in_bytes", 0)
    return {
        "source": "compiler",
        "arguments_bytes": arguments,
        "outputs_bytes": outputs,
        "aliased_bytes": aliased,
        "temporaries_bytes": temp,
        "generated_code_bytes": code,
        "available_bytes": None,
        "reserved_bytes": None,
        "need_bytes": arguments + outputs - aliased + temp + code,
        "complete": True,
        "largest": _largest([*parameters, *temporaries]),
        "donatable_bytes": max(donatable, 0),
        "compiler_error": None,
    }


# XLA:TPU: "... the total memory required for HLO temporaries (22.00G) exceeds available HBM
# (15.75G)", sizes in GiB. Other wordings leave the figures unknown; the refusal still counts.
_REQUIRED = re.compile(r"required for [^()]*\((?P<size>[\d.]+)(?P<unit>[KMGT])i?B?\)")
_AVAILABLE = re.compile(r"available HBM \((?P<size>[\d.]+)(?P<unit>[KMGT])i?B?\)")
_UNITS = {"K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def is_out_of_memory(message: str) -> bool:
    """Whether a compile error is the target's compiler refusing a program too big for its HBM."""
    return "RESOURCE_EXHAUSTED" in message and "out of memory" in message.lower()


def from_error(
    message: str,
    parameters: list[Buffer],
    donatable: int,
    capacity: float | None = None,
    devices: int | None = None,
    slices: list[tuple[int, str]] | None = None,
) -> dict:
    """The need as the compiler's refusal states it (XLA:TPU gives one total for all buffers).

    ``capacity`` is the HBM of one device of the chip compiled for: what the compiler keeps of it
    for itself (capacity − the "available" it names) is reserved space, counted in the need.
    ``devices`` is the program's device count and ``slices`` the (devices, shape) of the slices
    its chip comes in: the advice names only those."""
    need, available = (_size(pattern.search(message)) for pattern in (_REQUIRED, _AVAILABLE))
    reserved = max(capacity - available, 0.0) if capacity and available else None
    arguments = sum(b.bytes for b in parameters)
    return {
        "source": "compiler error",
        "arguments_bytes": arguments,
        "outputs_bytes": None,
        "aliased_bytes": None,
        "temporaries_bytes": None,
        "generated_code_bytes": None,
        "available_bytes": available,
        "reserved_bytes": reserved,
        "need_bytes": need if need is not None else arguments,
        "complete": need is not None,
        "largest": _largest(parameters),
        "donatable_bytes": max(donatable, 0),
        "compiler_error": " ".join(message.split())[:500],
        "devices": devices,
        "slices": [list(s) for s in slices] if slices else None,
        "arguments_global_bytes": sum(_global_bytes(b) for b in parameters),
    }


_ALLOCATION = re.compile(r"^allocation \d+: size (\d+), (.*):\s*$", re.MULTILINE)
_COLOR = re.compile(r"\bcolor (\d+)\b")
_SPACE = re.compile(r"Memory Space: (\S+) \(color=(\d+)\)")
_TOTAL = re.compile(r"Memory Space: (\S+) \(color=(\d+)\)\s*\nTotal bytes: (\d+)")
ASSIGNMENT_SUFFIX = "-buffer-assignment.txt"  # beside *after_optimizations.txt in a dump
USAGE_SUFFIX = "-memory-usage-report.txt"


def from_dump(assignment: str, usage_report: str | None, hlo: dict) -> dict:
    """The need from the buffer assignment XLA writes beside an optimized module in an
    ``--xla_dump_to`` directory (``*-buffer-assignment.txt``), as ``memory_analysis()`` counts it:
    arguments (``parameter`` allocations), outputs (``maybe-live-out``, the aliased ones too),
    aliased (both), temporaries (``preallocated-temp``), in every memory space of the device's
    own memory (:func:`_in_device_memory`); thread-local and constant allocations are not counted.
    ``usage_report`` is the dump's ``*-memory-usage-report.txt``: the total of those memory spaces
    is kept. ``hlo`` is :func:`from_module` of the same module (its largest buffers, what could be
    donated).

    XLA:TPU assigns more temporaries after this dump (in code generation), so for a TPU module
    (tiled layouts) the need is a lower bound; on CPU and GPU it is the compiler's figure."""
    arguments = outputs = aliased = temp = counted = 0
    found = False
    tpu = ":T(" in assignment
    spaces = {int(color): name for name, color in _SPACE.findall(usage_report or "")}
    for match in _ALLOCATION.finditer(assignment):
        found = True
        size, flags = int(match[1]), match[2]
        color = _COLOR.search(flags)
        if color is not None and not _in_device_memory(int(color[1]), tpu, spaces):
            continue
        counted += size
        parameter = re.search(r"\bparameter \d+", flags) is not None
        live_out = "maybe-live-out" in flags
        arguments += size if parameter else 0
        outputs += size if live_out else 0
        aliased += size if parameter and live_out else 0
        temp += size if "preallocated-temp" in flags else 0
    if not found:
        raise ValueError("no 'allocation N: size S, ...' lines: not an XLA buffer assignment")
    totals = [
        int(total)
        for name, color, total in _TOTAL.findall(usage_report or "")
        if _in_device_memory(int(color), tpu, spaces)
    ]
    return {
        "source": "dump",
        "arguments_bytes": arguments,
        "outputs_bytes": outputs,
        "aliased_bytes": aliased,
        "temporaries_bytes": temp,
        "generated_code_bytes": None,
        "available_bytes": None,
        "reserved_bytes": None,
        "need_bytes": arguments + outputs - aliased + temp,
        "complete": not tpu,
        "largest": hlo.get("largest", []),
        "donatable_bytes": hlo.get("donatable_bytes", 0),
        "compiler_error": None,
        "allocated_bytes": sum(totals) if totals else counted,
    }


# Layout::kHostMemorySpace: an array XLA:GPU or XLA:CPU keeps in pinned host memory (S(5)).
HOST_MEMORY_SPACE = 5


def _in_device_memory(color: int, tpu: bool, spaces: dict[int, str]) -> bool:
    """Whether a buffer assignment's memory space (its color) is the device's own memory, the
    one a step must fit in. XLA:TPU: only the default space (0, HBM); its others are on-chip
    (1 ``vmem``, 2 ``smem``) or the host. XLA:GPU and XLA:CPU: every space but the host's. On GPU
    the others are device memory set apart: NCCL's collective memory (1), the temporaries with
    ``--xla_gpu_temp_buffer_use_separate_color`` (2, which the usage report still names
    ``smem``, TPU's word), and the spaces newer XLA numbers further (MaxText's temporaries in 7)."""
    if tpu:
        return color == 0
    return color != HOST_MEMORY_SPACE and spaces.get(color) != "host"


def _global_bytes(buffer: Buffer) -> float:
    """The whole array's bytes: the per-device bytes times how many shards its shape makes."""
    dims = [re.findall(r"\d+", m) for m in (buffer.shape, buffer.global_shape) if "[" in m]
    if len(dims) != 2:
        return float(buffer.bytes)
    local, whole = (math.prod(int(d) for d in found) for found in dims)
    return buffer.bytes * whole / local if local else float(buffer.bytes)


def _size(match: re.Match | None) -> float | None:
    return float(match["size"]) * _UNITS[match["unit"]] if match else None


def from_module(module: Module) -> dict:
    """What the HLO text alone says: entry parameters and outputs; temporaries are unknown, but
    the entry's largest intermediate results are listed (not all of them are live at once)."""
    entry = module.entry
    parameters = [
        Buffer(p.name, "parameter", _bytes(p.shape), str(p.shape)) for p in entry.parameters
    ]
    returned = _returned(entry.root)
    # Only the LARGEST largest results are listed: each result's bytes (once per shape: results
    # share them), and Buffers made of those alone, in the order sorting them all would give
    # (heapq.nlargest is that order, without an index list of every instruction at the peak).
    sizes: dict[int, int] = {}
    candidates = [
        i for i in entry.instructions if i.opcode not in NAMING_OPS and i is not entry.root
    ]
    weights = []
    for i in candidates:
        size = sizes.get(id(i.shape))
        if size is None:
            size = sizes[id(i.shape)] = _bytes(i.shape)
        weights.append(size)
    results = [
        Buffer(i.name, "output" if i.name in returned else "temporary", weights[k], str(i.shape))
        for k in heapq.nlargest(LARGEST, range(len(candidates)), key=weights.__getitem__)
        for i in (candidates[k],)
    ]
    outputs = entry.root.shape.leaves() if entry.root is not None else []
    aliased_outputs = _aliased_output_indices(module.attrs.get("input_output_alias", ""))
    output_bytes = [array_bytes(s) for s in outputs]
    aliased = sum(b for i, b in enumerate(output_bytes) if i in aliased_outputs)
    arguments = sum(b.bytes for b in parameters)
    unaliased = [s for i, s in enumerate(outputs) if i not in aliased_outputs]
    return {
        "source": "hlo",
        "arguments_bytes": arguments,
        "outputs_bytes": sum(output_bytes),
        "aliased_bytes": aliased,
        "temporaries_bytes": None,
        "generated_code_bytes": None,
        "available_bytes": None,
        "reserved_bytes": None,
        "need_bytes": arguments + sum(output_bytes) - aliased,
        "complete": False,
        "largest": _largest([*parameters, *results]),
        "donatable_bytes": _matching_bytes(parameters, unaliased),
        "compiler_error": None,
    }


def largest_temporaries(memory: dict) -> list[Buffer]:
    """The results :func:`from_module` listed, to carry into the compiler's figures."""
    return [Buffer(**b) for b in memory.get("largest", ()) if b["kind"] != "parameter"]


def _returned(root) -> set[str]:
    """Instructions whose results are the step's outputs (through tuples and views of them)."""
    seen: set[str] = set()
    stack = [root] if root is not None else []
    while stack:
        instr = stack.pop()
        if instr.name in seen:
            continue
        seen.add(instr.name)
        if instr.opcode in ("tuple", "get-tuple-element", "bitcast"):
            stack.extend(instr.operands)
    return seen


def judge(memory: dict | None, chip) -> dict:
    """Summary entries for ``chip``: capacity per device, share used, verdict and remedies as
    codes (:data:`schema.FIT_VERDICTS`, :data:`schema.ADVICE_CODES`); :func:`describe` words them."""
    return {"memory_fit": fit_of(memory, chip.per_device().hbm_capacity if chip else None)}


def fit_of(memory: dict | None, capacity: float | None) -> schema.MemoryFit | None:
    """The need in ``memory`` against one device's ``capacity`` bytes (None without either): what
    :func:`judge` says, and what a report read back is held to (``evidence``)."""
    if not memory or not capacity:
        return None
    reserved = memory.get("reserved_bytes")  # the compiler's own share, where it said
    need = float(memory["need_bytes"]) + (reserved or 0.0)
    used = need / capacity
    if used > 1:
        verdict = DOES_NOT_FIT
    elif not memory["complete"]:
        verdict = UNKNOWN  # temporaries unknown: the need is only a lower bound
    elif used > TIGHT:
        verdict = TIGHT_FIT
    else:
        verdict = FITS
    fit: schema.MemoryFit = {
        "verdict": verdict,
        "need_bytes": need,
        "capacity_bytes": float(capacity),
        "reserved_bytes": reserved,
        "used_fraction": used,
        "advice": _advice(memory, need, capacity, verdict),
    }
    return fit


def verdict_of(fit: dict) -> str:
    """A fit's verdict code; a report written before the codes said ``does not fit``."""
    verdict = fit.get("verdict", UNKNOWN)
    return _OLD_VERDICTS.get(verdict, verdict)


def verdict_text(fit: dict) -> str:
    """The verdict in words: ``does_not_fit`` → ``does not fit``."""
    return verdict_of(fit).replace("_", " ")


def advice_text(advice: dict | str) -> str:
    """One remedy in words, with its numbers (an older report's advice is words already)."""
    if isinstance(advice, str):
        return advice
    code, gb = advice["code"], lambda key: f"{advice[key] / 1e9:.2f} GB"
    if code == "donate":
        return (
            "donate the inputs the step returns updated (parameters, optimizer state: "
            f"jax.jit(..., donate_argnums=...)): saves up to {gb('saves_bytes')} per device"
        )
    if code == "remat":
        return (
            f"rematerialise activations (jax.checkpoint): temporaries are "
            f"{gb('temporaries_bytes')} of the {gb('need_bytes')}"
        )
    rest = (
        "temporaries, activations at a fixed per-device batch"
        if advice["fixed_split"]
        else "outputs, temporaries, reserved space: the compiler's error does not split them"
    )
    assumes = (
        f"assuming parameters and optimizer state ({gb('state_bytes')} per device) shard over "
        f"FSDP / ZeRO and the other {gb('fixed_bytes')} ({rest}) do not shrink"
    )
    if code == "shard_not_enough":
        return (
            f"sharding over more devices is not enough, {assumes}: rematerialise or shrink "
            "the per-device batch"
        )
    if code == "shard_to_room":
        return (
            f"shard parameters and optimizer state over enough devices that they take at "
            f"most {gb('room_bytes')} per device, {assumes}"
        )
    if code == "shard_over":
        devices, count = advice["devices"], advice["slice_devices"]
        where = (
            f"the {devices} devices it has" if count == devices
            else f"a {count}-chip slice ({advice['slice_shape']}, now {devices})"
        )  # fmt: skip
        return f"shard over {where}: about {gb('per_device_bytes')} per device, {assumes}"
    if code == "no_slice":
        return f"no slice of this chip is big enough, {assumes}"
    raise ValueError(f"unknown memory advice {code!r}")


def describe(summary: dict) -> list[str]:
    """The fit in words, for the CLI and the demo: one line, then the largest buffers and the
    remedies when it does not fit (or is tight)."""
    memory, fit = summary.get("memory"), summary.get("memory_fit")
    if not memory:
        return []
    if not fit:
        bound = "" if memory["complete"] else " at least"
        return [f"HBM per device:{bound} {memory['need_bytes'] / 1e9:.3g} GB (no chip to fit)"]
    lines = [
        f"HBM per device: {fit['need_bytes'] / 1e9:.3g} GB of {fit['capacity_bytes'] / 1e9:.3g} GB "
        f"({fit['used_fraction']:.0%}): {verdict_text(fit)}"
        + {"compiler error": " (the compiler refused the program)", "hlo": " (temporaries "
           "unknown from HLO text)", "dump": " (the dump's buffer assignment"
           + ("" if memory["complete"] else "; XLA:TPU adds temporaries after it") + ")"}.get(
            memory["source"], "")
    ]  # fmt: skip
    if memory["source"] == "compiler error":
        lines.append("  " + _refused_figures(memory))
    if verdict_of(fit) in (DOES_NOT_FIT, TIGHT_FIT):
        largest = ", ".join(
            f"{b['name']} {b['bytes'] / 1e9:.3g} GB" for b in memory.get("largest", [])[:3]
        )
        if largest:
            lines.append(f"  largest: {largest}")
        lines += [f"  try: {advice_text(advice)}" for advice in fit["advice"]]
    return lines


def _refused_figures(memory: dict) -> str:
    """Per device, what the compiler's refusal says: its need, what it had, the arguments."""
    parts = []
    if memory["complete"]:
        parts.append(f"the compiler needs {memory['need_bytes'] / 1e9:.3g} GB")
    if memory.get("available_bytes"):
        parts.append(f"has {memory['available_bytes'] / 1e9:.3g} GB for the program")
    parts.append(f"arguments {memory['arguments_bytes'] / 1e9:.3g} GB")
    devices = memory.get("devices")
    where = f" on each of {devices} devices" if devices and devices > 1 else ""
    return "per device" + where + ": " + ", ".join(parts)


def _state_bytes(memory: dict) -> float:
    """What FSDP / ZeRO shards: the step's inputs and the outputs that are not their updates in
    place (parameters, optimizer state, their updates); the rest (temporaries, code, reserved
    space) is assumed not to shrink, as activations do not at a fixed per-device batch."""
    state = float(memory.get("arguments_bytes") or 0)
    outputs, aliased = memory.get("outputs_bytes"), memory.get("aliased_bytes")
    if outputs is not None:
        state += max(float(outputs) - float(aliased or 0), 0.0)
    return state


def _shard_advice(memory: dict, need: float, target: float) -> dict | None:
    """The smallest slice of the chip on which sharding the state alone brings the need under
    ``target``; with the assumption's figures, and no device count that is not a real slice."""
    state = min(_state_bytes(memory), need)
    if state <= 0:
        return None
    fixed = need - state
    devices = memory.get("devices") or 1
    assumed = {
        "state_bytes": state,
        "fixed_bytes": fixed,
        # the rest split into temporaries and activations only where the outputs are known
        "fixed_split": memory.get("outputs_bytes") is not None,
    }
    if fixed >= target:
        return {"code": "shard_not_enough", **assumed}
    slices = [(int(n), str(shape)) for n, shape in memory.get("slices") or ()]
    if not slices:
        return {"code": "shard_to_room", "room_bytes": target - fixed, **assumed}
    # The whole program's state, where known (replicated arguments shard too): over ``count``
    # devices, each holds its share of it; else what each holds now shrinks by devices / count.
    whole = memory.get("arguments_global_bytes")
    if not whole or memory.get("outputs_bytes") is not None:
        whole = state * devices
    for count, shape in sorted(slices):
        after = fixed + min(whole / count, state)
        if count < devices or after > target:
            continue
        return {
            "code": "shard_over",
            "devices": devices,
            "slice_devices": count,
            "slice_shape": shape,
            "per_device_bytes": after,
            **assumed,
        }
    return {"code": "no_slice", **assumed}


def _advice(memory: dict, need: float, capacity: float, verdict: str) -> list[dict]:
    """The book's first moves, with this step's numbers (largest saving first), as codes."""
    if verdict not in (DOES_NOT_FIT, TIGHT_FIT):
        return []
    advice: list[dict] = []
    target = capacity * TIGHT
    donatable = memory.get("donatable_bytes") or 0
    if donatable:
        advice.append({"code": "donate", "saves_bytes": float(donatable)})
    if need > target:
        shard = _shard_advice(memory, need, target)
        if shard:
            advice.append(shard)
    temporaries = memory.get("temporaries_bytes")
    if temporaries and temporaries > 0.25 * need:
        advice.append(
            {"code": "remat", "temporaries_bytes": float(temporaries), "need_bytes": need}
        )
    return advice


def _largest(buffers: list[Buffer]) -> list[dict]:
    return [b.as_dict() for b in sorted(buffers, key=lambda b: -b.bytes)[:LARGEST]]


def _bytes(shape) -> int:
    return sum(array_bytes(s) for s in shape.leaves())


def _matching_bytes(parameters: list[Buffer], outputs) -> int:
    """Bytes of parameters an output could take the place of (same shape and type, unaliased)."""
    free = [str(s).split("{")[0] for s in outputs]
    total = 0
    for p in parameters:
        spelled = p.shape.split("{")[0]
        if spelled in free:
            free.remove(spelled)
            total += p.bytes
    return total


def _aliased_output_indices(text: str) -> set[int]:
    """Top-level output indices in ``input_output_alias={ {0}: (0, {}, may-alias), ... }``."""
    return {int(i) for i in re.findall(r"\{(\d+)(?:,\s*\d+)*\}\s*:", text)}
