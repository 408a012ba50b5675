"""Reading chip tables: ``data/chips.toml`` (or a user's TOML/JSON file) into :class:`Chip`
objects, validating every field and that every number cites a known source."""

from __future__ import annotations

import dataclasses
import json
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hlo_roofline.chips.model import (
    KINDS,
    Calibration,
    Chip,
    Ici,
    MemorySpace,
    ScaleUp,
    Sourced,
    _frozen,
)

DATA_FILE = Path(__file__).parent.parent / "data" / "chips.toml"

_SECTIONS = {
    "hbm": {"capacity", "bandwidth"},
    "vpu": {"per", "flops"},
    "eup": {"per", "rate"},
    "ici": {f.name for f in dataclasses.fields(Ici) if not f.name.startswith("wraparound_")}
    | {"wraparound"},  # { multiple_of = 4 } or { sizes = [16] }
    "scaleup": {f.name for f in dataclasses.fields(ScaleUp)},
    "network": {"dcn_per_chip", "scaleout_per_node"},
    "host": {"pcie", "pcie_bidirectional", "c2c", "link"},
}
_TOP_KEYS = {"name", "kind", "vendor", "status", "aliases", "cores", "megacore", "mxu", "flops"}
_TOP_KEYS |= {"clock", "memory", "book", "calibrated", *_SECTIONS}
# [chips.X.calibrated]: each key and the Calibration field it loads into (rates given ``per`` a
# unit are multiplied up to the whole chip). Only the expected model reads them.
CALIBRATED = {
    "op_floor": "op_floor_s",
    "tile_step": "tile_step_s",
    "matmul_stream": "matmul_stream_bandwidth",
    "loop_elements": "vector_elements_rate",
    "loop_reads": "loop_read_bytes",
    "fill": "fill_rate",
    "lane_reduce": "lane_reduce_rate",
    "major_reduce": "major_reduce_rate",
    "reduced_stream": "reduced_stream_rate",
    "depthwise_taps": "depthwise_tap_rate",
    "expanded_elements": "expanded_elements_rate",
    "sublane_fold": "sublane_fold_rate",
    "folded_product": "folded_product_rate",
    "relayout": "relayout_rate",
    "weight_load": "weight_load_rate",
    "weight_load_overhead": "weight_load_overhead_s",
    "epilogue_passes": "epilogue_passes",
    "epilogue_passes_k_whole": "epilogue_passes_k_whole",
    "prologue_passes": "prologue_passes",
    "matmul_efficiency": "matmul_efficiency",
    "memory_efficiency": "memory_efficiency",
    "occupancy_bandwidth": "occupancy_bandwidth",
    "dcn_efficiency": "dcn_efficiency",
    "dcn_step": "dcn_step_s",
    "kernel_efficiency": "kernel_efficiency",
    "conv_efficiency": "conv_efficiency",
    "conv_narrow_efficiency": "conv_narrow_efficiency",
    "launch_gap": "launch_gap_s",
    "dispatch": "dispatch_s",
    "dispatch_per_argument": "dispatch_per_argument_s",
}
_LEAF_FIELDS = ("source", "note", "kind", "fitted_on", "per")


def _merge(base: Mapping, over: Mapping) -> dict:
    """Deep-merge a profile's overrides into the chip table (a sourced leaf is replaced whole)."""
    out = dict(base)
    for k, v in over.items():
        both_tables = isinstance(v, Mapping) and isinstance(out.get(k), Mapping)
        out[k] = _merge(out[k], v) if both_tables and "source" not in v else v
    return out


def _kind(node: Mapping, path: str, keys: tuple[str, ...]) -> str:
    """A leaf's kind: as written, else ``calibrated`` in a calibrated section, ``derived`` where
    it cites ``derived``, ``fact`` otherwise; a calibrated number names its fixtures and sits in
    the calibrated section, and no other number does."""
    calibrated = path.startswith("calibrated.")
    kind = node.get("kind") or (
        "calibrated" if calibrated else "derived" if "derived" in keys else "fact"
    )
    if kind not in KINDS:
        raise ValueError(f"{path}: kind {kind!r} is none of {KINDS}")
    if calibrated != (kind == "calibrated"):
        where = "outside [calibrated]" if not calibrated else f"of kind {kind!r} in [calibrated]"
        raise ValueError(f"{path}: a number {where}: calibrated numbers, and only they, go there")
    if kind == "calibrated" and not node.get("fitted_on"):
        raise ValueError(f"{path}: a calibrated number needs fitted_on (the fixtures it fits)")
    return kind


def _unwrap(node: Any, path: str, prov: dict[str, Sourced], default_source: str | None) -> Any:
    """Replace sourced leaves by their values, recording provenance in ``prov``."""
    if isinstance(node, Mapping) and "source" in node:
        src = node["source"]
        keys = (src,) if isinstance(src, str) else tuple(src)
        value = node.get("value", {k: v for k, v in node.items() if k not in _LEAF_FIELDS})
        kind = _kind(node, path, keys)
        prov[path] = Sourced(value, keys, node.get("note", ""), kind, node.get("fitted_on", ""))
        return value
    if isinstance(node, Mapping):
        return {
            k: _unwrap(v, f"{path}.{k}" if path else k, prov, default_source)
            for k, v in node.items()
        }
    is_number = isinstance(node, int | float) and not isinstance(node, bool)
    if is_number or (isinstance(node, list) and any(isinstance(x, int | float) for x in node)):
        if default_source is None:
            raise ValueError(f"{path}: number {node!r} has no source")
        prov[path] = Sourced(node, (default_source,))
    return node


