"""Where a program's devices sit, and how long a collective takes on the links between them.

A :class:`Topology` places every device (partition id) of a program: on a TPU slice at torus
coordinates, with wraparound links only where the hardware has them (v4/v5p: slices of full 4x4x4
cubes; v5e/v6e: axes of size 16); on GPUs in a node (an NVLink domain) of a network. It comes from
the devices themselves (:func:`from_devices`: a mesh's TPU ``coords``, a GPU's host) or, for HLO text
alone, is inferred (:func:`infer`): the slice the chip's usual shape for that many chips, its axes
ordered so that the program's replica groups fall on whole axes (what ``make_mesh`` produces), device
ids in row-major order over them; GPUs in id order, ``domain`` per node.

:func:`collective_time` is the book's collective model ("How to Scale Your Model", the TPU and GPU
chapters) on a group's :class:`Span`: the torus axes it covers, or the nodes it reaches.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hlo_roofline.chips import Chip
from hlo_roofline.hlo import attrs

__all__ = [
    "Axis",
    "Span",
    "Topology",
    "collective_time",
    "dcn_expected_time",
    "dcn_ring_steps",
    "dcn_time",
    "from_devices",
    "infer",
]

ALL_TO_ALL = ("all-to-all", "ragged-all-to-all")
POINT_TO_POINT = ("collective-permute", "send", "recv")


@dataclass(frozen=True)
class Axis:
    """One torus axis a group spans: ``size`` members ``stride`` chips apart; ``wraps`` when the
    group's ring closes through the axis's wraparound link (it covers the whole axis, and the
    hardware has the link)."""

    size: int
    wraps: bool
    stride: int = 1
    whole: bool = True  # the group covers the whole axis

    @property
    def hops(self) -> float:
        """Hops of the ring's longest path: N/2 on a bidirectional full ring, N−1 on a broken one."""
        return (self.size / 2 if self.wraps else self.size - 1) * self.stride


@dataclass(frozen=True)
class Span:
    """What a group (or a permute's pairs) uses of the topology.

    Torus: ``axes`` spanned and ``hops`` (a permute's longest pair). Nodes: ``per_node`` members in
    the fullest node, ``nodes`` reached, ``concurrent`` groups sharing one node's network egress.
    """

    axes: tuple[Axis, ...] = ()
    hops: int = 0
    nodes: int = 1
    per_node: int = 1
    concurrent: int = 1


