"""An ``--xla_dump_to`` folder's files: its optimized modules and their keys, each module as
XLA:TPU compiled it (its ``after_codegen`` file), the files beside it, and where its devices sit
(the compile options' device assignment on the slice its topology file describes)."""

from __future__ import annotations

import codecs
import re
from pathlib import Path

from hlo_roofline import chips, targets
from hlo_roofline.hlo.files import GZIP_SUFFIX
from hlo_roofline.judge import interconnect

DUMP_SUFFIX = "after_optimizations.txt"


def dump_files(directory: str | Path, module: str | None = None) -> list[Path]:
    """The optimized modules of an ``--xla_dump_to`` directory (``*after_optimizations.txt``),
    those whose file name matches the regex ``module`` if given."""
    found = (*Path(directory).rglob(f"*{DUMP_SUFFIX}"), *Path(directory).rglob(f"*{DUMP_SUFFIX}.gz"))
    files = sorted(p for p in found if p.is_file())
    return [f for f in files if re.search(module, f.name)] if module else files


def module_key(path: Path) -> str:
    """``module_0000.jit_f.cpu_after_optimizations.txt`` → ``module_0000.jit_f.cpu``; ``a.txt`` → ``a``."""
    return re.sub(r"[._]?after_optimizations\.txt$|\.txt$", "", path.name.removesuffix(GZIP_SUFFIX))


def as_compiled(path: Path) -> Path:
    """The dump's module as compiled: its ``after_codegen`` file (or ``.gz``) where there is one."""
    name = path.name.removesuffix(GZIP_SUFFIX)
    if not name.endswith(DUMP_SUFFIX):
        return path
    return beside(path, name.removesuffix(DUMP_SUFFIX) + CODEGEN_SUFFIX) or path


def beside(path: Path, name: str) -> Path | None:
    """The file ``name`` (or ``name.gz``) in ``path``'s folder, if there is one."""
    for candidate in (path.with_name(name), path.with_name(name + GZIP_SUFFIX)):
        if candidate.is_file():
            return candidate
    return None


def dump_topology(path: Path, chip: chips.Chip | None) -> interconnect.Topology | None:
    """Where the devices of a dump's TPU module sit, from what XLA:TPU writes in the folder named
    after the module: its compile options (the device assignment: each partition's, or replica's,
    device id) and its topology (the slice's chips per host and hosts). The devices are those of
    the same compile-only topology, in the program's order. None where the folder, either file,
    or a device the assignment names is not there: the places are then inferred."""
    folder = path.with_name(path.name.removesuffix(GZIP_SUFFIX).removesuffix(DUMP_SUFFIX).rstrip("._"))
    options, topology = folder / "compile_options.textproto", folder / "topology.textproto"
    if not (options.is_file() and topology.is_file()):
        return None
    ids = _assigned_devices(options.read_text(encoding="utf-8", errors="replace"))
    bounds = _slice_bounds(topology.read_text(encoding="utf-8", errors="replace"))
    if not ids or bounds is None or chip is None:
        return None
    shapes = ["x".join(map(str, bounds))]  # a 2D chip's slice is named by its two axes
    if bounds[2] == 1:
        shapes.append("x".join(map(str, bounds[:2])))
    for shape in shapes:
        try:
            devices = {d.id: d for d in targets.devices(f"{chip.key}:{shape}")}
        except Exception:  # not this chip's form of slice, or no compile-only topology here
            continue
        if all(i in devices for i in ids):
            return interconnect.from_devices([devices[i] for i in ids], chip)
    return None


def _assigned_devices(options: str) -> list[int]:
    """The device ids of a ``CompileOptions`` text's ``device_assignment``, in the program's
    order: one computation (replicas), or one replica of each computation (partitions)."""
    found = re.search(r"device_assignment \{(.*?)\n  \}", options, re.DOTALL)
    if found is None:
        return []
    computations = [
        [int(i) for i in re.findall(r"replica_device_ids: (\d+)", block)]
        for block in re.findall(r"computation_devices \{(.*?)\}", found.group(1), re.DOTALL)
    ]
    if len(computations) == 1:
        return computations[0]
    if all(len(c) == 1 for c in computations):
        return [c[0] for c in computations]
    return []  # replicas of several partitions: their order is not needed so far


def _slice_bounds(topology: str) -> tuple[int, int, int] | None:
    """The slice's chips along each axis, from a ``topology.textproto``'s TPU topology (a
    ``TpuPjRtTopologyDescriptionProto``: chips per host × hosts, fields 5 and 6 of field 1)."""
    found = re.search(r'value: "((?:[^"\\]|\\.)*)"', topology)
    if found is None or "TpuPjRtTopologyDescriptionProto" not in topology:
        return None
    try:
        data = codecs.escape_decode(found.group(1).encode("latin-1"))[0]
        inner = _proto_fields(_proto_fields(data)[1][0])
        per_host, hosts = (_proto_fields(inner[n][0]) for n in (5, 6))
        return tuple(per_host[k][0] * hosts[k][0] for k in (1, 2, 3))  # type: ignore[return-value]
    except (KeyError, IndexError, ValueError, TypeError):
        return None


def _proto_fields(data: bytes) -> dict[int, list]:
    """A protobuf message's fields by number: varints as ints, length-delimited as bytes."""
    fields: dict[int, list] = {}
    at = 0

    def varint() -> int:
        nonlocal at
        value = shift = 0
        while True:
            byte = data[at]
            at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    while at < len(data):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            fields.setdefault(number, []).append(varint())
        elif wire == 2:
            size = varint()
            fields.setdefault(number, []).append(data[at : at + size])
            at += size
        else:
            raise ValueError(f"wire type {wire}")
    return fields


CODEGEN_SUFFIX = "after_codegen.txt"  # XLA:TPU's module after code generation, in a dump
