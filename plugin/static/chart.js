// Log-log roofline chart on one <canvas>: the chip's roofs and ridges per dtype, one point per op
// with a nonzero predicted time (colored by bound, area ∝ time share). Canvas keeps a 20k-op report
// responsive; nothing is decimated.
//
// x = arithmetic intensity (FLOP/byte), y = FLOP/s the op attains under the model (FLOPs / t_roofline).
// Ops with no FLOPs (or no bytes) have no place on log axes: they are drawn in a gutter strip at the
// left, higher = more time, so every timed op still has exactly one point.

import { BOUND_COLORS, el, fmtBytes, fmtPct, fmtSI, fmtTime } from "./util.js";

const MARGIN = { left: 58, right: 170, top: 14, bottom: 44 };
const GUTTER = 34; // width of the "no FLOP/B" strip, left of the x axis
const HEIGHT = 400;

function log10(x) {
  return Math.log(x) / Math.LN10;
}

/** A power of ten as a short label: 0.01, 0.1, 1, 10, 100, 1k, 10k, ..., 1P. */
function decade(k, unit = "") {
  if (k < 0) return `${(10 ** k).toFixed(-k)}${unit}`;
  const prefixes = ["", "k", "M", "G", "T", "P", "E", "Z"];
  const p = Math.min(prefixes.length - 1, Math.floor(k / 3));
  return `${10 ** (k - 3 * p)}${prefixes[p]}${unit}`;
}

/** Deterministic jitter in [0, 1) from an integer (keeps the gutter stable across redraws). */
function jitter(i) {
  const s = Math.sin(i * 12.9898 + 78.233) * 43758.5453;
  return s - Math.floor(s);
}

export class RooflineChart {
  /**
   * @param {HTMLElement} container
   * @param {{onSelect: (row: number) => void}} options
   */
  constructor(container, { onSelect }) {
    this.onSelect = onSelect;
    this.model = null;
    this.points = [];
    this.selected = -1;
    this.hover = -1;
    this.canvas = el("canvas", {
      className: "hr-chart-canvas",
      attrs: { role: "img", "aria-label": "Roofline chart", "data-testid": "roofline-canvas" },
    });
    this.tooltip = el("div", { className: "hr-tooltip", attrs: { role: "tooltip" } });
    this.tooltip.hidden = true;
    this.legend = el("div", { className: "hr-legend" });
    this.wrap = el("div", { className: "hr-chart-wrap" }, this.canvas, this.tooltip);
    container.append(this.wrap, this.legend);

    this.canvas.addEventListener("mousemove", (e) => this._onMove(e));
    this.canvas.addEventListener("mouseleave", () => this._setHover(-1, null));
    this.canvas.addEventListener("click", (e) => {
      const i = this._hit(e);
      if (i >= 0) this.onSelect(this.points[i].row);
    });
    // Test and debugging hook: the points as drawn (CSS pixels relative to the canvas).
    this.canvas.hloPoints = () =>
      this.points.map((p) => ({ row: p.row, x: p.px, y: p.py, r: p.r, bound: p.bound }));
    this._resize = new ResizeObserver(() => this.draw());
    this._resize.observe(this.wrap);
  }

  /** Show a report (a Model from index.js); an unclassified report draws no points. */
  setModel(model) {
    this.model = model;
    this.selected = -1;
    this.hover = -1;
    this.tooltip.hidden = true;
    this._buildPoints();
    this._buildLegend();
    this.draw();
  }

  select(row) {
    this.selected = row;
    this.draw();
  }

