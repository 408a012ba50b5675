// Log-log roofline chart: the chip's roofs and ridges, one point per op with a nonzero bound
// (FLOPs ÷ t_bound_s: on its roof; colored by bound, area ∝ time share), and where calibration
// expects it slower a drop line down to its expected rate (FLOPs ÷ t_expected_s); in a measured
// run also the attained point of each op (FLOPs ÷ measured time, at the same intensity), joined
// to its bound's point by a line.
// The selected (or hovered) op's own roof is drawn over it: its compute roof (the rate of the unit
// that binds it — MXU, VPU, EUP: the bound, hardware facts only) and its memory roof, the
// server's roof_* columns; every predicted point lies on its own roof unless its link time sets it.
//
// x = arithmetic intensity (FLOP/byte), y = FLOP/s (FLOPs ÷ time). Ops without FLOPs (or bytes)
// have no place on log axes: they sit in a strip of their own at the left ("no FLOPs"), placed by
// predicted time on the strip's own scale. A point outside the plotted range is drawn on the edge
// it crosses as a triangle pointing out, and counted in the legend: no point is ever drawn at a
// value it does not have.
//
// Two stacked canvases: the base (axes, roofs, points) is drawn when the report, the filters or
// the size change; hover and selection only redraw the overlay, so a 20k-op report stays fast.

import { constants } from "./state.js";
import { el, fmtBytes, fmtPct, fmtSI, fmtTime } from "./util.js";

const HEIGHT = 440;
const TOP = 34; // captions above the plot
const BOTTOM = 44; // x ticks and title
const STRIP = 52; // the "no FLOPs" strip
const Y_LABELS = 44; // y tick labels, between the strip and the plot
const MAX_Y_DECADES = 9;
const MAX_X_DECADES = 12;
const FONT = "11px system-ui, sans-serif";
const LABEL_GAP = 14; // line height of a roof label
const SUPERSCRIPT = { "-": "⁻", 0: "⁰", 1: "¹", 2: "²", 3: "³", 4: "⁴", 5: "⁵", 6: "⁶", 7: "⁷", 8: "⁸", 9: "⁹" };

function log10(x) {
  return Math.log(x) / Math.LN10;
}

/** 10^k with an SI prefix: 1, 10, 100, 1k, … 100P; `null` beyond the prefixes. */
function prefixed(k) {
  const prefixes = ["", "k", "M", "G", "T", "P", "E"];
  const p = Math.floor(k / 3);
  return k >= 0 && p < prefixes.length ? `${10 ** (k - 3 * p)}${prefixes[p]}` : null;
}

/** A power of ten as an x label: 0.001 … 1 … 100k; "10⁻⁵" beyond. */
function decadeLabel(k) {
  if (k >= -3 && k < 0) return (10 ** k).toFixed(-k);
  if (k >= 0 && k <= 5) return prefixed(k);
  return `10${String(k)
    .split("")
    .map((c) => SUPERSCRIPT[c])
    .join("")}`;
}

/** A FLOP/s decade as a y label: 1M, 10G, 1P; powers of ten beyond the prefixes. */
function rateLabel(k) {
  return prefixed(k) ?? decadeLabel(k);
}

/** Deterministic jitter in [0, 1) from an integer (keeps the strip stable across redraws). */
function jitter(i) {
  const s = Math.sin(i * 12.9898 + 78.233) * 43758.5453;
  return s - Math.floor(s);
}

/** Spread label centres apart by at least `gap`, each as close to its wish as the others allow. */
function spread(wishes, gap, lo, hi) {
  const y = wishes.map((w) => Math.min(hi, Math.max(lo, w)));
  for (let pass = 0; pass < 50; pass++) {
    let moved = false;
    for (let i = 1; i < y.length; i++) {
      const overlap = gap - (y[i] - y[i - 1]);
      if (overlap > 0.01) {
        y[i - 1] -= overlap / 2;
        y[i] += overlap / 2;
        moved = true;
      }
    }
    for (let i = 0; i < y.length; i++) y[i] = Math.min(hi - (y.length - 1 - i) * gap, Math.max(lo + i * gap, y[i]));
    if (!moved) break;
  }
  return y;
}

