"""On-demand decoders for instruction attributes (dimension numbers, windows, groups, configs).

The parser keeps attributes as raw text; these helpers decode the few that a rule needs and cache the
result on the instruction, so a 100k-instruction module pays only for what its cost rules read.
"""

from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import dataclass

import numpy as np

from hlo_roofline.hlo.attribution import LAYER_MODULES as LAYER_MODULES  # the older path
from hlo_roofline.hlo.attribution import LIBRARIES as LIBRARIES  # the older path
from hlo_roofline.hlo.attribution import frame_text, frames_of, metadata_source
from hlo_roofline.hlo.ir import Instruction, Metadata, Module

_INT = re.compile(r"-?\d+")
_META_FIELD = re.compile(r'(\w+)=(?:"((?:[^"\\]++|\\.)*+)"|(-?\d+))')


def _cached(instr: Instruction, key: str, compute):
    cache = instr._cache
    if cache is None:
        cache = instr._cache = {}
    if key not in cache:
        cache[key] = compute()
    return cache[key]


def ints(instr: Instruction, key: str) -> tuple[int, ...]:
    """An attribute such as ``dimensions={0,2}`` as a tuple of ints (empty if absent)."""
    value = instr.attrs.get(key)
    return tuple(int(v) for v in _INT.findall(value)) if value else ()


def int_attr(instr: Instruction, key: str, default: int) -> int:
    value = instr.attrs.get(key)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        return default


@dataclass(frozen=True, slots=True)
class DotDims:
    lhs_batch: tuple[int, ...]
    lhs_contracting: tuple[int, ...]
    rhs_batch: tuple[int, ...]
    rhs_contracting: tuple[int, ...]


def dot_dims(instr: Instruction) -> DotDims:
    return _cached(
        instr,
        "dot_dims",
        lambda: DotDims(
            ints(instr, "lhs_batch_dims"),
            ints(instr, "lhs_contracting_dims"),
            ints(instr, "rhs_batch_dims"),
            ints(instr, "rhs_contracting_dims"),
        ),
    )


@dataclass(frozen=True, slots=True)
class WindowDim:
    size: int = 1
    stride: int = 1
    pad_low: int = 0
    pad_high: int = 0
    base_dilation: int = 1  # lhs_dilate
    window_dilation: int = 1  # rhs_dilate


def window(instr: Instruction) -> tuple[WindowDim, ...]:
    """``window={size=3x3 stride=2x2 pad=1_1x1_1 lhs_dilate=.. rhs_dilate=..}`` decoded per dimension."""
    return _cached(instr, "window", lambda: _parse_window(instr.attrs.get("window", "")))


@functools.lru_cache(maxsize=1024)  # a model repeats a few windows over many ops
def _parse_window(text: str) -> tuple[WindowDim, ...]:
    fields: dict[str, list[str]] = {}
    for item in text.strip("{} ").split():
        key, _, value = item.partition("=")
        fields[key] = value.split("x")
    n = len(fields.get("size", []))

    def get(key: str, default: int) -> list[int]:
        values = fields.get(key)
        return [int(v) for v in values] if values else [default] * n

    pads = [p.split("_") for p in fields.get("pad", [])] or [["0", "0"]] * n
    sizes, strides = get("size", 1), get("stride", 1)
    lhs, rhs = get("lhs_dilate", 1), get("rhs_dilate", 1)
    return tuple(
        WindowDim(sizes[i], strides[i], int(pads[i][0]), int(pads[i][1]), lhs[i], rhs[i])
        for i in range(n)
    )


@dataclass(frozen=True, slots=True)
class ConvDims:
    input_batch: int
    input_feature: int
    input_spatial: tuple[int, ...]
    kernel_input_feature: int
    kernel_output_feature: int
    kernel_spatial: tuple[int, ...]
    output_batch: int
    output_feature: int
    output_spatial: tuple[int, ...]