  _buildPoints() {
    const m = this.model;
    const points = [];
    if (m && m.has("t_roofline_s")) {
      for (let row = 0; row < m.rows.length; row++) {
        const t = m.get(row, "t_roofline_s");
        if (!(typeof t === "number" && t > 0)) continue;
        const flops = m.get(row, "flops") || 0;
        const intensity = m.get(row, "intensity");
        const onAxes = flops > 0 && typeof intensity === "number" && intensity > 0;
        const share = m.get(row, "share") || 0;
        points.push({
          row,
          t,
          gutter: !onAxes,
          x: onAxes ? intensity : 0,
          y: onAxes ? flops / t : 0,
          bound: m.get(row, "bound") || "unknown",
          r: 2.5 + 16 * Math.sqrt(Math.max(0, Math.min(1, share))),
          px: 0,
          py: 0,
        });
      }
    }
    // Big points first, so small ones stay visible and hoverable on top.
    points.sort((a, b) => b.r - a.r);
    this.points = points;
    this.canvas.dataset.points = String(points.length);
  }

  _roofs() {
    const s = (this.model && this.model.summary) || {};
    const bw = s.hbm_bandwidth;
    const roofs = [];
    for (const [dtype, roof] of Object.entries(s.roofs || {})) {
      if (!roof || !(roof.peak_flops > 0)) continue;
      const same = roofs.find((r) => r.peak === roof.peak_flops);
      if (same) same.labels.push(dtype);
      else {
        roofs.push({
          labels: [dtype],
          peak: roof.peak_flops,
          ridge: roof.critical_intensity || (bw ? roof.peak_flops / bw : null),
        });
      }
    }
    const vmem = s.vmem_bandwidth > 0 ? s.vmem_bandwidth : null;
    return { bw: bw > 0 ? bw : null, vmem, roofs };
  }

  _ranges(roofs) {
    const xs = [];
    const ys = [];
    for (const p of this.points) {
      if (p.gutter) continue;
      xs.push(p.x);
      ys.push(p.y);
    }
    for (const r of roofs.roofs) {
      if (r.ridge > 0) xs.push(r.ridge);
      ys.push(r.peak);
    }
    let xmin = xs.length ? Math.min(...xs) : 0.1;
    let xmax = xs.length ? Math.max(...xs) : 1000;
    let ymax = ys.length ? Math.max(...ys) : 1e12;
    let ymin = ys.length ? Math.min(...ys) : 1e9;
    xmin = 10 ** Math.floor(log10(xmin / 1.5));
    xmax = 10 ** Math.ceil(log10(xmax * 1.5));
    ymax = 10 ** Math.ceil(log10(ymax * 1.2));
    ymin = Math.max(10 ** Math.floor(log10(ymin / 1.5)), ymax / 1e9);
    if (xmax / xmin < 100) xmax = xmin * 100;
    if (ymax / ymin < 100) ymin = ymax / 100;
    return { xmin, xmax, ymin, ymax };
  }