export class RooflineChart {
  /**
   * @param {HTMLElement} container
   * @param {{onSelect: (row: number) => void}} options
   */
  constructor(container, { onSelect }) {
    this.onSelect = onSelect;
    this.model = null;
    this.points = []; // predicted points, big first (drawn first)
    this._orders = {}; // keyboard orders (see _order)
    this.measured = []; // attained points of a measured run
    this.byRow = new Map(); // row -> {predicted, measured}
    this.shown = null; // Uint8Array over rows: 1 = passes the table's filters (null = all)
    this.showMeasured = true;
    this.selected = -1;
    this.hover = null;
    this.base = el("canvas", { className: "hr-chart-base", attrs: { "aria-hidden": "true" } });
    this.canvas = el("canvas", {
      className: "hr-chart-canvas hr-chart-overlay",
      attrs: {
        role: "img",
        tabindex: 0,
        "aria-label": "Roofline chart: arrow keys move between points",
        "data-testid": "roofline-canvas",
      },
    });
    this.tooltip = el("div", { className: "hr-tooltip", attrs: { role: "tooltip" } });
    this.tooltip.hidden = true;
    this.legend = el("div", { className: "hr-legend" });
    this.note = el("p", { className: "hr-chart-note hr-muted" });
    this.wrap = el("div", { className: "hr-chart-wrap" }, this.base, this.canvas, this.tooltip);
    container.append(this.wrap, this.legend, this.note);

    this.canvas.addEventListener("mousemove", (e) => this._onMove(e));
    this.canvas.addEventListener("mouseleave", () => this._setHover(null));
    this.canvas.addEventListener("click", (e) => {
      const p = this._hit(this._xy(e));
      if (p) this.onSelect(p.row);
    });
    this.canvas.addEventListener("keydown", (e) => this._onKey(e));
    // Test and debugging hooks: points as drawn (CSS pixels relative to the canvas) and layout.
    this.canvas.hloPoints = () => this.points.map(exportPoint);
    this.canvas.hloMeasured = () => this.measured.map(exportPoint);
    this.canvas.hloLayout = () => this._layout;
    this.canvas.hloOwnRoof = () => this._ownRoof;
    this.canvas.hloHover = (x, y) => this.hoverAt({ x, y });
    this._resize = new ResizeObserver(() => this.draw());
    this._resize.observe(this.wrap);
  }

  /** Show a report (a Model from index.js); an unclassified report draws no points. */
  /** Show a report; with `draw: false` the caller's setShown (which follows) draws it once. */
  setModel(model, { draw = true } = {}) {
    this.model = model;
    this.selected = -1;
    this.hover = null;
    this.shown = null;
    this.tooltip.hidden = true;
    this._buildPoints();
    if (draw) this.draw();
  }

  /** Rows that pass the table's filters (a Uint8Array over rows); the others are drawn faint. */
  setShown(mask) {
    this.shown = mask;
    this.draw();
  }

  setShowMeasured(on) {
    this.showMeasured = on;
    this.draw();
  }

  select(row) {
    this.selected = row;
    this._drawOverlay();
  }

  isShown(row) {
    return !this.shown || this.shown[row] === 1;
  }

  _buildPoints() {
    const m = this.model;
    const points = [];
    const measured = [];
    this.byRow = new Map();
    if (m && m.has("t_expected_s")) {
      const hasMeasured = m.has("measured_s");
      // the bound's point lies on the roof its row names; the expectation is drawn apart
      const timeKey = m.has("t_bound_s") ? "t_bound_s" : "t_expected_s";
      for (let row = 0; row < m.rows.length; row++) {
        const t = m.get(row, timeKey);
        if (!(typeof t === "number" && t > 0)) continue;
        const flops = m.get(row, "flops") || 0;
        const intensity = m.get(row, "intensity");
        const onAxes = flops > 0 && typeof intensity === "number" && intensity > 0;
        const share = m.get(row, "share") || 0;
        const bound = m.get(row, "bound") || "unknown";
        const p = {
          row,
          kind: "predicted",
          t,
          strip: !onAxes,
          x: onAxes ? intensity : 0,
          y: onAxes ? flops / t : 0,
          // the expectation's rate (flops ÷ t_expected_s): on or under the bound's point
          ey: onAxes ? flops / (m.get(row, "t_expected_s") || t) : 0,
          bound,
          r: 2.5 + 16 * Math.sqrt(Math.max(0, Math.min(1, share))),
          px: 0,
          py: 0,
          out: "",
        };
        points.push(p);
        const entry = { predicted: p, measured: null };
        const ms = hasMeasured ? m.get(row, "measured_s") : null;
        if (onAxes && typeof ms === "number" && ms > 0) {
          const q = { ...p, kind: "measured", t: ms, y: flops / ms, r: 4.5 };
          measured.push(q);
          entry.measured = q;
        }
        this.byRow.set(row, entry);
      }
    }
    points.sort((a, b) => b.r - a.r); // big first, so small ones stay visible and hoverable
    this.points = points;
    this.measured = measured;
    this.canvas.dataset.points = String(points.length);
    this.canvas.dataset.measured = String(measured.length);
    this._orders = {}; // keyboard orders, made on the first key (two sorts of every point)
  }

  _roofs() {
    const s = (this.model && this.model.summary) || {};
    const bw = s.hbm_bandwidth > 0 ? s.hbm_bandwidth : null;
    const roofs = [];
    for (const [dtype, roof] of Object.entries(s.roofs || {})) {
      if (!roof || !(roof.peak_flops > 0)) continue;
      const same = roofs.find((r) => r.peak === roof.peak_flops);
      if (same) same.labels.push(dtype);
      else {
        roofs.push({
          labels: [dtype],
          peak: roof.peak_flops,
          ridge: roof.critical_intensity, // the server's (none drawn where it has none)
        });
      }
    }
    roofs.sort((a, b) => b.peak - a.peak);
    const vmem = s.vmem_bandwidth > 0 ? s.vmem_bandwidth : null;
    return { bw, vmem, roofs };
  }