def _section(t: Mapping, name: str, key: str) -> dict:
    sec = dict(t.get(name, {}))
    if name in _SECTIONS and (unknown := set(sec) - _SECTIONS[name]):
        raise ValueError(f"chip {key!r}: unknown [{name}] fields {sorted(unknown)}")
    return sec


def _whole_chip(section: Mapping, field: str, cores: Mapping[str, int]) -> float | None:
    """A unit's rate for the whole chip: the section's figure times the cores it is given ``per``
    (``per = "tensorcore"``); None where the section has no such figure."""
    if field not in section:
        return None
    return section[field] * (cores.get(section["per"], 1) if "per" in section else 1)


def _build(
    key: str, raw: Mapping, profile: str, default_source: str | None, sources: Mapping
) -> Chip:
    """One chip under ``profile``; ``sources``: the source keys its numbers may cite."""
    if unknown := set(raw) - _TOP_KEYS:
        raise ValueError(f"chip {key!r}: unknown fields {sorted(unknown)}")
    table = _merge(raw, raw.get("book", {})) if profile == "book" else raw
    prov: dict[str, Sourced] = {}
    if profile == "book":  # the book's roofline: facts and what follows from them, nothing fitted
        table = {k: v for k, v in table.items() if k != "calibrated"}
    t = _unwrap({k: v for k, v in table.items() if k != "book"}, "", prov, default_source)
    if missing := {k for p in prov.values() for k in p.keys} - set(sources):
        raise ValueError(f"chip {key!r}: source keys {sorted(missing)} are not in [sources]")

    flops: dict[str, float] = {}
    for cls, v in t.get("flops", {}).items():
        if isinstance(v, Mapping):  # { same_rate_as = "bf16" }
            v = t["flops"].get(v.get("same_rate_as"))
            if not isinstance(v, int | float):
                raise ValueError(f"chip {key!r}: flops.{cls} names no numeric rate to share")
        flops[cls] = float(v)
    cores = {k: int(v) for k, v in t.get("cores", {}).items()}
    memory = {
        name: MemorySpace(
            name=name,
            per=m.get("per", "chip"),
            count=1 if m.get("per", "chip") == "chip" else cores.get(m["per"], 1),
            capacity=m.get("capacity"),
            bandwidth=m.get("bandwidth"),
        )
        for name, m in t.get("memory", {}).items()
    }
    hbm, host, net = (_section(t, s, key) for s in ("hbm", "host", "network"))
    vpu, eup = (_section(t, s, key) for s in ("vpu", "eup"))
    vpu_flops = _whole_chip(vpu, "flops", cores)
    eup_rate = _whole_chip(eup, "rate", cores)
    ici = None
    if sec := _section(t, "ici", key):
        wrap = sec.pop("wraparound", {})
        sec = {k: tuple(v) if isinstance(v, list) else v for k, v in sec.items()}
        ici = Ici(
            **sec,
            wraparound_multiple_of=wrap.get("multiple_of"),
            wraparound_sizes=tuple(wrap.get("sizes", ())),
        )
    scaleup = ScaleUp(**sec) if (sec := _section(t, "scaleup", key)) else None
    calibration = _calibration(raw.get("calibrated", {}) if profile != "book" else {}, key, cores)
    return Chip(
        key=key,
        name=t.get("name", key),
        kind=t.get("kind", "custom"),
        flops=_frozen(flops),
        hbm_bandwidth=hbm.get("bandwidth", 0.0),
        hbm_capacity=hbm.get("capacity"),
        vendor=t.get("vendor", ""),
        profile=profile,
        status=t.get("status", ""),
        aliases=tuple(t.get("aliases", ())),
        cores=_frozen(cores),
        megacore=t.get("megacore"),
        mxu=tuple(t.get("mxu", ())),
        memory=_frozen(memory),
        vpu_flops=vpu_flops,
        eup_rate=eup_rate,
        clock_hz=t.get("clock"),
        ici=ici,
        scaleup=scaleup,
        dcn_per_chip=net.get("dcn_per_chip"),
        scaleout_per_node=net.get("scaleout_per_node"),
        pcie=host.get("pcie"),
        pcie_bidirectional=host.get("pcie_bidirectional"),
        c2c=host.get("c2c"),
        host_link=host.get("link", ""),
        calibration=calibration,
        sources=_frozen(prov),
    )


def _calibration(section: Mapping, key: str, cores: Mapping[str, int]) -> Calibration:
    """The chip's ``[calibrated]`` section as a :class:`Calibration` (rates whole chip)."""
    if unknown := set(section) - set(CALIBRATED):
        raise ValueError(f"chip {key!r}: unknown [calibrated] fields {sorted(unknown)}")
    values = {}
    for name, leaf in section.items():
        leaf = leaf if isinstance(leaf, Mapping) else {"value": leaf}
        per = cores.get(leaf["per"], 1) if "per" in leaf else 1
        values[CALIBRATED[name]] = float(leaf["value"]) * per
    return Calibration(**values)


def read_file(path: str | Path) -> Mapping:
    """A chip file's parsed tables: JSON by its suffix, TOML otherwise."""
    path = Path(path)
    text = path.read_text()
    return json.loads(text) if path.suffix.lower() == ".json" else tomllib.loads(text)