@dataclass(frozen=True)
class Topology:
    """Device id → place: torus coordinates (``kind="torus"``) or ``(node, index)`` (``"nodes"``).

    ``dims`` are the torus axes (nodes: ``(nodes, devices per node)``); ``wraps`` which torus axes
    have wraparound links; ``chip_axis`` the index of a coordinate that only tells two devices of
    one chip apart (TPU7x), or None; ``source`` how it was found.
    """

    kind: str
    dims: tuple[int, ...]
    wraps: tuple[bool, ...]
    coords: tuple[tuple[int, ...], ...]
    source: str = ""
    chip_axis: int | None = None

    @property
    def devices(self) -> int:
        return len(self.coords)

    def to_dict(self) -> dict:
        out = {"kind": self.kind, "dims": list(self.dims), "wraps": list(self.wraps)}
        out["source"] = self.source
        if self.source == "devices":  # inferred ones are inferred again
            out["coords"] = [list(c) for c in self.coords]
            out["chip_axis"] = self.chip_axis
        return out

    def span(self, ids: Sequence[int]) -> Span:
        """The axes (or nodes) a group of device ids spans."""
        places = [self.coords[i] for i in ids if 0 <= i < len(self.coords)]
        if len(places) < 2:
            return Span()
        if self.kind == "nodes":
            per_node: dict[int, int] = {}
            for node, _ in places:
                per_node[node] = per_node.get(node, 0) + 1
            fullest = max(per_node.values())
            return Span(
                nodes=len(per_node),
                per_node=fullest,
                concurrent=max(1, self.dims[1] // fullest),
            )
        axes = []
        for i, (size, wraps) in enumerate(zip(self.dims, self.wraps, strict=True)):
            if i == self.chip_axis:
                continue
            values = sorted({p[i] for p in places})
            if len(values) < 2:
                continue
            gaps = {b - a for a, b in itertools.pairwise(values)}
            stride = min(gaps) if len(gaps) == 1 else 1
            whole = len(values) * stride == size
            axes.append(Axis(len(values), wraps and whole, stride, whole))
        return Span(axes=tuple(axes))

    def pair_span(self, pairs: Iterable[tuple[int, int]]) -> Span:
        """A permute's pairs: torus hops of its longest pair; nodes: whether any pair crosses."""
        hops, nodes = 0, 1
        for a, b in pairs:
            if not (0 <= a < len(self.coords) and 0 <= b < len(self.coords)) or a == b:
                continue
            pa, pb = self.coords[a], self.coords[b]
            if self.kind == "nodes":
                nodes = max(nodes, 2 if pa[0] != pb[0] else 1)
                hops = max(hops, 1)
                continue
            distance = 0
            for i, (size, wraps) in enumerate(zip(self.dims, self.wraps, strict=True)):
                if i == self.chip_axis:
                    continue
                d = abs(pa[i] - pb[i])
                distance += min(d, size - d) if wraps else d
            hops = max(hops, distance)
        return Span(hops=hops, nodes=nodes)


# -- where the topology comes from ----------------------------------------------------------------


def from_devices(devices, chip: Chip) -> Topology:
    """The topology of JAX devices in partition order (``mesh.devices.flat``, or a mesh itself).

    TPU devices carry torus ``coords`` (and ``core_on_chip`` where a chip has two devices); GPU
    devices a ``process_index`` (their host, one NVLink domain per host).
    """
    grid = getattr(devices, "devices", devices)  # a Mesh, or its devices
    devices = list(grid.flat) if hasattr(grid, "flat") else list(grid)
    # Torus coordinates on TPU only: compile-only GPU devices carry ``coords`` too (their
    # partition, host and index), which are not links.
    if devices and chip.kind == "tpu" and hasattr(devices[0], "coords"):
        two_per_chip = len({tuple(d.coords) for d in devices}) < len(devices)
        torus = [tuple(d.coords) for d in devices]
        # A 2D slice reports a third coordinate that is always 0: axes of one chip have no links.
        kept = [i for i in range(len(torus[0])) if len({c[i] for c in torus}) > 1] or [0]
        coords = tuple(
            (*(c[i] for i in kept), getattr(d, "core_on_chip", 0))
            if two_per_chip
            else tuple(c[i] for i in kept)
            for c, d in zip(torus, devices, strict=True)
        )
        dims = tuple(max(c[i] for c in coords) + 1 for i in range(len(coords[0])))
        chip_axis = len(dims) - 1 if two_per_chip else None
        torus = dims[:-1] if two_per_chip else dims
        wraps = _wraps(chip, torus) + ((False,) if two_per_chip else ())
        return Topology("torus", dims, wraps, coords, "devices", chip_axis)
    hosts = [int(getattr(d, "process_index", 0)) for d in devices]
    index: dict[int, int] = {}
    coords = []
    for host in hosts:
        coords.append((host, index.get(host, 0)))
        index[host] = index.get(host, 0) + 1
    per_node = max(index.values()) if index else 1
    return Topology("nodes", (len(index), per_node), (), tuple(coords), "devices")


def from_dict(data: dict, chip: Chip) -> Topology | None:
    """A topology stored in a report's summary, with the wraparound of ``chip``."""
    try:
        coords = tuple(tuple(int(v) for v in c) for c in data["coords"])
        dims = tuple(int(d) for d in data["dims"])
        chip_axis = data.get("chip_axis")
    except (KeyError, TypeError, ValueError):
        return None
    if data.get("kind") == "nodes":
        if chip.scaleup is None:
            return None
        return Topology("nodes", dims, (), coords, "devices")
    if chip.ici is None:
        return None
    torus = dims[:-1] if chip_axis is not None else dims
    wraps = _wraps(chip, torus) + ((False,) if chip_axis is not None else ())
    return Topology("torus", dims, wraps, coords, "devices", chip_axis)


def infer(chip: Chip, devices: int, groups: Iterable[Sequence[int]] = ()) -> Topology | None:
    """The likely topology of ``devices`` devices of ``chip`` when only the HLO is known.

    GPU: ids in order, ``scaleup.domain`` per node. TPU: the chip's usual slice shape for that many
    chips (``4x8`` for 32 v5e, ``4x4x4`` for 64 v5p), ids row-major over its axes, the axes in the
    order that puts the most ``groups`` on whole axes. None when the chip has no interconnect data.
    """
    if devices < 1 or devices > attrs.MAX_DEVICES:  # more are not laid out one by one
        return None
    if chip.ici is None:
        if chip.scaleup is None:
            return None
        per_node = min(chip.scaleup.domain or devices, devices)
        coords = tuple((d // per_node, d % per_node) for d in range(devices))
        nodes = -(-devices // per_node)
        return Topology("nodes", (nodes, per_node), (), coords, f"inferred: {per_node} per node")
    per_chip = chip.devices_per_chip or 1
    if devices % per_chip:
        per_chip = 1
    shape = slice_shape(devices // per_chip, _torus_dims(chip))
    groups = [list(g) for g in groups]
    best: Topology | None = None
    best_score = -1
    for order in dict.fromkeys(itertools.permutations(shape)):
        topology = _row_major(chip, order, per_chip)
        score = sum(_on_whole_axes(topology.span(g)) for g in groups)
        if score > best_score:
            best, best_score = topology, score
    return best


def slice_shape(chips: int, ndim: int) -> tuple[int, ...]:
    """The usual slice for ``chips`` chips: powers of two spread as evenly as the axes allow
    (``2x2``, ``2x4``, ``4x4``, ``4x8`` … in 2D; ``2x2x1``, ``2x2x2``, ``2x2x4``, ``2x4x4``, ``4x4x4`` …
    in 3D), else the most even factorization."""
    if chips & (chips - 1) == 0:
        k = chips.bit_length() - 1
        exponents = [k // ndim + (1 if i >= ndim - k % ndim else 0) for i in range(ndim)]
        return tuple(sorted((2**e for e in exponents), reverse=ndim == 3 and k == 2))
    best = (chips,) + (1,) * (ndim - 1)
    small = [d for d in range(1, math.isqrt(chips) + 1) if chips % d == 0]
    divisors = sorted({*small, *(chips // d for d in small)})  # the only sizes an axis can have
    for dims in itertools.product(divisors, repeat=ndim - 1):
        last, rest = divmod(chips, math.prod(dims))
        if rest == 0 and max(*dims, last) < max(best):
            best = (*dims, last)
    return tuple(sorted(best))


def _torus_dims(chip: Chip) -> int:
    assert chip.ici is not None
    if chip.ici.max_slice_dims:
        return len(chip.ici.max_slice_dims)
    match = re.search(r"(\d)D", chip.ici.topology)
    return int(match.group(1)) if match else 2


def _row_major(chip: Chip, dims: tuple[int, ...], per_chip: int) -> Topology:
    coords = []
    for device in range(math.prod(dims) * per_chip):
        index, core = divmod(device, per_chip)
        place = []
        for size in reversed(dims):
            index, position = divmod(index, size)
            place.append(position)
        coords.append((*reversed(place), core) if per_chip > 1 else tuple(reversed(place)))
    wraps = _wraps(chip, dims)
    shape = "x".join(map(str, dims))
    if per_chip > 1:
        return Topology(
            "torus", (*dims, per_chip), (*wraps, False), tuple(coords),
            f"inferred: {shape}, {per_chip} devices per chip", len(dims),
        )  # fmt: skip
    return Topology("torus", dims, wraps, tuple(coords), f"inferred: {shape}")


def _wraps(chip: Chip, dims: Sequence[int]) -> tuple[bool, ...]:
    """Which axes of a slice have wraparound links. v4/v5p: every axis of a slice built of whole
    4x4x4 cubes; v5e/v6e: axes of size 16; chips whose sources do not say: every axis (a torus)."""
    ici = chip.ici
    if ici is None:
        return tuple(False for _ in dims)
    if ici.wraparound_multiple_of:
        whole = all(d % ici.wraparound_multiple_of == 0 for d in dims)
        return tuple(whole and d > 1 for d in dims)
    if ici.wraparound_sizes:
        return tuple(d in ici.wraparound_sizes for d in dims)
    return tuple(d > 2 for d in dims)


def _on_whole_axes(span: Span) -> bool:
    """A group made of whole torus axes (what a mesh axis laid on a physical axis gives)."""
    return bool(span.axes) and all(a.whole and a.stride == 1 for a in span.axes)


# -- time on the links ------------------------------------------------------------------------------


def collective_time(
    chip: Chip, collective: str, comm_bytes: float, group_size: int, span: Span | None
) -> float:
    """Seconds one device spends moving ``comm_bytes`` for one collective over ``span``.

    ``span`` None: the topology is unknown, and the group is one ring with wraparound (TPU) or
    inside one node (GPU). NaN when the chip has no link data.
    """
    if comm_bytes <= 0:
        return 0.0
    n = max(group_size, 2)
    if chip.ici is not None and chip.ici.link_bidirectional:
        return _torus_time(chip, collective, comm_bytes, n, span)
    if chip.scaleup is not None and chip.scaleup.oneway:
        return _nodes_time(chip, collective, comm_bytes, n, span)
    return math.nan


def dcn_time(chip: Chip, collective: str, comm_bytes: float) -> float:
    """Seconds one device spends sending ``comm_bytes`` across slices over the data-centre
    network: at its chip's DCN egress (the book's per-chip ``W_dcn``; "DCN, data parallel as a ring
    over slices": bytes / (M · W_dcn) for a slice of M chips, each sending its own share; a
    per-device chip's share of it). A chip without a DCN figure prices it as point-to-point ICI."""
    if comm_bytes <= 0:
        return 0.0
    if not chip.dcn_per_chip:
        return collective_time(chip, collective, comm_bytes, 2, None)
    return comm_bytes / chip.dcn_per_chip


def dcn_ring_steps(comm_bytes: float, buffer_bytes: float, slices: int) -> float:
    """The steps of a multi-slice transfer's ring over ``slices`` slices: each step carries
    1/n of its buffer, so a ring all-reduce (2·(n−1)/n of its buffer on the wire) makes 2·(n−1);
    a transfer whose buffer is unknown is taken for that all-reduce. The report does not carry a
    megascale transfer's type: a one-to-one of its whole buffer counts n steps where it makes
    one (of the published programs' DCN transfers, only seven small v4 ones are not all-reduces)."""
    if buffer_bytes <= 0:
        return 2.0 * (slices - 1)
    return comm_bytes * slices / buffer_bytes


def dcn_expected_time(chip: Chip, comm_bytes: float, buffer_bytes: float, slices: int) -> float:
    """The expected model's seconds for one multi-slice transfer (0 where the chip has no DCN
    figure or no DCN calibration): its bytes at ``calibrated.dcn_efficiency`` of the chip's DCN
    egress, and ``calibrated.dcn_step`` for each step of its ring over the slices
    (:func:`dcn_ring_steps`): what the megascale runtime takes beyond the NIC's wire time."""
    cal = chip.calibration
    if comm_bytes <= 0 or not chip.dcn_per_chip or not (cal.dcn_efficiency or cal.dcn_step_s):
        return 0.0
    wire = comm_bytes / (chip.dcn_per_chip * (cal.dcn_efficiency or 1.0))
    return wire + dcn_ring_steps(comm_bytes, buffer_bytes, slices) * (cal.dcn_step_s or 0.0)


def _torus_time(chip: Chip, collective: str, comm: float, n: int, span: Span | None) -> float:
    """The book's ICI model: ring collectives on every spanned axis's links at once (both
    directions where the ring closes, one where it is broken), a latency of T_min per hop."""
    ici = chip.ici
    assert ici is not None and ici.link_bidirectional
    both = ici.link_bidirectional
    one = ici.link_oneway or both / 2
    t_min = ici.hop_latency or 0.0
    if span is None:
        span = Span(axes=(Axis(n, True),), hops=1)
    if collective in POINT_TO_POINT:
        return max(span.hops, 1) * t_min + comm / one
    if not span.axes:
        return 0.0  # every member on one chip
    bandwidth = sum((both if a.wraps else one) / a.stride for a in span.axes)
    latency = t_min * sum(a.hops for a in span.axes)
    if collective == "all-reduce":
        latency *= 2  # a reduce-scatter, then an all-gather
    if collective in ALL_TO_ALL:
        # A quarter of an all-gather of the whole N·B array on a closed ring; the bisection of the
        # largest axis limits an N-D torus, and a broken ring halves that bisection.
        per_device = comm * n / (n - 1)
        widest = max(a.size * a.stride * (1 if a.wraps else 2) for a in span.axes)
        return max(latency, per_device * widest / (4 * both))
    return max(latency, comm / bandwidth)


def _nodes_time(chip: Chip, collective: str, comm: float, n: int, span: Span | None) -> float:
    """The book's GPU model: NVLink inside a node (``W_GPU`` per GPU, one direction), the node's
    scale-out egress ``W_node`` across nodes, shared by the groups running at once in the node."""
    scaleup = chip.scaleup
    assert scaleup is not None and scaleup.oneway
    w_gpu = scaleup.oneway
    w_node = chip.scaleout_per_node
    if span is None or span.nodes <= 1 or not w_node:
        return comm / w_gpu
    if collective in POINT_TO_POINT:  # every GPU of the node sends across at once
        return comm / min(w_gpu, w_node / max(span.concurrent * span.per_node, 1))
    k, m, groups = span.per_node, span.nodes, span.concurrent
    per_device = comm * n / (n - 1)  # B: the whole array (all-reduce: twice)
    if collective in ALL_TO_ALL:
        in_node = per_device * (k - 1) / n / w_gpu
        across = groups * k * per_device * (m - 1) / m / w_node
        return max(in_node, across)
    in_node = per_device * (k - 1) / k / w_gpu
    across = groups * per_device * (m - 1) / m / w_node
    return max(in_node, across)