def conv_dims(instr: Instruction) -> ConvDims:
    """``dim_labels=b01f_01io->b01f`` decoded into dimension numbers."""
    return _cached(instr, "conv_dims", lambda: _parse_dim_labels(instr.attrs.get("dim_labels", "")))


def _spatial(labels: str) -> tuple[int, ...]:
    digits = sorted((c, i) for i, c in enumerate(labels) if c.isdigit())
    return tuple(i for _, i in digits)


@functools.lru_cache(maxsize=1024)  # and a few dimension labels
def _parse_dim_labels(text: str) -> ConvDims:
    lhs, _, rest = text.partition("_")
    rhs, _, out = rest.partition("->")
    if not (lhs and rhs and out):
        raise ValueError(f"bad dim_labels '{text}'")
    return ConvDims(
        lhs.index("b"), lhs.index("f"), _spatial(lhs),
        rhs.index("i"), rhs.index("o"), _spatial(rhs),
        out.index("b"), out.index("f"), _spatial(out),
    )  # fmt: skip


_PRECISIONS = ("default", "high", "highest")


def matmul_precision(instr: Instruction) -> str:
    """How a dot or convolution computes f32 inputs: ``default``, ``high``, ``highest``, or an
    explicit algorithm such as ``dot_tf32_tf32_f32`` (``algorithm=``, or a cuBLAS call's
    ``precision_config``). The higher of the two operands' precisions wins."""
    algorithm = instr.attrs.get("algorithm", "")
    levels = [
        p.strip().lower() for p in instr.attrs.get("operand_precision", "").strip("{}").split(",")
    ]
    if instr.opcode == "custom-call":
        config = _field(backend_config(instr), "gemm_backend_config", "precision_config")
        if not isinstance(config, dict):
            return "default"
        algorithm = str(config.get("algorithm", "")).lower().removeprefix("alg_")
        levels = config.get("operand_precision", [])
        levels = [str(p).lower() for p in levels] if isinstance(levels, list) else []
    if algorithm.startswith("dot_"):
        return algorithm
    known = [_PRECISIONS.index(p) for p in levels if p in _PRECISIONS]
    return _PRECISIONS[max(known)] if known else "default"


def backend_config(instr: Instruction) -> dict:
    """The ``backend_config`` JSON as a dict ({} when absent or not JSON)."""
    return _cached(instr, "backend_config", lambda: _parse_json(instr.attrs.get("backend_config")))


def _parse_json(text: str | None) -> dict:
    if not text:
        return {}
    try:
        if text.startswith('"'):
            text = json.loads(text)
        value = json.loads(text)
    except (ValueError, TypeError, RecursionError):  # RecursionError: nested thousands deep
        return {}
    return value if isinstance(value, dict) else {}


_SATURATED_CYCLES = float(2**63 - 1)  # XLA:TPU's int64 estimate at its ceiling


def estimated_cycles(instr: Instruction) -> float | None:
    """XLA:TPU's own cycle estimate for the op as compiled (``"estimated_cycles"`` in its
    ``backend_config``, at any depth), or None where the compiler recorded none or only its
    saturated int64 (2**63 - 1: its cost model gave up, e.g. Gemma's [16, 8192, 8192] scores)."""
    if "estimated_cycles" not in instr.attrs.get("backend_config", ""):
        return None
    found = _find_key(backend_config(instr), "estimated_cycles")
    try:
        cycles = float(found) if found is not None else None
    except (TypeError, ValueError):
        return None
    return None if cycles is None or cycles >= _SATURATED_CYCLES else cycles


def tile_steps(instr: Instruction) -> int:
    """Steps of the tiling loop XLA:TPU compiled an op into: the product of its
    ``window_config.iteration_bounds`` (``backend_config``), for a matmul fusion one step per tile
    of the result (and of K where K is split); 0 where the compiler wrote none (another
    backend)."""
    if "iteration_bounds" not in instr.attrs.get("backend_config", ""):
        return 0
    bounds = _field(backend_config(instr), "window_config", "iteration_bounds")
    if not isinstance(bounds, list) or not bounds:
        return 0
    try:
        return math.prod(int(b) for b in bounds)
    except (TypeError, ValueError):
        return 0