  draw() {
    const canvas = this.canvas;
    const width = Math.max(320, this.wrap.clientWidth || 800);
    const dpr = window.devicePixelRatio || 1;
    canvas.style.width = `${width}px`;
    canvas.style.height = `${HEIGHT}px`;
    canvas.width = Math.round(width * dpr);
    canvas.height = Math.round(HEIGHT * dpr);
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    const css = getComputedStyle(this.wrap);
    const fg = css.getPropertyValue("--hr-fg").trim() || "#222";
    const grid = css.getPropertyValue("--hr-grid").trim() || "#e4e4e4";
    const muted = css.getPropertyValue("--hr-muted").trim() || "#777";
    ctx.clearRect(0, 0, width, HEIGHT);
    ctx.font = "11px system-ui, sans-serif";

    const plot = {
      left: MARGIN.left + GUTTER,
      right: width - MARGIN.right,
      top: MARGIN.top,
      bottom: HEIGHT - MARGIN.bottom,
    };
    const roofs = this._roofs();
    const range = this._ranges(roofs);
    const lx0 = log10(range.xmin);
    const lx1 = log10(range.xmax);
    const ly0 = log10(range.ymin);
    const ly1 = log10(range.ymax);
    const X = (x) => plot.left + ((log10(x) - lx0) / (lx1 - lx0)) * (plot.right - plot.left);
    const Y = (y) => plot.bottom - ((log10(y) - ly0) / (ly1 - ly0)) * (plot.bottom - plot.top);
    this._geom = { plot, X, Y };

    // Grid and axes (decades).
    ctx.strokeStyle = grid;
    ctx.fillStyle = muted;
    ctx.lineWidth = 1;
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    for (let k = Math.ceil(lx0); k <= Math.floor(lx1); k++) {
      const x = Math.round(X(10 ** k)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(x, plot.top);
      ctx.lineTo(x, plot.bottom);
      ctx.stroke();
      ctx.fillText(decade(k), x, plot.bottom + 5);
    }
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (let k = Math.ceil(ly0); k <= Math.floor(ly1); k++) {
      const y = Math.round(Y(10 ** k)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(plot.left, y);
      ctx.lineTo(plot.right, y);
      ctx.stroke();
      ctx.fillText(decade(k), MARGIN.left - 4, y);
    }
    ctx.strokeStyle = muted;
    ctx.strokeRect(plot.left + 0.5, plot.top + 0.5, plot.right - plot.left, plot.bottom - plot.top);
    ctx.fillStyle = fg;
    ctx.textAlign = "center";
    ctx.textBaseline = "bottom";
    ctx.fillText("arithmetic intensity (FLOP/byte)", (plot.left + plot.right) / 2, HEIGHT - 4);
    ctx.save();
    ctx.translate(12, (plot.top + plot.bottom) / 2);
    ctx.rotate(-Math.PI / 2);
    ctx.textBaseline = "middle";
    ctx.fillText("attained FLOP/s (FLOPs / predicted time)", 0, 0);
    ctx.restore();

    // Gutter for ops without FLOPs.
    const g0 = MARGIN.left + 4;
    const g1 = plot.left - 6;
    ctx.fillStyle = grid;
    ctx.globalAlpha = 0.45;
    ctx.fillRect(g0, plot.top, g1 - g0, plot.bottom - plot.top);
    ctx.globalAlpha = 1;
    ctx.save();
    ctx.translate((g0 + g1) / 2, plot.bottom - 4);
    ctx.rotate(-Math.PI / 2);
    ctx.fillStyle = muted;
    ctx.textAlign = "left";
    ctx.textBaseline = "middle";
    ctx.fillText("no FLOPs ↑ time", 0, 0);
    ctx.restore();

    // Roofs: HBM diagonal up to the highest ridge, one flat roof and one ridge mark per peak.
    ctx.save();
    ctx.beginPath();
    ctx.rect(plot.left, plot.top, plot.right - plot.left, plot.bottom - plot.top);
    ctx.clip();
    ctx.lineWidth = 2;
    ctx.strokeStyle = fg;
    const top = roofs.roofs.reduce((a, r) => (r.peak > a.peak ? r : a), { peak: 0, ridge: 0 });
    if (roofs.bw) {
      const xEnd = top.ridge > 0 ? top.ridge : range.xmax;
      ctx.beginPath();
      ctx.moveTo(X(range.xmin), Y(range.xmin * roofs.bw));
      ctx.lineTo(X(xEnd), Y(xEnd * roofs.bw));
      ctx.stroke();
    }
    if (roofs.vmem) {
      // Ops fed from a TPU's VMEM sit under this steeper memory roof.
      const xEnd = top.peak / roofs.vmem;
      ctx.save();
      ctx.setLineDash([6, 4]);
      ctx.lineWidth = 1;
      ctx.beginPath();
      ctx.moveTo(X(range.xmin), Y(range.xmin * roofs.vmem));
      ctx.lineTo(X(xEnd), Y(xEnd * roofs.vmem));
      ctx.stroke();
      ctx.restore();
    }
    for (const r of roofs.roofs) {
      const start = r.ridge > 0 ? r.ridge : range.xmin;
      ctx.beginPath();
      ctx.moveTo(X(start), Y(r.peak));
      ctx.lineTo(X(range.xmax), Y(r.peak));
      ctx.stroke();
      if (r.ridge > 0) {
        ctx.save();
        ctx.setLineDash([4, 4]);
        ctx.lineWidth = 1;
        ctx.strokeStyle = muted;
        ctx.beginPath();
        ctx.moveTo(X(r.ridge), Y(r.peak));
        ctx.lineTo(X(r.ridge), plot.bottom);
        ctx.stroke();
        ctx.restore();
      }
    }
    ctx.restore();
    // Roof labels at the right, pushed apart so close peaks stay readable.
    ctx.textAlign = "left";
    ctx.textBaseline = "middle";
    const labels = roofs.roofs
      .map((r) => ({ r, y: Y(r.peak) }))
      .filter((l) => l.y >= plot.top - 2 && l.y <= plot.bottom)
      .sort((a, b) => a.y - b.y);
    let floor = -Infinity;
    for (const l of labels) {
      l.y = Math.max(l.y, floor + 26);
      floor = l.y;
    }
    for (const { r, y } of labels) {
      ctx.fillStyle = fg;
      ctx.fillText(`${r.labels.join(", ")}  ${fmtSI(r.peak, "FLOP/s")}`, plot.right + 6, y - 6);
      ctx.fillStyle = muted;
      if (r.ridge > 0) ctx.fillText(`ridge ${fmtSI(r.ridge)} FLOP/B`, plot.right + 6, y + 7);
    }
    if (roofs.bw) {
      ctx.fillStyle = muted;
      ctx.textAlign = "left";
      ctx.fillText(`HBM ${fmtSI(roofs.bw, "B/s")}`, plot.left + 6, plot.bottom - 10);
      if (roofs.vmem) {
        ctx.fillText(`VMEM ${fmtSI(roofs.vmem, "B/s")} (dashed)`, plot.left + 6, plot.bottom - 26);
      }
    }

    // Points. Gutter points: x jittered in the strip, y = log time rank within the plot height.
    const gutterPts = this.points.filter((p) => p.gutter);
    let tMin = Infinity;
    let tMax = -Infinity;
    for (const p of gutterPts) {
      tMin = Math.min(tMin, p.t);
      tMax = Math.max(tMax, p.t);
    }
    const lt0 = log10(tMin);
    const lt1 = log10(tMax);
    for (const p of this.points) {
      if (p.gutter) {
        const f = lt1 > lt0 ? (log10(p.t) - lt0) / (lt1 - lt0) : 0.5;
        p.px = g0 + 4 + jitter(p.row) * Math.max(1, g1 - g0 - 8);
        p.py = plot.bottom - 8 - f * (plot.bottom - plot.top - 16);
      } else {
        p.px = Math.min(plot.right, Math.max(plot.left, X(p.x)));
        p.py = Math.min(plot.bottom, Math.max(plot.top, Y(p.y)));
      }
    }
    ctx.lineWidth = 1;
    for (const p of this.points) {
      const color = BOUND_COLORS[p.bound] || BOUND_COLORS.unknown;
      ctx.beginPath();
      ctx.arc(p.px, p.py, p.r, 0, 2 * Math.PI);
      ctx.globalAlpha = 0.55;
      ctx.fillStyle = color;
      ctx.fill();
      ctx.globalAlpha = 0.95;
      ctx.strokeStyle = color;
      ctx.stroke();
    }
    ctx.globalAlpha = 1;
    for (const [row, color, width] of [
      [this.hover >= 0 ? this.points[this.hover]?.row : -1, fg, 1.5],
      [this.selected, "#111", 3],
    ]) {
      const p = row >= 0 ? this.points.find((q) => q.row === row) : null;
      if (!p) continue;
      ctx.beginPath();
      ctx.arc(p.px, p.py, p.r + 3, 0, 2 * Math.PI);
      ctx.strokeStyle = color;
      ctx.lineWidth = width;
      ctx.stroke();
      if (row === this.selected) {
        ctx.beginPath();
        ctx.arc(p.px, p.py, p.r + 5, 0, 2 * Math.PI);
        ctx.strokeStyle = "#ffd400";
        ctx.lineWidth = 2;
        ctx.stroke();
      }
    }
    ctx.lineWidth = 1;
  }

  _buildLegend() {
    const counts = {};
    for (const p of this.points) counts[p.bound] = (counts[p.bound] || 0) + 1;
    const items = Object.entries(counts)
      .sort((a, b) => b[1] - a[1])
      .map(([bound, n]) =>
        el(
          "span",
          { className: "hr-legend-item" },
          el("span", { className: `hr-swatch hr-bound-${bound}` }),
          `${bound} (${n})`,
        ),
      );
    const note = el("span", {
      className: "hr-muted",
      text: `${this.points.length} ops with a predicted time · point area ∝ time share`,
    });
    this.legend.replaceChildren(...items, note);
  }

  _hit(event) {
    const rect = this.canvas.getBoundingClientRect();
    const x = event.clientX - rect.left;
    const y = event.clientY - rect.top;
    let best = -1;
    let bestD = Infinity;
    // Later points are drawn on top: on ties prefer them.
    for (let i = this.points.length - 1; i >= 0; i--) {
      const p = this.points[i];
      const d = Math.hypot(p.px - x, p.py - y);
      if (d <= p.r + 3 && d < bestD) {
        best = i;
        bestD = d;
      }
    }
    return best;
  }

  _onMove(event) {
    if (this._pending) return;
    this._pending = true;
    requestAnimationFrame(() => {
      this._pending = false;
      this._setHover(this._hit(event), event);
    });
  }

  _setHover(i, event) {
    if (i !== this.hover) {
      this.hover = i;
      this.draw();
    }
    if (i < 0 || !event) {
      this.tooltip.hidden = true;
      this.canvas.style.cursor = "";
      return;
    }
    this.canvas.style.cursor = "pointer";
    this._fillTooltip(this.points[i]);
    const rect = this.wrap.getBoundingClientRect();
    const x = event.clientX - rect.left;
    const y = event.clientY - rect.top;
    this.tooltip.hidden = false;
    const w = this.tooltip.offsetWidth;
    const left = x + 14 + w > rect.width ? Math.max(0, x - 14 - w) : x + 14;
    this.tooltip.style.left = `${left}px`;
    this.tooltip.style.top = `${Math.max(0, y - 10)}px`;
  }

  _fillTooltip(p) {
    const m = this.model;
    const g = (c) => m.get(p.row, c);
    const line = (label, value) =>
      value === "" || value === null || value === undefined
        ? null
        : el("div", {}, el("span", { className: "hr-k", text: label }), " ", String(value));
    this.tooltip.replaceChildren(
      ...[
        el("div", { className: "hr-tt-name", text: g("name") }),
        line("opcode", g("opcode")),
        line("bound", g("bound")),
        line("op_name", g("op_name")),
        line("source", g("source")),
        line("FLOPs", fmtSI(g("flops"))),
        line("bytes", fmtBytes(g("bytes_accessed"))),
        g("comm_bytes") ? line("comm bytes", fmtBytes(g("comm_bytes"))) : null,
        line("intensity", p.gutter ? "no FLOPs (off axes)" : `${fmtSI(g("intensity"))} FLOP/B`),
        line(
          "time",
          `${fmtTime(g("t_roofline_s"))} (compute ${fmtTime(g("t_compute_s"))}, ` +
            `memory ${fmtTime(g("t_memory_s"))}, comm ${fmtTime(g("t_comm_s"))})`,
        ),
        line("share", fmtPct(g("share"))),
        line("hint", g("hint")),
      ].filter(Boolean),
    );
  }
}
