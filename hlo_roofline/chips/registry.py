"""The chip registry: every known chip by key, alias or jax ``device_kind``, close matches for a
name it does not know, chips loaded from files or registered from code, and chips made on first
use (``"host"``)."""

from __future__ import annotations

import difflib
import re
import threading
import tomllib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import MappingProxyType

from hlo_roofline.chips.loader import DATA_FILE, _build, read_file
from hlo_roofline.chips.model import PROFILES, Chip, Source, UnknownChipError


def _norm(name: str) -> str:
    return re.sub(r"[^0-9a-z]+", "", str(name).lower())


_raw: dict[str, tuple[Mapping, str | None]] = {}  # key -> (data-file table, default source key)
_custom: dict[str, Chip] = {}  # key -> chip registered from code
_aliases: dict[str, str] = {}  # normalized name -> key
_sources: dict[str, Source] = {}
_cache: dict[tuple[str, str], Chip] = {}
_loaded = False
_loading = threading.Lock()  # a server's first requests may all ask at once


def _ensure_loaded() -> None:
    global _loaded
    if _loaded:
        return
    with _loading:
        if not _loaded:
            _load_data(tomllib.loads(DATA_FILE.read_text()), str(DATA_FILE), None)
            _loaded = True  # only once complete: another thread must not see a half-loaded table


def _add_aliases(key: str, names: Iterable[str]) -> None:
    for n in (key, *names):
        _aliases[_norm(n)] = key


def _load_data(data: Mapping, origin: str, default_source: str | None) -> list[str]:
    """Register the chips of one parsed file; later registrations win over earlier ones."""
    for k, s in data.get("sources", {}).items():
        _sources[k] = Source(k, s.get("title", ""), s.get("url", ""))
    if default_source:
        _sources.setdefault(
            default_source, Source(default_source, f"unsourced numbers in {origin}", origin)
        )
    chips = data.get("chips")
    if not isinstance(chips, Mapping) or not chips:
        raise ValueError(f"{origin}: expected a [chips.<key>] table")
    for key, raw in chips.items():  # validate everything before registering anything
        for profile in PROFILES:
            _build(key, raw, profile, default_source, _sources)
    for key, raw in chips.items():
        _raw[key] = (raw, default_source)
        _custom.pop(key, None)
        _add_aliases(key, [raw.get("name", key), *raw.get("aliases", ())])
    _cache.clear()
    return list(chips)


def load_file(path: str | Path) -> list[Chip]:
    """Register the chips of a TOML or JSON file (same schema as ``data/chips.toml``).

    User files may give bare numbers: they are then cited as ``file:<name>``. A chip key that is
    already known is replaced. Returns the file's chips (vendor profile).
    """
    _ensure_loaded()
    path = Path(path)
    keys = _load_data(read_file(path), str(path), f"file:{path.name}")
    return [get(k) for k in keys]


def register(chip: Chip) -> Chip:
    """Make :func:`get` find a chip built in code (e.g. by :meth:`Chip.custom`) by key or alias."""
    _ensure_loaded()
    for k in {k for s in chip.sources.values() for k in s.keys} - set(_sources):
        _sources[k] = Source(k, "user-supplied numbers (Chip.custom)")
    _custom[chip.key] = chip
    _add_aliases(chip.key, [chip.name, *chip.aliases])
    _cache.clear()
    return chip


def reset() -> None:
    """Forget chips loaded from user files or registered from code (the built-in data reloads)."""
    global _loaded
    for d in (_raw, _custom, _aliases, _sources, _cache):
        d.clear()
    _loaded = False


def names() -> list[str]:
    """Canonical chip keys, in data-file order, then chips registered from code."""
    _ensure_loaded()
    return list(dict.fromkeys([*_raw, *_custom]))


def resolve(name: str) -> str:
    """The canonical key for a key, alias or device name (case, spaces and dashes ignored)."""
    _ensure_loaded()
    norm = _norm(name)
    if norm in _aliases:
        return _aliases[norm]
    close = difflib.get_close_matches(norm, list(_aliases), n=8, cutoff=0.6)
    close += [a for a in _aliases if norm and (norm in a or a in norm)]
    matches = list(dict.fromkeys(_aliases[a] for a in close))[:5]
    raise UnknownChipError(name, matches, names())


HOST = "host"  # this machine's CPU, measured by hlo_roofline.host

# Chips made on first use (name -> factory): hlo_roofline.host provides "host", measuring this
# machine's CPU, so the database needs no import of what measures it.
_providers: dict[str, Callable[[], Chip]] = {}


def provide(name: str, factory: Callable[[], Chip]) -> None:
    """Make ``chips.get(name)`` call ``factory`` (once it has registered a chip, that one is used)."""
    _providers[name.strip().lower()] = factory


def get(name: str | Chip, profile: str = "vendor") -> Chip:
    """Look a chip up by key, alias or jax ``device_kind`` (``"host"``: this machine's CPU,
    measured on first use); raise :class:`UnknownChipError` with close matches."""
    if isinstance(name, Chip):
        return name
    if isinstance(name, str) and name.strip().lower() in _providers:
        key = name.strip().lower()
        if key not in _custom:
            return _providers[key]()
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; expected one of {PROFILES}")
    key = resolve(name)
    if key in _custom:
        return _custom[key]
    if (key, profile) not in _cache:
        raw, default_source = _raw[key]
        _cache[key, profile] = _build(key, raw, profile, default_source, _sources)
    return _cache[key, profile]


def all_chips(profile: str = "vendor") -> list[Chip]:
    """Every known chip under one profile."""
    return [get(k, profile) for k in names()]


def source_table() -> Mapping[str, Source]:
    """Source key -> :class:`Source` (title and URL) for every key the numbers cite."""
    _ensure_loaded()
    return MappingProxyType(_sources)