def output_window(instr: Instruction) -> tuple[int, ...]:
    """XLA:TPU's ``window_config.output_window_bounds`` (``backend_config``): the extent of one
    step of the op's tiling loop along each dimension of the array it iterates, in the order the
    compiler lists them (major to minor; the minor-most in 128-lane tiles); () where the compiler
    wrote none."""
    if "output_window_bounds" not in instr.attrs.get("backend_config", ""):
        return ()
    bounds = _field(backend_config(instr), "window_config", "output_window_bounds")
    if not isinstance(bounds, list):
        return ()
    try:
        return tuple(int(b) for b in bounds)
    except (TypeError, ValueError):
        return ()


def _find_key(node, key: str):
    if isinstance(node, dict):
        if key in node:
            return node[key]
        node = list(node.values())
    if isinstance(node, list):
        for value in node:
            if isinstance(value, dict | list) and (found := _find_key(value, key)) is not None:
                return found
    return None


def known_trip_count(instr: Instruction) -> int | None:
    """The loop trip count XLA proved (``backend_config.known_trip_count.n``), if any."""
    n = _field(backend_config(instr), "known_trip_count", "n")
    try:
        n = int(n) if n is not None else None
    except (TypeError, ValueError):
        return None
    return n if n is not None and n >= 0 else None


def metadata(instr: Instruction) -> Metadata:
    return _cached(instr, "metadata", lambda: parse_metadata(instr.attrs.get("metadata", "")))


def parse_metadata(text: str) -> Metadata:
    """A raw ``metadata={...}`` value decoded; fields it lacks (or cannot read) are empty."""
    if not text:
        return Metadata()
    fields = {key: (_unescape(string) if number == "" else _int(number))
              for key, string, number in _META_FIELD.findall(text)}  # fmt: skip
    return Metadata(
        op_name=_text(fields.get("op_name")),
        op_type=_text(fields.get("op_type")),
        source_file=_text(fields.get("source_file")),
        source_line=_number(fields.get("source_line")),
        stack_frame_id=_number(fields.get("stack_frame_id")),
    )


def _int(digits: str) -> int:
    try:
        return int(digits)
    except ValueError:  # thousands of digits: not a line number or frame id
        return 0


def _text(value) -> str:
    return value if isinstance(value, str) else ""


def _number(value) -> int:
    return value if isinstance(value, int) else 0


# XLA prints metadata strings C-escaped (absl::CEscape): \' \" \\ \n \t \r and octal bytes.
_C_ESCAPE = re.compile(r"\\(?:([0-7]{1,3})|x([0-9A-Fa-f]{1,2})|(.))", re.DOTALL)
_OTHER_ESCAPE = re.compile(r"\\[^'\"\\]")  # an escape other than \' \" \\ (or a false hit)
_QUOTE_ESCAPE = re.compile(r"\\(['\"\\])")
_C_SIMPLE = {"n": b"\n", "t": b"\t", "r": b"\r", "a": b"\a", "b": b"\b", "f": b"\f", "v": b"\v"}


def _unescape(text: str) -> str:
    """A C-escaped string as the text it stands for (``state[\\'params\\']`` → ``state['params']``)."""
    if "\\" not in text:
        return text
    if _OTHER_ESCAPE.search(text) is None:  # only \' \" \\ (params['w']): one substitution in C
        return _QUOTE_ESCAPE.sub(r"\1", text)
    out = bytearray()
    pos = 0
    for m in _C_ESCAPE.finditer(text):
        out += text[pos : m.start()].encode()
        octal, hexa, char = m.groups()
        if octal:
            out.append(int(octal, 8) & 0xFF)
        elif hexa:
            out.append(int(hexa, 16))
        else:
            out += _C_SIMPLE.get(char, char.encode())
        pos = m.end()
    out += text[pos:].encode()
    return out.decode("utf-8", "replace")