  /** Decades shown: every roof and ridge; the points as far as MAX_*_DECADES allow. */
  _ranges(roofs) {
    let xLow = Infinity;
    let xHigh = 0;
    let yLow = Infinity;
    let yHigh = 0;
    const peaks = roofs.roofs.map((r) => r.peak);
    const ridges = roofs.roofs.map((r) => r.ridge).filter((r) => r > 0);
    const top = peaks.length ? Math.max(...peaks) : 0;
    for (const p of this.showMeasured ? [...this.points, ...this.measured] : this.points) {
      if (p.strip) continue;
      xLow = Math.min(xLow, p.x);
      xHigh = Math.max(xHigh, p.x);
      yLow = Math.min(yLow, p.y);
      if (!top || p.y <= top * 10) yHigh = Math.max(yHigh, p.y); // a measured op may beat a roof
    }
    // y: from the top roof (or the highest point) down, at most MAX_Y_DECADES.
    const ky1 = Math.ceil(log10(Math.max(top, yHigh, 1) * 1.15));
    let ky0 = Number.isFinite(yLow) ? Math.floor(log10(yLow / 1.3)) : ky1 - 4;
    ky0 = Math.min(Math.max(ky0, ky1 - MAX_Y_DECADES), ky1 - 3);
    // x: room right of the highest ridge for the flat roofs; on the left no further than the data,
    // nor than where the memory roof leaves the bottom of the plot.
    const ridgeHigh = ridges.length ? Math.max(...ridges) : 100;
    const ridgeLow = ridges.length ? Math.min(...ridges) : 1;
    let kx1 = Math.ceil(log10(Math.max(ridgeHigh * 4, xHigh) * 1.3));
    const xData = Number.isFinite(xLow) ? xLow : ridgeLow / 100;
    const xRoofBottom = roofs.bw ? 10 ** ky0 / roofs.bw : xData;
    let kx0 = Math.floor(log10(Math.min(ridgeLow / 10, Math.max(xData, xRoofBottom)) / 1.3));
    kx0 = Math.max(kx0, kx1 - MAX_X_DECADES);
    if (kx1 - kx0 < 3) kx1 = kx0 + 3;
    return { kx0, kx1, ky0, ky1 };
  }

