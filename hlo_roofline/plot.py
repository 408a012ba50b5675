"""The roofline chart: roofs per dtype, one point per op at (intensity, predicted FLOP/s)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from hlo_roofline._atomic import is_remote, write_atomic

# The tab's palette (plugin/static/util.js BOUND_COLORS), so a chart reads the same everywhere.
COLORS = {
    "compute": "#d6453d",
    "memory": "#3b76c4",
    "communication": "#e08a1e",
    "unknown": "#8c7a6b",
}


def roof_lines(roofs: dict[str, dict[str, float]]) -> list[tuple[str, dict[str, float]]]:
    """The summary's roofs, one line per distinct peak: rate classes at the same peak (v5p's bf16
    and fp8, H100's fp8 and int8) share one line labelled with all of them (``bf16 = fp8``), so
    no roof hides under another with a label the chart does not show."""
    lines: list[tuple[list[str], dict[str, float]]] = []
    for name, roof in roofs.items():
        same = next(
            (names for names, r in lines if np.isclose(r["peak_flops"], roof["peak_flops"])), None
        )
        if same is not None:
            same.append(name)
        else:
            lines.append(([name], roof))
    return [(" = ".join(names), roof) for names, roof in lines]


def roofline_chart(report, path: Path | str, title: str | None = None) -> Path | str:
    """Draw a classified report to ``path`` (.png or .svg, or a URL ending so); ops are sized by
    their share of the step."""
    if "t_expected_s" not in report.ops:
        raise ValueError("plot needs a classified report: call report.classify(chip) first")
    suffix = "." + str(path).rsplit(".", 1)[-1].lower() if "." in str(path) else ""
    if suffix not in (".png", ".svg"):
        raise ValueError(f"plot writes .png or .svg, not {suffix!r}")
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    summary = report.summary
    ops = report.ops[(report.ops.t_expected_s > 0) & (report.ops.flops > 0)]
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=120)
    intensity = ops["intensity"].to_numpy(dtype=float)
    achieved = (ops["flops"] / ops["t_expected_s"]).to_numpy(dtype=float)
    finite = np.isfinite(intensity) & (intensity > 0)
    low = min(0.05, float(np.nanmin(intensity[finite])) / 2) if finite.any() else 0.05
    high = max(1e4, float(np.nanmax(intensity[finite])) * 2) if finite.any() else 1e4
    x = np.logspace(np.log10(low), np.log10(high), 256)
    bandwidth = summary["hbm_bandwidth"]
    for label, roof in roof_lines(summary.get("roofs", {})):
        ax.plot(x, np.minimum(roof["peak_flops"], x * bandwidth), lw=1.2, label=f"{label} roof")
        ax.axvline(roof["critical_intensity"], ls=":", lw=0.8, color="0.6")
    if summary.get("vmem_bandwidth"):  # ops fed from VMEM sit under this steeper roof
        top = max(roof["peak_flops"] for roof in summary["roofs"].values())
        vmem = np.minimum(top, x * summary["vmem_bandwidth"])
        ax.plot(x, vmem, lw=1.0, ls="--", color="0.4", label="VMEM roof")
    for bound, color in COLORS.items():
        sel = (ops["bound"] == bound).to_numpy() & finite
        if sel.any():
            sizes = 20 + 600 * ops["share"].to_numpy()[sel]
            ax.scatter(intensity[sel], achieved[sel], s=sizes, c=color, alpha=0.6, label=bound)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte of HBM traffic)")
    ax.set_ylabel("predicted FLOP/s")
    chip = summary.get("chip_name", summary.get("chip", ""))
    ax.set_title(title or f"{report.module} on {chip}")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(True, which="major", ls="-", lw=0.3)
    fig.tight_layout()
    if is_remote(path):  # drawn here, written through the URL's filesystem
        buffer = io.BytesIO()
        fig.savefig(buffer, format=suffix[1:])
        plt.close(fig)
        write_atomic(path, buffer.getvalue())
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