def source(instr: Instruction, module: Module) -> str:
    """``file:line`` of the Python code that produced the op ('' if unknown)."""
    return metadata_source(metadata(instr), module)


def stack(instr: Instruction, module: Module) -> list[str]:
    """The Python call stack of an op, innermost first, as ``file:line (function)`` strings."""
    return [frame_text(frame) for frame in frames_of(metadata(instr), module)]


def fusion_kind(instr: Instruction) -> str:
    """``kLoop``/``kInput``/``kOutput``/``kCustom``, refined by a backend sub-kind when present."""
    kind = instr.attrs.get("kind", "")
    if "kind" not in instr.attrs.get("backend_config", ""):
        return kind  # no sub-kind in the config: no need to decode it
    config = backend_config(instr)
    sub = _field(config, "fusion_backend_config", "kind") or _field(config, "fusion_config", "kind")
    return f"{kind}:{sub}" if isinstance(sub, str) and sub else kind


def _field(config: dict, *path: str):
    """``config[path[0]][path[1]]...``, or None where a level is missing or not an object."""
    value = config
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


# Device ids are listed (groups expanded, topologies laid out) for programs of at most this many
# devices; a text naming more (2^40 partitions) has its groups unread, not listed for minutes.
MAX_DEVICES = 1 << 15


def _listable(count: int) -> int:
    if count > MAX_DEVICES:
        raise ValueError(f"{count} devices: more than the {MAX_DEVICES} whose ids are listed")
    return count


def replica_groups(instr: Instruction, module: Module) -> list[list[int]]:
    """Every group of a collective as device (partition) ids, from any ``replica_groups`` form.

    Explicit ``{{0,1},{2,3}}``; iota ``[G,S]<=[d0,d1]T(1,0)`` (an iota over the devices, reshaped,
    transposed, cut into G groups of S); mesh ``mesh['a'=4,'b'=2] {'b'}`` (the devices of a
    row-major mesh varying along the named axes); none or ``{}``: every participant in one group.
    """
    return _cached(instr, "groups", lambda: _groups(instr, module))


def participants(instr: Instruction, module: Module) -> int:
    """Devices taking part in a collective when its groups do not list them."""
    if "use_global_device_ids" in instr.attrs:
        return module.replica_count * module.num_partitions
    return module.num_partitions if "channel_id" in instr.attrs else module.replica_count


def _group_form(text: str) -> tuple:
    """The one reader of a ``replica_groups`` text, for both the groups and their size:
    ``("iota", shape, dims, perm)``, ``("mesh", sizes, picked)`` (the axes' sizes, the indices of
    the named ones) or ``("list", groups)`` (each explicit group's ids as text, empty ones left
    out: none at all means every participant in one group)."""
    if text.startswith("["):  # iota form [groups,size]<=[devices]T(perm)
        shape_text, _, devices = text.partition("<=")
        dims_text, _, perm_text = devices.partition("T")
        shape, dims, perm = ([int(d) for d in _INT.findall(s)]
                             for s in (shape_text, dims_text, perm_text))  # fmt: skip
        return "iota", shape, dims, perm
    if text.startswith("mesh"):  # mesh['a'=8,'b'=2] {'a'}
        axes, _, chosen = text.partition("]")
        named = re.findall(r"'([^']+)'=(\d+)", axes)
        picked = [i for i, (name, _) in enumerate(named) if f"'{name}'" in chosen]
        return "mesh", [int(size) for _, size in named], picked
    groups = (_INT.findall(g) for g in re.findall(r"\{([^{}]*)\}", text))
    return "list", [g for g in groups if g]