  draw() {
    const width = Math.max(360, this.wrap.clientWidth || 800);
    const dpr = window.devicePixelRatio || 1;
    for (const c of [this.base, this.canvas]) {
      c.style.width = `${width}px`;
      c.style.height = `${HEIGHT}px`;
      c.width = Math.round(width * dpr);
      c.height = Math.round(HEIGHT * dpr);
    }
    const ctx = this.base.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    const css = getComputedStyle(this.wrap);
    const color = (name, fallback) => css.getPropertyValue(name).trim() || fallback;
    this.colors = {
      fg: color("--hr-fg", "#222"),
      grid: color("--hr-grid", "#e4e4e4"),
      muted: color("--hr-muted", "#777"),
      bg: color("--hr-bg", "#fff"),
      accent: color("--hr-accent", "#f57c00"),
    };
    const { fg, grid, muted } = this.colors;
    ctx.clearRect(0, 0, width, HEIGHT);
    ctx.font = FONT;

    const roofs = this._roofs();
    const labels = roofs.roofs.map((r) => ({
      r,
      text: `${r.labels.join(", ")} ${fmtSI(r.peak, "FLOP/s")}`,
      sub: r.ridge > 0 ? ` · ridge ${fmtSI(r.ridge)}` : "",
    }));
    const labelWidth = Math.max(
      90,
      ...labels.map((l) => ctx.measureText(l.text).width + ctx.measureText(l.sub).width),
    );
    const plot = {
      left: STRIP + 8 + Y_LABELS,
      right: width - (labelWidth + 26),
      top: TOP,
      bottom: HEIGHT - BOTTOM,
    };
    const { kx0, kx1, ky0, ky1 } = this._ranges(roofs);
    const X = (x) => plot.left + ((log10(x) - kx0) / (kx1 - kx0)) * (plot.right - plot.left);
    const Y = (y) => plot.bottom - ((log10(y) - ky0) / (ky1 - ky0)) * (plot.bottom - plot.top);
    const xmin = 10 ** kx0;
    const xmax = 10 ** kx1;
    const ymin = 10 ** ky0;
    const ymax = 10 ** ky1;

    // Grid, ticks and titles.
    const tickLabels = { x: [], y: [] };
    ctx.strokeStyle = grid;
    ctx.fillStyle = muted;
    ctx.lineWidth = 1;
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    const xStep = kx1 - kx0 > 9 ? 2 : 1;
    for (let k = kx0; k <= kx1; k++) {
      const x = Math.round(X(10 ** k)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(x, plot.top);
      ctx.lineTo(x, plot.bottom);
      ctx.stroke();
      if ((k - kx0) % xStep === 0) {
        ctx.fillText(decadeLabel(k), x, plot.bottom + 5);
        tickLabels.x.push(decadeLabel(k));
      }
    }
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (let k = ky0; k <= ky1; k++) {
      const y = Math.round(Y(10 ** k)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(plot.left, y);
      ctx.lineTo(plot.right, y);
      ctx.stroke();
      ctx.fillText(rateLabel(k), plot.left - 5, y);
      tickLabels.y.push(rateLabel(k));
    }
    ctx.strokeStyle = muted;
    ctx.strokeRect(plot.left + 0.5, plot.top + 0.5, plot.right - plot.left, plot.bottom - plot.top);
    ctx.fillStyle = fg;
    ctx.textAlign = "center";
    ctx.textBaseline = "bottom";
    ctx.fillText("arithmetic intensity (FLOP/byte)", (plot.left + plot.right) / 2, HEIGHT - 4);
    ctx.textAlign = "left";
    ctx.textBaseline = "alphabetic";
    ctx.fillText("FLOP/s (FLOPs ÷ time)", plot.left - Y_LABELS, TOP - 10);

    // The strip of ops without FLOPs, with its own time scale.
    const strip = { left: 4, right: 4 + STRIP, top: plot.top, bottom: plot.bottom };
    const stripPts = this.points.filter((p) => p.strip);
    let tMin = Infinity;
    let tMax = -Infinity;
    for (const p of stripPts) {
      tMin = Math.min(tMin, p.t);
      tMax = Math.max(tMax, p.t);
    }
    ctx.fillStyle = grid;
    ctx.globalAlpha = 0.5;
    ctx.fillRect(strip.left, strip.top, strip.right - strip.left, strip.bottom - strip.top);
    ctx.globalAlpha = 1;
    ctx.fillStyle = fg;
    ctx.textAlign = "center";
    ctx.fillText("no FLOPs", (strip.left + strip.right) / 2, TOP - 20);
    ctx.fillStyle = muted;
    ctx.fillText("by time", (strip.left + strip.right) / 2, TOP - 7);
    if (stripPts.length) {
      // Its scale: the longest op at the top, the shortest at the bottom.
      ctx.textBaseline = "top";
      ctx.font = "10px system-ui, sans-serif";
      ctx.fillText(`top ${fmtTime(tMax)}`, (strip.left + strip.right) / 2, strip.bottom + 5);
      ctx.fillText(`low ${fmtTime(tMin)}`, (strip.left + strip.right) / 2, strip.bottom + 18);
      ctx.font = FONT;
      ctx.textBaseline = "alphabetic";
    }

    // Roofs, clipped to the plot: memory diagonals up to the highest ridge, flat roofs from their
    // ridges, dashed ridge lines down to the x axis.
    ctx.save();
    ctx.beginPath();
    ctx.rect(plot.left, plot.top, plot.right - plot.left, plot.bottom - plot.top);
    ctx.clip();
    const topRoof = roofs.roofs[0];
    const memoryLine = (bw, dash) => {
      const xEnd = topRoof ? topRoof.peak / bw : xmax;
      ctx.save();
      ctx.setLineDash(dash);
      ctx.lineWidth = dash.length ? 1.2 : 2;
      ctx.strokeStyle = fg;
      ctx.beginPath();
      ctx.moveTo(X(xmin), Y(xmin * bw));
      ctx.lineTo(X(xEnd), Y(xEnd * bw));
      ctx.stroke();
      ctx.restore();
    };
    if (roofs.bw) memoryLine(roofs.bw, []);
    if (roofs.vmem) memoryLine(roofs.vmem, [6, 4]);
    ctx.lineWidth = 2;
    ctx.strokeStyle = fg;
    for (const r of roofs.roofs) {
      const start = r.ridge > 0 ? r.ridge : xmin;
      ctx.beginPath();
      ctx.moveTo(X(start), Y(r.peak));
      ctx.lineTo(plot.right, Y(r.peak));
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

    // Roof labels right of the plot, centred on their roof; when two roofs are closer than a
    // label, the labels move apart the least they must and a leader joins each to its roof.
    const placed = labels
      .map((l) => ({ ...l, wish: Y(l.r.peak) }))
      .filter((l) => l.wish >= plot.top - 1 && l.wish <= plot.bottom + 1)
      .sort((a, b) => a.wish - b.wish);
    const centres = spread(
      placed.map((l) => l.wish),
      LABEL_GAP,
      LABEL_GAP / 2 + 2,
      HEIGHT - LABEL_GAP / 2 - 2,
    );
    const labelX = plot.right + 20;
    const boxes = [];
    placed.forEach((l, i) => {
      const y = centres[i];
      ctx.strokeStyle = muted;
      ctx.lineWidth = 1;
      ctx.beginPath();
      ctx.moveTo(plot.right, l.wish);
      ctx.lineTo(plot.right + 6, l.wish);
      ctx.lineTo(labelX - 3, y);
      ctx.stroke();
      ctx.textAlign = "left";
      ctx.textBaseline = "middle";
      ctx.fillStyle = fg;
      ctx.fillText(l.text, labelX, y);
      const w0 = ctx.measureText(l.text).width;
      ctx.fillStyle = muted;
      ctx.fillText(l.sub, labelX + w0, y);
      const w = w0 + ctx.measureText(l.sub).width;
      boxes.push({ text: l.text + l.sub, line: l.wish, x: labelX, y: y - LABEL_GAP / 2, w, h: LABEL_GAP });
    });

    // Memory roof captions on their own diagonal, turned to its slope.
    const captions = [];
    const diagonalCaption = (bw, text) => {
      const lo = Math.max(log10(xmin), log10(ymin / bw));
      const hi = Math.min(log10(topRoof ? topRoof.peak / bw : xmax), log10(ymax / bw), log10(xmax));
      if (!(hi > lo)) return;
      const x0 = 10 ** (lo + 0.15 * (hi - lo));
      const x1 = 10 ** (lo + 0.16 * (hi - lo));
      const angle = Math.atan2(Y(x1 * bw) - Y(x0 * bw), X(x1) - X(x0));
      ctx.save();
      ctx.translate(X(x0), Y(x0 * bw));
      ctx.rotate(angle);
      ctx.fillStyle = muted;
      ctx.textAlign = "left";
      ctx.textBaseline = "bottom";
      ctx.fillText(text, 4, -3);
      ctx.restore();
      captions.push({ text, x: X(x0), y: Y(x0 * bw), angle });
    };
    if (roofs.bw) diagonalCaption(roofs.bw, `HBM ${fmtSI(roofs.bw, "B/s")}`);
    if (roofs.vmem) diagonalCaption(roofs.vmem, `VMEM ${fmtSI(roofs.vmem, "B/s")} (dashed)`);

    // Where each point goes; a point beyond an edge sits on it and is marked.
    const lt0 = log10(tMin);
    const lt1 = log10(tMax);
    const place = (p) => {
      if (p.strip) {
        const f = lt1 > lt0 ? (log10(p.t) - lt0) / (lt1 - lt0) : 0.5;
        p.px = strip.left + 6 + jitter(p.row) * (strip.right - strip.left - 12);
        p.py = strip.bottom - 6 - f * (strip.bottom - strip.top - 12);
        p.out = "";
        return;
      }
      // An edge marker sits just inside the edge it crosses, its tip on the axis.
      const inset = 6;
      let px = X(p.x);
      let py = Y(p.y);
      p.out = "";
      if (py > plot.bottom) (py = plot.bottom - inset), (p.out = "bottom");
      else if (py < plot.top) (py = plot.top + inset), (p.out = "top");
      if (px < plot.left) (px = plot.left + inset), (p.out ||= "left");
      else if (px > plot.right) (px = plot.right - inset), (p.out ||= "right");
      p.px = Math.min(plot.right, Math.max(plot.left, px));
      p.py = Math.min(plot.bottom, Math.max(plot.top, py));
    };
    for (const p of this.points) place(p);
    for (const p of this.measured) place(p);

    // Points: faint ones (filtered out) first, then by color; one path per group.
    const drawGroup = (pts, shape) => {
      const groups = new Map();
      for (const p of pts) {
        const key = `${p.bound}|${this.isShown(p.row) ? 1 : 0}`;
        if (!groups.has(key)) groups.set(key, []);
        groups.get(key).push(p);
      }
      const keys = [...groups.keys()].sort((a, b) => a.slice(-1) - b.slice(-1));
      for (const key of keys) {
        const [bound, on] = key.split("|");
        const c = constants.boundColors[bound] || constants.boundColors.unknown;
        ctx.beginPath();
        for (const p of groups.get(key)) shape(ctx, p);
        ctx.fillStyle = c;
        ctx.strokeStyle = c;
        ctx.globalAlpha = on === "1" ? 0.5 : 0.08;
        ctx.fill();
        ctx.globalAlpha = on === "1" ? 0.95 : 0.2;
        ctx.stroke();
      }
      ctx.globalAlpha = 1;
    };
    ctx.lineWidth = 1;
    const measured = this.showMeasured ? this.measured : [];
    if (measured.length) {
      // Each attained point joined to its predicted point: the gap is the efficiency.
      ctx.strokeStyle = muted;
      ctx.globalAlpha = 0.6;
      ctx.beginPath();
      for (const q of measured) {
        const p = this.byRow.get(q.row).predicted;
        ctx.moveTo(p.px, p.py);
        ctx.lineTo(q.px, q.py);
      }
      ctx.stroke();
      ctx.globalAlpha = 1;
    }
    // Each op's expectation, where calibration puts it below its bound: a drop line from the
    // bound's point (on its roof) down to the expected rate, ended by a tick.
    ctx.strokeStyle = muted;
    ctx.globalAlpha = 0.7;
    ctx.beginPath();
    for (const p of this.points) {
      if (p.out || p.strip || !(p.ey > 0) || p.ey >= p.y * (1 - 1e-9)) continue;
      const ey = Math.min(plot.bottom, Y(p.ey));
      p.epy = ey;
      ctx.moveTo(p.px, p.py);
      ctx.lineTo(p.px, ey);
      ctx.moveTo(p.px - 3, ey);
      ctx.lineTo(p.px + 3, ey);
    }
    ctx.stroke();
    ctx.globalAlpha = 1;
    drawGroup(
      this.points.filter((p) => !p.out),
      (c, p) => {
        c.moveTo(p.px + p.r, p.py);
        c.arc(p.px, p.py, p.r, 0, 2 * Math.PI);
      },
    );
    drawGroup(
      measured.filter((p) => !p.out),
      (c, p) => {
        c.moveTo(p.px, p.py - p.r - 1);
        c.lineTo(p.px + p.r + 1, p.py);
        c.lineTo(p.px, p.py + p.r + 1);
        c.lineTo(p.px - p.r - 1, p.py);
        c.closePath();
      },
    );
    const edge = [...this.points, ...measured].filter((p) => p.out);
    drawGroup(edge, (c, p) => triangle(c, p.px, p.py, p.out, 5));

    this._geom = { plot, strip, X, Y, xs: [kx0, kx1] };
    this._layout = {
      width,
      height: HEIGHT,
      plot,
      strip,
      labels: boxes,
      captions,
      decades: { x: [kx0, kx1], y: [ky0, ky1] },
      tickLabels,
    };
    this._buildLegend(edge, { xmin, xmax, ymin, ymax });
    this._drawOverlay();
  }

  _drawOverlay() {
    const ctx = this.canvas.getContext("2d");
    const dpr = window.devicePixelRatio || 1;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, this.canvas.width, this.canvas.height);
    if (!this._geom) return;
    const { fg } = this.colors;
    const ring = (p, radius, color, width) => {
      ctx.beginPath();
      ctx.arc(p.px, p.py, radius, 0, 2 * Math.PI);
      ctx.strokeStyle = color;
      ctx.lineWidth = width;
      ctx.stroke();
    };
    if (this.hover) ring(this.hover, this.hover.r + 3, fg, 1.5);
    const own = this.byRow.get(this.hover && this.hover.kind === "predicted" ? this.hover.row : this.selected);
    this._ownRoof = own ? this._drawOwnRoof(ctx, own.predicted) : null;
    const entry = this.byRow.get(this.selected);
    if (entry) {
      const p = entry.predicted;
      const q = this.showMeasured ? entry.measured : null;
      if (q) {
        ctx.beginPath();
        ctx.moveTo(p.px, p.py);
        ctx.lineTo(q.px, q.py);
        ctx.strokeStyle = fg;
        ctx.lineWidth = 2;
        ctx.stroke();
        ring(q, q.r + 4, "#111", 2);
      }
      ring(p, p.r + 3, "#111", 3);
      ring(p, p.r + 5, "#ffd400", 2);
    }
  }

  /** The op's own roof, min(compute roof, intensity × memory roof), over the plot; labelled with
   * its unit. Returns what was drawn (for tests), or null where the op has no roof on the axes. */
  _drawOwnRoof(ctx, p) {
    const m = this.model;
    if (!m || p.strip || !m.has("roof_unit")) return null;
    const unit = m.get(p.row, "roof_unit");
    const flops = m.get(p.row, "roof_flops_per_s");
    const bytes = m.get(p.row, "roof_bytes_per_s");
    if (!unit || !(flops > 0 || bytes > 0)) return null;
    const { plot, X, Y, xs } = this._geom;
    const roof = (x) => Math.min(flops > 0 ? flops : Infinity, bytes > 0 ? x * bytes : Infinity);
    ctx.save();
    ctx.beginPath();
    ctx.rect(plot.left, plot.top, plot.right - plot.left, plot.bottom - plot.top);
    ctx.clip();
    // a link-bound op sits below both roofs (its time is its collective's): no line, its label
    if (unit !== "link") {
      ctx.setLineDash([7, 3]);
      ctx.lineWidth = 2;
      ctx.strokeStyle = this.colors.accent;
      ctx.beginPath();
      const steps = 96;
      for (let i = 0; i <= steps; i++) {
        const x = 10 ** (xs[0] + ((xs[1] - xs[0]) * i) / steps);
        if (i === 0) ctx.moveTo(X(x), Y(roof(x)));
        else ctx.lineTo(X(x), Y(roof(x)));
      }
      ctx.stroke();
    }
    ctx.setLineDash([]);
    ctx.font = FONT;
    ctx.fillStyle = this.colors.accent;
    ctx.textAlign = p.px > (plot.left + plot.right) / 2 ? "right" : "left";
    ctx.textBaseline = "bottom";
    const label = unit === "link" ? "its time: link (its collective)" : `its roof: ${unit}`;
    ctx.fillText(label, p.px + (ctx.textAlign === "left" ? 8 : -8), Math.max(plot.top + 12, p.py - p.r - 4));
    ctx.restore();
    return { row: p.row, unit, flops, bytes, label };
  }

  _buildLegend(edge, range) {
    // the plotted ops per bound; the ops without FLOPs (the strip) are counted apart
    const counts = {};
    let inStrip = 0;
    for (const p of this.points) {
      if (p.strip) inStrip += 1;
      else counts[p.bound] = (counts[p.bound] || 0) + 1;
    }
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
    const parts = [
      `${this.points.length - inStrip} ops on the roofs` +
        (inStrip ? ` · ${inStrip} without FLOPs in the strip` : "") +
        " · area ∝ time share",
    ];
    if (this.measured.length && this.showMeasured) {
      parts.push(`◆ ${this.measured.length} measured: FLOPs ÷ measured time, joined to the prediction`);
    }
    const beyond = { bottom: 0, top: 0, left: 0, right: 0 };
    for (const p of edge) beyond[p.out] += 1;
    const words = {
      bottom: `▼ ${beyond.bottom} below ${fmtSI(range.ymin, "FLOP/s")}`,
      top: `▲ ${beyond.top} above ${fmtSI(range.ymax, "FLOP/s")}`,
      left: `◀ ${beyond.left} below ${fmtSI(range.xmin)} FLOP/B`,
      right: `▶ ${beyond.right} above ${fmtSI(range.xmax)} FLOP/B`,
    };
    const out = Object.keys(beyond)
      .filter((k) => beyond[k])
      .map((k) => words[k]);
    const clipped = out.length
      ? el("span", {
          className: "hr-clipped",
          text: `outside the plot, drawn on its edge: ${out.join(" · ")}`,
          dataset: { count: String(edge.length) },
        })
      : null;
    this.legend.replaceChildren(
      ...items,
      el("span", { className: "hr-muted", text: parts.join(" · ") }),
      ...(clipped ? [clipped] : []),
    );
    this.canvas.dataset.outside = String(edge.length);
    const units = {};
    if (this.model && this.model.has("roof_unit"))
      for (const p of this.points) {
        if (p.strip) continue; // a roof holds the ops with FLOPs
        const u = this.model.get(p.row, "roof_unit");
        if (u) units[u] = (units[u] || 0) + 1;
      }
    const onRoofs = Object.entries(units)
      .sort((a, b) => b[1] - a[1])
      .map(([u, n]) => `${u} ${n}`)
      .join(" · ");
    this.note.textContent =
      "Solid roofs: the matrix unit's peak per dtype and HBM (dashed: VMEM). Each point is the " +
      "op's bound (hardware facts only) and lies on its own roof — the unit that binds it — " +
      "drawn (dashed, orange) for the selected or hovered op; its expected time is in the details" +
      (onRoofs ? `. Points per roof: ${onRoofs}.` : ".");
    this.note.dataset.units = JSON.stringify(units);
    this.note.hidden = !this.points.length;
    if (this.model && !this.model.has("t_expected_s")) {
      this.note.textContent =
        "This report is not judged on a chip, so it has no roofline: choose a chip above.";
      this.note.hidden = false;
      this.note.dataset.unjudged = "1";
    } else delete this.note.dataset.unjudged;
  }

  _xy(event) {
    const rect = this.canvas.getBoundingClientRect();
    return { x: event.clientX - rect.left, y: event.clientY - rect.top };
  }

  /** The point under (x, y): measured points first (drawn on top), then the smallest predicted. */
  _hit({ x, y }) {
    let best = null;
    let bestD = Infinity;
    const test = (p) => {
      const d = Math.hypot(p.px - x, p.py - y);
      if (d <= p.r + 3 && d < bestD) {
        best = p;
        bestD = d;
      }
    };
    if (this.showMeasured) for (const p of this.measured) test(p);
    if (best) return best;
    for (let i = this.points.length - 1; i >= 0; i--) test(this.points[i]);
    return best;
  }

  _onMove(event) {
    this._last = this._xy(event);
    if (this._pending) return;
    this._pending = true;
    requestAnimationFrame(() => {
      this._pending = false;
      this.hoverAt(this._last);
    });
  }

  /** Hover the point at canvas coordinates (x, y), if any (also the test hook for timing). */
  hoverAt(xy) {
    this._setHover(this._hit(xy), xy);
  }

  _setHover(p, xy) {
    if (p !== this.hover) {
      this.hover = p;
      this._drawOverlay();
    }
    if (!p) {
      this.tooltip.hidden = true;
      this.canvas.style.cursor = "";
      return;
    }
    this.canvas.style.cursor = "pointer";
    this._fillTooltip(p);
    this._placeTooltip(xy || { x: p.px, y: p.py });
  }

  _placeTooltip({ x, y }) {
    this.tooltip.hidden = false;
    const w = this.tooltip.offsetWidth;
    const width = this.wrap.clientWidth;
    const left = x + 14 + w > width ? Math.max(0, x - 14 - w) : x + 14;
    this.tooltip.style.left = `${left}px`;
    this.tooltip.style.top = `${Math.max(0, y - 10)}px`;
  }

  /** Keyboard order along x (intensity; strip ops first, by time) or y. */
  _order(key) {
    this._orders[key] ??= this.points
      .slice()
      .sort((a, b) => (a.strip !== b.strip ? (a.strip ? -1 : 1) : a.strip ? a.t - b.t : a[key] - b[key] || a.row - b.row));
    return this._orders[key];
  }

  _onKey(event) {
    const keys = { ArrowRight: ["x", 1], ArrowLeft: ["x", -1], ArrowUp: ["y", 1], ArrowDown: ["y", -1] };
    const order = keys[event.key] && [this._order(keys[event.key][0]), keys[event.key][1]];
    if (event.key === "Escape") {
      this._setHover(null);
      return;
    }
    if (!order || !this.points.length) return;
    event.preventDefault();
    const [list, step] = order;
    let i = list.findIndex((p) => p.row === this.selected);
    // Skip ops the filters hide: the keys walk what the table shows.
    for (let n = 0; n < list.length; n++) {
      i = i < 0 ? (step > 0 ? 0 : list.length - 1) : (i + step + list.length) % list.length;
      if (this.isShown(list[i].row)) break;
    }
    const p = list[i];
    this.onSelect(p.row);
    this.hover = null;
    this._fillTooltip(p);
    this._placeTooltip({ x: p.px, y: p.py });
  }

  _fillTooltip(p) {
    const m = this.model;
    const g = (c) => m.get(p.row, c);
    const line = (label, value) =>
      value === "" || value === null || value === undefined
        ? null
        : el("div", {}, el("span", { className: "hr-k", text: label }), " ", String(value));
    const where = p.out ? ` (off the plot: drawn on its ${p.out} edge)` : "";
    this.tooltip.replaceChildren(
      ...[
        el("div", { className: "hr-tt-name", text: g("name") }),
        p.kind === "measured" ? el("div", { className: "hr-k", text: "measured point" }) : null,
        !this.isShown(p.row) ? el("div", { className: "hr-k", text: "hidden by the table's filters" }) : null,
        line("opcode", g("opcode")),
        line("bound", g("bound")),
        m.has("roof_unit") ? line("on the roof of", g("roof_unit")) : null,
        line("op_name", g("op_name")),
        line("source", g("source")),
        line("FLOPs", fmtSI(g("flops"))),
        line("bytes", fmtBytes(g("bytes_accessed"))),
        g("comm_bytes") ? line("comm bytes", fmtBytes(g("comm_bytes"))) : null,
        line("intensity", p.strip ? "no FLOPs (off the axes)" : `${fmtSI(g("intensity"))} FLOP/B${where}`),
        p.strip ? null : line(p.kind === "measured" ? "attained" : "predicted", fmtSI(p.y, "FLOP/s")),
        line(
          "time ≥ (bound)",
          `${fmtTime(m.has("t_bound_s") ? g("t_bound_s") : g("t_expected_s"))} ` +
            `(compute ${fmtTime(g("t_compute_s"))}, ` +
            `memory ${fmtTime(g("t_memory_s"))}, comm ${fmtTime(g("t_comm_s"))})`,
        ),
        line(
          "time ≈ (expected)",
          fmtTime(g("t_expected_s")) + (m.has("expected_by") && g("expected_by") ? ` (${g("expected_by")})` : ""),
        ),
        m.has("measured_s") ? line("measured", fmtTime(g("measured_s"))) : null,
        m.has("efficiency") ? line("efficiency", fmtPct(g("efficiency"))) : null,
        line("share", fmtPct(g("share"))),
        line("hint", g("hint")),
      ].filter(Boolean),
    );
  }
}

function exportPoint(p) {
  return { row: p.row, x: p.px, y: p.py, r: p.r, bound: p.bound, out: p.out, strip: p.strip, kind: p.kind, value_x: p.x, value_y: p.y, expected_y: p.ey };
}

/** A triangle at (x, y) pointing out of the plot through the edge `out`. */
function triangle(ctx, x, y, out, s) {
  const dir = { bottom: [0, 1], top: [0, -1], left: [-1, 0], right: [1, 0] }[out];
  const [dx, dy] = dir;
  ctx.moveTo(x + dx * s, y + dy * s);
  ctx.lineTo(x - dx * s * 0.2 - dy * s, y - dy * s * 0.2 + dx * s);
  ctx.lineTo(x - dx * s * 0.2 + dy * s, y - dy * s * 0.2 - dx * s);
  ctx.closePath();
}
