"""The book's rules as text beside each row: *How to Scale Your Model*'s constants from the chip
database (:func:`book_constants`), its per-pass quantities read from a report (:func:`pass_times`),
and what each closed form predicts for a candidate (:func:`why`): TPU ICI rules, or the GPU
chapter's NVLink node and the network between nodes."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from hlo_roofline import schema
from hlo_roofline.explorer.layouts import Candidate, is_number
from hlo_roofline.explorer.status import STATUS_NO_FIT

BATCH_AXES = ("data", "fsdp")  # axes that split the batch (the book's X)


MODEL_AXES = ("tensor", "model")  # axes that split the model's hidden dimension (the book's Y)


@dataclass(frozen=True)
class BookConstants:
    """C (bf16 FLOP/s per chip), W_ici (bidirectional bytes/s of one link axis; on a GPU the
    NVLink one-way egress, the book's W_GPU) and their ratio, the book's "ICI operational
    intensity" (≈ 2,550 on TPU v5p, ≈ 2,200 on H100); on a GPU also W_node, a node's scale-out
    egress, for what crosses nodes (C/W_node ≈ 2,475 on H100)."""

    chip: str
    C: float
    W_ici: float | None
    W_node: float | None = None

    @property
    def ratio(self) -> float | None:
        return self.C / self.W_ici if self.W_ici else None

    @property
    def node_ratio(self) -> float | None:
        return self.C / self.W_node if self.W_node else None

    @property
    def gpu(self) -> bool:
        """Whether the book's GPU chapter applies (NVLink domains and nodes, not a torus)."""
        return self.W_node is not None


def book_constants(chip) -> BookConstants:
    """``C = chip.peak_flops("bf16")``, ``W_ici = chip.ici.link_bidirectional`` (the book's
    W_ici, per link and so per torus axis); GPUs: the NVLink one-way egress (the book's W_GPU)."""
    from hlo_roofline import chips

    chip = chips.get(chip) if isinstance(chip, str) else chip
    per_device = chip.per_device()
    w, w_node = None, None
    if chip.ici is not None and chip.ici.link_bidirectional:
        w = chip.ici.link_bidirectional
    elif chip.scaleup is not None and chip.scaleup.oneway:
        w, w_node = chip.scaleup.oneway, chip.scaleout_per_node
    return BookConstants(chip.key, per_device.peak_flops("bf16"), w, w_node)


def bound_of(compute: float, memory: float, comm: float) -> str:
    """What the compiled step is bound by: its largest total time."""
    times = {"compute": compute, "memory": memory, "communication": comm}
    times = {k: v for k, v in times.items() if v == v}
    return max(times, key=times.get) if times else "unknown"


def why(out: dict, candidate: Candidate, k: BookConstants, tokens, hidden) -> str:
    """Where this candidate stands, in the book's terms: the compiled step's bound and exposed
    communication, then each of the book's rules that applies, with its threshold.

    TPU rules, from the training chapter (R = C/W_ici; X = product of the batch axes, Y = the
    model axis, N = X·Y, n_axes = torus axes a mesh axis spans): DP/FSDP compute-bound iff
    B/X > R/n_axes(X) (T1); TP communication-bound iff Y > n_axes(Y)·F/R (T2); FSDP×TP
    compute-bound iff B/N > 2·R²/F (T3). GPU rules, from the GPU chapter (W = W_GPU while the axes
    stay in one node, W_node once they cross): DP/FSDP compute-bound iff B/X > C/W (G1); TP
    communication-bound iff Y > F·W/C (G2).
    """
    sizes = dict(candidate.sizes)
    parts = []
    if out["status"] == STATUS_NO_FIT:
        parts.append(
            f"does not fit: {out['hbm_per_device'] / 1e9:.3g} GB per device"
            if out.get("hbm_per_device")
            else "does not fit"
        )
    share = out.get("exposed_comm_share")
    share = share if is_number(share) and math.isfinite(share) else 0.0
    if out["bound"] == "unknown":  # the compiler refused it: no optimized program to judge
        parts.append("compiled: refused by the compiler, no program to time")
    else:
        parts.append(
            f"compiled: whole step {out['bound']}-bound, {share:.0%} of it exposed communication"
        )
        per_pass = _pass_words(out)
        if per_pass:
            parts.append(per_pass)
    if k.ratio is None:
        return "; ".join(parts)
    x_axes = [a for a in BATCH_AXES if sizes.get(a, 1) > 1]
    y_axes = [a for a in MODEL_AXES if sizes.get(a, 1) > 1]
    x = math.prod(sizes.get(a, 1) for a in BATCH_AXES)
    y = math.prod(sizes.get(a, 1) for a in MODEL_AXES)
    rules = _gpu_rules if k.gpu else _tpu_rules
    parts += rules(candidate, k, tokens, hidden, x_axes, y_axes, x, y)
    return "; ".join(parts)


def _tpu_rules(candidate, k, tokens, hidden, x_axes, y_axes, x, y) -> list[str]:
    """The training chapter's T1–T3 on a torus."""
    spans, r, parts = dict(candidate.n_axes), k.ratio, []
    if tokens and x_axes:
        n = max(1, sum(spans.get(a, 1) for a in x_axes))
        per_chip = tokens / x
        threshold = r / n
        side = "compute" if per_chip > threshold else "communication"
        parts.append(
            f"book T1: B/X = {per_chip:,.0f} tokens {'>' if side == 'compute' else '≤'} "
            f"C/(W_ici·{n}) = {threshold:,.0f} ⇒ {side}-bound over {'×'.join(x_axes)}"
        )
    if hidden and y_axes:
        n = max(1, sum(spans.get(a, 1) for a in y_axes))
        threshold = n * hidden / r
        side = "communication" if y > threshold else "compute"
        parts.append(
            f"book T2: {'×'.join(y_axes)} axis {y} {'>' if y > threshold else '≤'} "
            f"n_axes·F/(C/W_ici) = {n}·{hidden}/{r:,.0f} = {threshold:.3g} ⇒ {side}-bound on "
            "the model axis"
        )
    if hidden and tokens and x_axes and y_axes:
        per_chip = tokens / (x * y)
        threshold = 2 * r * r / hidden
        side = "compute" if per_chip > threshold else "communication"
        parts.append(
            f"book T3: B/N = {per_chip:,.0f} {'>' if side == 'compute' else '≤'} "
            f"2·(C/W_ici)²/F = {threshold:,.0f} ⇒ {side}-bound (FSDP×TP)"
        )
    return parts


def _gpu_rules(candidate, k, tokens, hidden, x_axes, y_axes, x, y) -> list[str]:
    """The GPU chapter's G1 (DP/FSDP) and G2 (TP): W_GPU inside a node, W_node across nodes."""
    nodes, parts = dict(candidate.nodes), []

    def over(axes: list[str]) -> tuple[float, str]:
        crosses = math.prod(nodes.get(a, 1) for a in axes) > 1 and k.node_ratio is not None
        return (k.node_ratio, "C/W_node") if crosses else (k.ratio, "C/W_GPU")

    if tokens and x_axes:
        per_chip = tokens / x
        threshold, name = over(x_axes)
        side = "compute" if per_chip > threshold else "communication"
        parts.append(
            f"book G1: B/X = {per_chip:,.0f} tokens {'>' if side == 'compute' else '≤'} "
            f"{name} = {threshold:,.0f} ⇒ {side}-bound over {'×'.join(x_axes)}"
        )
    if hidden and y_axes:
        ratio, name = over(y_axes)
        threshold = hidden / ratio
        side = "communication" if y > threshold else "compute"
        parts.append(
            f"book G2: {'×'.join(y_axes)} axis {y} {'>' if y > threshold else '≤'} "
            f"F/({name}) = {hidden}/{ratio:,.0f} = {threshold:.3g} ⇒ {side}-bound on the "
            "model axis"
        )
    return parts


PASSES = {"forward": "fwd", "backward": "bwd"}  # attribution.pass_of's passes, as column suffixes


PASS_KINDS = ("matmul", "collective", "exposed")  # the per-pass columns: <kind>_<pass>_s


def pass_times(ops: pd.DataFrame) -> dict[str, float]:
    """The book's quantities per pass (forward, backward: ``hlo.attribution.pass_of`` of each
    op's ``op_name``): ``matmul_<pass>_s``, Σ ``t_compute_s`` of the pass's matmuls
    (``schema.matmul_rows``), against ``collective_<pass>_s``, Σ ``t_comm_s`` of its collectives:
    the time the collective occupies its links, on the path its data takes, hidden or not. The
    book's T1–T3 compare exactly these two per layer: compute-bound iff the matmuls take longer.
    ``exposed_<pass>_s``, Σ ``t_exposed_s`` of its collectives, is the part of that time on the
    scheduled step's critical path (the compute stream waited for it)."""
    from hlo_roofline.hlo.attribution import pass_of

    out = {f"{kind}_{short}_s": math.nan for short in PASSES.values()
           for kind in PASS_KINDS}  # fmt: skip
    needed = {"op_name", "t_compute_s", "t_comm_s", "t_exposed_s", "mm_k", "collective"}
    if ops.empty or not needed <= set(ops.columns):
        return out
    passes = ops["op_name"].fillna("").astype(str).map(pass_of)
    matmul = schema.matmul_rows(ops)
    collective = ops["collective"].fillna("").astype(str) != ""
    for name, short in PASSES.items():
        here = passes == name
        out[f"matmul_{short}_s"] = float(ops.loc[here & matmul, "t_compute_s"].sum())
        out[f"collective_{short}_s"] = float(ops.loc[here & collective, "t_comm_s"].sum())
        out[f"exposed_{short}_s"] = float(ops.loc[here & collective, "t_exposed_s"].sum())
    return out


def _pass_words(out: dict) -> str:
    """``per pass: forward matmuls 1.2 ms vs collectives 0.3 ms ⇒ compute-bound; ...``."""
    from hlo_roofline.text import format_seconds

    parts = []
    for name, short in PASSES.items():
        mm, comm = out.get(f"matmul_{short}_s"), out.get(f"collective_{short}_s")
        if not is_number(mm) or not math.isfinite(mm) or (mm == 0 and not comm):
            continue
        side = "compute" if mm >= comm else "communication"
        exposed = out.get(f"exposed_{short}_s")
        hidden = (
            f" ({format_seconds(exposed)} exposed)" if comm and is_number(exposed) else ""
        )  # fmt: skip
        parts.append(
            f"{name} matmuls {format_seconds(mm)} vs collectives {format_seconds(comm)}{hidden} "
            f"⇒ {side}-bound"
        )
    return "per pass: " + "; ".join(parts) if parts else ""
