"""Decode the XSpace protobuf that ``jax.profiler`` writes (``*.xplane.pb``) without TensorFlow.

The schema is a subset of ``tsl/profiler/protobuf/xplane.proto`` (package ``tensorflow.profiler``)
plus the ``xla.HloProto`` wrapper, built at import time with ``descriptor_pb2``: the ``protobuf``
package is the only dependency, and no generated code is vendored. Unknown fields are kept by
protobuf, so newer traces with extra fields still parse.

:func:`load` gives :class:`Plane` objects whose events carry resolved names, absolute times and
stats merged from the event's metadata (on TPU, ``flops`` and ``bytes_accessed`` live there).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

__all__ = [
    "Event",
    "Line",
    "Plane",
    "TraceError",
    "hlo_module_bytes",
    "load",
    "messages",
    "parse_space",
]

_PACKAGE = "tensorflow.profiler"
_F = descriptor_pb2.FieldDescriptorProto
_OPTIONAL, _REPEATED = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
_TYPES = {
    "int64": _F.TYPE_INT64,
    "uint64": _F.TYPE_UINT64,
    "double": _F.TYPE_DOUBLE,
    "string": _F.TYPE_STRING,
    "bytes": _F.TYPE_BYTES,
}

# message -> [(field, number, type or message name, repeated, oneof index)]
_SCHEMA: dict[str, list[tuple[str, int, str, bool, int | None]]] = {
    "XSpace": [
        ("planes", 1, "XPlane", True, None),
        ("errors", 2, "string", True, None),
        ("warnings", 3, "string", True, None),
        ("hostnames", 4, "string", True, None),
    ],
    "XPlane": [
        ("id", 1, "int64", False, None),
        ("name", 2, "string", False, None),
        ("lines", 3, "XLine", True, None),
        ("event_metadata", 4, "XPlane.EventMetadataEntry", True, None),
        ("stat_metadata", 5, "XPlane.StatMetadataEntry", True, None),
        ("stats", 6, "XStat", True, None),
    ],
    "XLine": [
        ("id", 1, "int64", False, None),
        ("display_id", 10, "int64", False, None),
        ("name", 2, "string", False, None),
        ("display_name", 11, "string", False, None),
        ("timestamp_ns", 3, "int64", False, None),
        ("duration_ps", 9, "int64", False, None),
        ("events", 4, "XEvent", True, None),
    ],
    "XEvent": [
        ("metadata_id", 1, "int64", False, None),
        ("offset_ps", 2, "int64", False, 0),
        ("num_occurrences", 5, "int64", False, 0),
        ("duration_ps", 3, "int64", False, None),
        ("stats", 4, "XStat", True, None),
    ],
    "XStat": [
        ("metadata_id", 1, "int64", False, None),
        ("double_value", 2, "double", False, 0),
        ("uint64_value", 3, "uint64", False, 0),
        ("int64_value", 4, "int64", False, 0),
        ("str_value", 5, "string", False, 0),
        ("bytes_value", 6, "bytes", False, 0),
        ("ref_value", 7, "uint64", False, 0),
    ],
    "XEventMetadata": [
        ("id", 1, "int64", False, None),
        ("name", 2, "string", False, None),
        ("display_name", 4, "string", False, None),
        ("metadata", 3, "bytes", False, None),
        ("stats", 5, "XStat", True, None),
        ("child_id", 6, "int64", True, None),
    ],
    "XStatMetadata": [
        ("id", 1, "int64", False, None),
        ("name", 2, "string", False, None),
        ("description", 3, "string", False, None),
    ],
    # xla.HloProto, reduced to the field that holds the module (kept in the same file for brevity).
    "HloProto": [("hlo_module", 1, "bytes", False, None)],
}
_MAPS = {  # XPlane's map<int64, ...> fields, as proto3 map entries
    "EventMetadataEntry": "XEventMetadata",
    "StatMetadataEntry": "XStatMetadata",
}
_ONEOFS = {"XEvent": "data", "XStat": "value"}


def _add_field(message, name: str, number: int, kind: str, repeated: bool, oneof: int | None):
    f = message.field.add(name=name, number=number, label=_REPEATED if repeated else _OPTIONAL)
    if kind in _TYPES:
        f.type = _TYPES[kind]
    else:
        f.type = _F.TYPE_MESSAGE
        f.type_name = f".{_PACKAGE}.{kind}"
    if oneof is not None:
        f.oneof_index = oneof


def _build_messages() -> dict[str, type]:
    """Message classes for the schema subset, in a private descriptor pool."""
    file = descriptor_pb2.FileDescriptorProto(
        name="hlo_roofline/xplane_subset.proto", package=_PACKAGE, syntax="proto3"
    )
    for message_name, fields in _SCHEMA.items():
        message = file.message_type.add(name=message_name)
        if message_name in _ONEOFS:
            message.oneof_decl.add(name=_ONEOFS[message_name])
        for spec in fields:
            _add_field(message, *spec)
        if message_name == "XPlane":
            for entry_name, value_type in _MAPS.items():
                entry = message.nested_type.add(name=entry_name)
                entry.options.map_entry = True
                _add_field(entry, "key", 1, "int64", False, None)
                _add_field(entry, "value", 2, value_type, False, None)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"))
        for name in _SCHEMA
    }


messages: dict[str, type] = _build_messages()
"""The runtime-built message classes by name (``messages["XSpace"]()`` builds a trace in tests)."""


class TraceError(ValueError):
    """A profile that cannot be read: missing, truncated, corrupt, or not a jax.profiler trace."""


# -- decoded view ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Event:
    """One timed event: name, absolute start and duration in picoseconds, merged stats."""

    name: str
    start_ps: int
    duration_ps: int
    stats: dict = field(default_factory=dict)

    @property
    def end_ps(self) -> int:
        return self.start_ps + self.duration_ps


@dataclass(frozen=True, slots=True)
class Line:
    """One timeline of a plane (a thread on the host, a stream or ``XLA Ops`` on a device)."""

    id: int
    name: str
    events: list[Event]


@dataclass(frozen=True, slots=True)
class Plane:
    """One plane: its lines, plane-level stats, and its event metadata (name → merged stats)."""

    id: int
    name: str
    lines: list[Line]
    stats: dict
    metadata: dict[int, tuple[str, dict]]

    def line(self, name: str) -> Line | None:
        return next((line for line in self.lines if line.name == name), None)

    def events(self) -> Iterator[tuple[Line, Event]]:
        for line in self.lines:
            for event in line.events:
                yield line, event


def _stat_value(stat, stat_names: dict[int, str]):
    kind = stat.WhichOneof("value")
    if kind is None:
        return None
    if kind == "ref_value":
        return stat_names.get(stat.ref_value, "")
    return getattr(stat, kind)


def _stats(stats, stat_names: dict[int, str]) -> dict:
    return {
        stat_names.get(s.metadata_id, str(s.metadata_id)): _stat_value(s, stat_names) for s in stats
    }


def _plane(raw) -> Plane:
    stat_names = {key: entry.name for key, entry in raw.stat_metadata.items()}
    metadata = {
        key: (entry.name, _stats(entry.stats, stat_names))
        for key, entry in raw.event_metadata.items()
    }
    lines = []
    for raw_line in raw.lines:
        base_ps = raw_line.timestamp_ns * 1000
        events = []
        for raw_event in raw_line.events:
            name, meta_stats = metadata.get(raw_event.metadata_id, ("", {}))
            stats = {**meta_stats, **_stats(raw_event.stats, stat_names)}
            start_ps = base_ps + raw_event.offset_ps
            events.append(Event(name, start_ps, raw_event.duration_ps, stats))
        lines.append(Line(raw_line.id, raw_line.name or raw_line.display_name, events))
    return Plane(raw.id, raw.name, lines, _stats(raw.stats, stat_names), metadata)


def parse_space(data: bytes, source: str = "XSpace") -> list[Plane]:
    """Decode serialized XSpace bytes into planes; :class:`TraceError` if they are not one."""
    if not data:
        raise TraceError(f"{source} is empty")
    space = messages["XSpace"]()
    try:
        space.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise TraceError(f"{source} is not a readable XSpace ({exc})") from None
    if not space.planes:
        raise TraceError(f"{source} holds no planes (truncated, or not an xplane.pb)")
    try:
        return [_plane(p) for p in space.planes]
    except (UnicodeDecodeError, ValueError) as exc:  # fields that decode but are inconsistent
        raise TraceError(f"{source} is not a readable XSpace ({exc})") from None


def load(path: str | os.PathLike) -> list[Plane]:
    """Read and decode one ``*.xplane.pb`` file."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TraceError(f"cannot read {path}: {exc.strerror or exc}") from None
    return parse_space(data, str(path))


def hlo_module_bytes(hlo_proto: bytes) -> bytes:
    """The serialized ``HloModuleProto`` inside a serialized ``xla.HloProto`` (trace metadata)."""
    wrapper = messages["HloProto"]()
    try:
        wrapper.ParseFromString(hlo_proto)
    except DecodeError as exc:
        raise TraceError(f"embedded HLO proto is corrupt ({exc})") from None
    return wrapper.hlo_module