def _groups(instr: Instruction, module: Module) -> list[list[int]]:
    form = _group_form(instr.attrs.get("replica_groups", "").strip())
    if form[0] == "iota":
        _, shape, dims, perm = form
        ids = np.arange(_listable(math.prod(dims))).reshape(dims)
        if perm:
            ids = ids.transpose(perm)
        return ids.reshape(shape[0], -1).tolist() if shape else [ids.ravel().tolist()]
    if form[0] == "mesh":
        _, sizes, picked = form
        ids = np.arange(_listable(math.prod(sizes))).reshape(sizes)
        kept = [i for i in range(len(sizes)) if i not in picked]
        size = math.prod(sizes[i] for i in picked)
        return ids.transpose(kept + picked).reshape(-1, size).tolist()
    groups = form[1]
    if sum(map(len, groups)) > MAX_DEVICES:
        raise ValueError(f"groups listing more than {MAX_DEVICES} devices")
    return [[int(v) for v in g] for g in groups] or [
        list(range(_listable(participants(instr, module))))
    ]


def replica_group_size(instr: Instruction, module: Module) -> int:
    """Devices in one group of a collective, from any of the three ``replica_groups`` forms."""
    return _cached(instr, "group_size", lambda: _group_size(instr, module))


def _group_size(instr: Instruction, module: Module) -> int:
    """``len(replica_groups(...)[0])`` from the sizes alone (a program too large to list its
    devices still has a group size)."""
    form = _group_form(instr.attrs.get("replica_groups", "").strip())
    if form[0] == "iota":
        _, shape, dims, _ = form
        return math.prod(dims) // shape[0] if shape and shape[0] else math.prod(dims)
    if form[0] == "mesh":
        _, sizes, picked = form
        return math.prod(sizes[i] for i in picked)
    groups = form[1]
    if groups:
        return len(groups[0])
    return participants(instr, module)  # empty groups: every participant of the collective's mode


_ALIAS = re.compile(r"\{([\d,\s]*)\}\s*:\s*\(\s*(\d+)\s*,\s*\{([\d,\s]*)\}\s*\)")


def output_operand_aliasing(
    instr: Instruction,
) -> dict[tuple[int, ...], tuple[int, tuple[int, ...]]]:
    """``output_to_operand_aliasing={{1}: (0, {}), ...}``: result index -> (operand, index in
    it) of each result that shares its operand's buffer (XLA writes it there, in place)."""
    return _cached(instr, "output_to_operand_aliasing", lambda: _aliasing(instr))


def _aliasing(instr: Instruction) -> dict[tuple[int, ...], tuple[int, tuple[int, ...]]]:
    text = instr.attrs.get("output_to_operand_aliasing")
    if not text:
        return {}
    return {
        tuple(map(int, _INT.findall(out))): (int(operand), tuple(map(int, _INT.findall(index))))
        for out, operand, index in _ALIAS.findall(text)
    }


ASYNC_COLLECTIVE_MARKERS = ("AsyncCollectiveStart", "AsyncCollectiveDone")


def collective_marker(instr: Instruction) -> str:
    """``AsyncCollectiveStart``/``Done`` where ``instr`` is the custom call marking a half of a
    TPU async collective, else ``""``."""
    if instr.opcode != "custom-call":
        return ""
    marker = instr.attrs.get("custom_call_target", "").strip('"')
    return marker if marker in ASYNC_COLLECTIVE_MARKERS else ""


def async_marker(fusion: Instruction) -> str:
    """``AsyncCollectiveStart``/``Done`` for the halves of a TPU async collective (a fusion whose
    root is the marker), else ``""``."""
    root = fusion.called[0].root if fusion.called else None
    return collective_marker(root) if root is not None else ""


def in_flight_channels(module: Module) -> frozenset[str]:
    """Channels of the collectives TPU async-collective start fusions launch.

    XLA:TPU fuses the later steps of such a collective into the fusions scheduled while it is in
    flight (a matmul "continuing" an all-gather) and into its done fusion: the same collective,
    same ``channel_id``, already priced at its start.
    """
    channels = set()
    for comp in module.computations.values():
        root = comp.root
        if root is None or collective_marker(root) != ASYNC_COLLECTIVE_MARKERS[0]:
            continue
        channels.update(i.attrs["channel_id"] for i in comp.instructions if "channel_id" in i.attrs)
    return frozenset(channels)
