// The step as scheduled (GET timeline: Report.timeline on the server): one lane for the compute
// stream and one per transfer engine (DMA; ICI links per device group on a TPU, NVLink and the
// network on a GPU), each op a bar from its begin to its end. The part of a transfer the stream
// waited for (its exposed time) is hatched in red on its bar and drawn as a wait on the stream.
// A click on a bar selects its op. Fetched only when the section is opened; drawn on one canvas so
// a 20k-op step stays fast. Every time here is the server's; the face only maps them to pixels.
// The view zooms and pans: the wheel zooms about the pointer (shift+wheel pans), a drag pans, and
// on the focused canvas + / - (or W / S) zoom, ← / → (or A / D) pan and 0 shows the whole step.
// "Download trace" and "Open in Perfetto" take the server's Chrome trace (Report.to_trace).

import { constants } from "./state.js";
import { el, fmtTime, getJSON, route } from "./util.js";

const LANE = 24; // px per lane
const LABELS = 170; // lane titles on the left
const AXIS = 22; // time axis at the bottom
const ZOOM = 1.25; // per wheel notch or key press
const MIN_SPAN = 1e-12; // s: the narrowest view (a picosecond)
const PERFETTO = "https://ui.perfetto.dev";

export class Timeline {
  /** @param {HTMLElement} container @param {{onSelect: (row: number) => void}} options */
  constructor(container, { onSelect }) {
    this.onSelect = onSelect;
    this.box = el("details", { className: "hr-timeline", attrs: { id: "hr-timeline" } });
    this.status = el("span", { className: "hr-muted" });
    this.box.append(
      el("summary", {}, "Timeline of the step as scheduled ", this.status),
      el("p", {
        className: "hr-muted",
        text:
          "Ops in XLA's order on the compute stream; collectives and copies on the engine that " +
          "moves them. Red hatching: the part of a transfer the stream waited for (exposed).",
      }),
    );
    this.download = el("a", {
      className: "hr-link",
      text: "Download trace (.json)",
      attrs: { "data-testid": "timeline-download" },
    });
    this.perfetto = el("button", {
      className: "hr-button",
      text: "Open in Perfetto",
      attrs: { type: "button", "data-testid": "timeline-perfetto" },
    });
    this.reset = el("button", {
      className: "hr-button",
      text: "Whole step",
      attrs: { type: "button", "data-testid": "timeline-reset" },
    });
    this.window = el("span", { className: "hr-muted", attrs: { "data-testid": "timeline-window" } });
    this.box.append(
      el(
        "div",
        { className: "hr-timeline-tools" },
        this.reset,
        this.window,
        el("span", { className: "hr-muted", text: "wheel: zoom · drag: pan · keys: + − ← → 0" }),
        this.download,
        this.perfetto,
      ),
    );
    this.canvas = el("canvas", {
      className: "hr-timeline-canvas",
      attrs: {
        role: "img",
        tabindex: 0,
        "aria-label": "Timeline of the step: + − zoom, ← → pan, 0 whole step",
        "data-testid": "timeline-canvas",
      },
    });
    this.box.append(this.canvas);
    this.view = null; // [t0, t1] in seconds; null: the whole step
    this.reset.addEventListener("click", () => this.setView(null));
    this.perfetto.addEventListener("click", () => this._openPerfetto());
    this._bindZoom();
    container.append(this.box);
    this.data = null;
    this.key = "";
    this.bars = [];
    this.box.addEventListener("toggle", () => this.box.open && this._load());
    this.canvas.addEventListener("click", (e) => {
      if (this.dragged) return; // the end of a pan, not a pick
      const rect = this.canvas.getBoundingClientRect();
      const hit = this._hit(e.clientX - rect.left, e.clientY - rect.top);
      if (hit) this.onSelect(hit.row);
    });
    this.canvas.hloBars = () => this.bars.map((b) => ({ ...b }));
    new ResizeObserver(() => this.box.open && this.draw()).observe(this.box);
  }

  /** Show a run's (run, chip) timeline; fetched when the section is (or is next) opened. */
  setRun(run, chip, model) {
    this.run = run;
    this.chip = chip;
    this.model = model;
    this.selected = -1;
    const key = `${run}\u0000${chip}\u0000${model ? model.payload.summary.step_expected_s : ""}`;
    if (key !== this.key) {
      this.key = key;
      this.data = null;
      this.bars = [];
      this.view = null;
      // The header says nothing until this run's timeline is here: never another run's length.
      this.status.textContent = run ? "" : "no run";
      this.window.textContent = "";
      this.download.href = run ? route("trace_events", { run, chip }) : "";
      this.download.toggleAttribute("download", Boolean(run)); // the server's file name
      this.box.dataset.state = "idle";
      if (this.box.open) this._load();
    }
  }

  /** Show [t0, t1] of the step (seconds), clamped to it; null shows the whole step. */
  setView(view) {
    const step = this._step();
    if (view) {
      const [from, to] = view;
      const span = Math.min(step, Math.max(MIN_SPAN, to - from));
      const t0 = Math.min(Math.max(0, from), step - span);
      view = span >= step ? null : [t0, t0 + span];
    }
    this.view = view;
    if (this.data) this.draw();
  }

  _step() {
    return this.data && this.data.step_s > 0 ? this.data.step_s : 1;
  }

  _span() {
    return this.view || [0, this._step()];
  }

  /** Zoom by `factor` (> 1: in) about time `at`, which keeps its place on screen. */
  zoom(factor, at) {
    const [t0, t1] = this._span();
    const t = at === undefined ? (t0 + t1) / 2 : at;
    this.setView([t - (t - t0) / factor, t + (t1 - t) / factor]);
  }

  /** Pan by a fraction of the view's width (> 0: later). */
  pan(fraction) {
    const [t0, t1] = this._span();
    const dt = (t1 - t0) * fraction;
    this.setView([t0 + dt, t1 + dt]);
  }

  _timeAt(x) {
    const [t0, t1] = this._span();
    const width = this.canvas.clientWidth || 400;
    return t0 + ((x - LABELS) / Math.max(1, width - LABELS - 8)) * (t1 - t0);
  }

  _bindZoom() {
    const c = this.canvas;
    c.addEventListener(
      "wheel",
      (e) => {
        if (!this.data) return;
        e.preventDefault();
        const rect = c.getBoundingClientRect();
        if (e.shiftKey || Math.abs(e.deltaX) > Math.abs(e.deltaY)) {
          this.pan(Math.sign(e.deltaX || e.deltaY) * 0.1);
        } else {
          this.zoom(e.deltaY < 0 ? ZOOM : 1 / ZOOM, this._timeAt(e.clientX - rect.left));
        }
      },
      { passive: false },
    );
    c.addEventListener("pointerdown", (e) => {
      if (!this.data || e.button !== 0) return;
      this.drag = { x: e.clientX, span: this._span() };
      this.dragged = false;
    });
    c.addEventListener("pointermove", (e) => {
      if (!this.drag) return;
      const dx = e.clientX - this.drag.x;
      if (Math.abs(dx) > 3) this.dragged = true;
      if (!this.dragged) return;
      const [t0, t1] = this.drag.span;
      const width = Math.max(1, (c.clientWidth || 400) - LABELS - 8);
      const dt = (-dx / width) * (t1 - t0);
      this.setView([t0 + dt, t1 + dt]);
    });
    const end = () => {
      this.drag = null;
      setTimeout(() => (this.dragged = false), 0); // the click that ends a drag is not a pick
    };
    c.addEventListener("pointerup", end);
    c.addEventListener("pointerleave", end);
    c.addEventListener("keydown", (e) => {
      if (!this.data) return;
      const keys = {
        "+": () => this.zoom(ZOOM),
        "=": () => this.zoom(ZOOM),
        w: () => this.zoom(ZOOM),
        "-": () => this.zoom(1 / ZOOM),
        s: () => this.zoom(1 / ZOOM),
        ArrowLeft: () => this.pan(-0.1),
        a: () => this.pan(-0.1),
        ArrowRight: () => this.pan(0.1),
        d: () => this.pan(0.1),
        0: () => this.setView(null),
      };
      const act = keys[e.key];
      if (act) {
        e.preventDefault();
        act();
      }
    });
  }

  /** Perfetto's documented way in from another page: open its UI, wait for its PONG, post the
   * trace. Offline (or blocked pop-ups) the download link above still holds the same file. */
  async _openPerfetto() {
    if (!this.run) return;
    let buffer;
    try {
      const response = await fetch(this.download.href, { credentials: "same-origin" });
      if (!response.ok) throw new Error(`${response.status} ${response.statusText}`);
      buffer = await response.arrayBuffer();
    } catch (err) {
      this.status.textContent = `trace: ${err.message}`;
      return;
    }
    const win = window.open(PERFETTO);
    if (!win) return;
    const title = `${this.run} (${this.chip})`;
    const timer = setInterval(() => win.postMessage("PING", PERFETTO), 50);
    const onMessage = (e) => {
      if (e.source !== win || e.data !== "PONG") return;
      clearInterval(timer);
      window.removeEventListener("message", onMessage);
      win.postMessage({ perfetto: { buffer, title } }, PERFETTO);
    };
    window.addEventListener("message", onMessage);
    setTimeout(() => clearInterval(timer), 20000);
  }

  select(row) {
    this.selected = row;
    if (this.data) this.draw();
  }

  async _load() {
    if (this.data || !this.run) return;
    const key = this.key;
    this.status.textContent = "loading…";
    this.box.dataset.state = "loading";
    let data;
    try {
      data = await getJSON(route("timeline", { run: this.run, chip: this.chip }));
    } catch (err) {
      if (key !== this.key) return;
      this.status.textContent = err.message;
      this.box.dataset.state = "error";
      return;
    }
    if (key !== this.key) return;
    this.data = data;
    this.status.textContent = `${fmtTime(data.step_s)}, ${data.lanes.length} lane${data.lanes.length === 1 ? "" : "s"}`;
    this.draw();
    this.box.dataset.state = "ready";
  }

  draw() {
    const d = this.data;
    if (!d) return;
    const width = Math.max(400, this.box.clientWidth - 4);
    const height = d.lanes.length * LANE + AXIS;
    const dpr = window.devicePixelRatio || 1;
    this.canvas.style.width = `${width}px`;
    this.canvas.style.height = `${height}px`;
    this.canvas.width = Math.round(width * dpr);
    this.canvas.height = Math.round(height * dpr);
    const ctx = this.canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    const css = getComputedStyle(this.box);
    const fg = css.getPropertyValue("--hr-fg").trim() || "#222";
    const muted = css.getPropertyValue("--hr-muted").trim() || "#777";
    const grid = css.getPropertyValue("--hr-grid").trim() || "#e4e4e4";
    ctx.font = "11px system-ui, sans-serif";
    ctx.clearRect(0, 0, width, height);
    const [t0, t1] = this._span();
    const X = (t) => LABELS + ((t - t0) / (t1 - t0)) * (width - LABELS - 8);
    const laneOf = new Map(d.lanes.map((l, i) => [l.lane, i]));
    d.lanes.forEach((l, i) => {
      ctx.fillStyle = fg;
      ctx.textAlign = "left";
      ctx.textBaseline = "middle";
      ctx.fillText(l.title, 4, i * LANE + LANE / 2, LABELS - 8);
      ctx.strokeStyle = grid;
      ctx.beginPath();
      ctx.moveTo(LABELS, (i + 1) * LANE - 0.5);
      ctx.lineTo(width, (i + 1) * LANE - 0.5);
      ctx.stroke();
    });
    const at = Object.fromEntries(d.columns.map((c, i) => [c, i]));
    const bars = [];
    const m = this.model;
    ctx.save();
    ctx.beginPath();
    ctx.rect(LABELS, 0, width - LABELS, d.lanes.length * LANE);
    ctx.clip(); // bars cut at the view's edges, never over the lane titles
    for (const r of d.data) {
      if (r[at.end_s] < t0 || r[at.begin_s] > t1) continue; // outside the view
      const lane = laneOf.get(r[at.lane]);
      const x0 = X(r[at.begin_s]);
      const x1 = Math.max(x0 + 1, X(r[at.end_s]));
      const y = lane * LANE + 3;
      const bound = m ? m.get(r[at.row], "bound") : "unknown";
      ctx.fillStyle = constants.boundColors[lane === 0 ? bound : "communication"] || constants.boundColors.unknown;
      ctx.fillRect(x0, y, x1 - x0, LANE - 6);
      const bar = { row: r[at.row], lane: r[at.lane], x0, x1, y, h: LANE - 6, exposed: r[at.exposed_s] };
      if (r[at.exposed_s] > 0) {
        const e0 = X(r[at.exposed_from_s]);
        this._hatch(ctx, e0, y, Math.max(1, x1 - e0), LANE - 6);
        bar.exposedX = [e0, x1];
        if (lane !== 0) {
          const w0 = X(r[at.wait_from_s]); // the stream, waiting for this transfer
          this._hatch(ctx, w0, 3, Math.max(1, x1 - w0), LANE - 6);
        }
      }
      bars.push(bar);
    }
    ctx.restore();
    // the selected op's bar, outlined
    const chosen = bars.find((b) => b.row === this.selected);
    if (chosen) {
      ctx.strokeStyle = fg;
      ctx.lineWidth = 2;
      ctx.strokeRect(chosen.x0 - 1, chosen.y - 1, chosen.x1 - chosen.x0 + 2, chosen.h + 2);
    }
    // time axis
    ctx.fillStyle = muted;
    ctx.textBaseline = "top";
    for (let k = 0; k <= 4; k++) {
      const t = t0 + ((t1 - t0) * k) / 4;
      ctx.textAlign = k === 0 ? "left" : k === 4 ? "right" : "center";
      ctx.fillText(fmtTime(t), X(t), d.lanes.length * LANE + 4);
    }
    this.bars = bars;
    this.canvas.dataset.bars = String(bars.length);
    this.canvas.dataset.view = `${t0} ${t1}`;
    this.window.textContent = this.view ? `showing ${fmtTime(t0)} – ${fmtTime(t1)}` : "";
    this.reset.disabled = !this.view;
  }

  _hatch(ctx, x, y, w, h) {
    ctx.save();
    ctx.beginPath();
    ctx.rect(x, y, w, h);
    ctx.clip();
    ctx.fillStyle = "rgba(214, 40, 40, 0.35)";
    ctx.fillRect(x, y, w, h);
    ctx.strokeStyle = "#b00020";
    ctx.lineWidth = 1.5;
    for (let i = -h; i < w; i += 5) {
      ctx.beginPath();
      ctx.moveTo(x + i, y + h);
      ctx.lineTo(x + i + h, y);
      ctx.stroke();
    }
    ctx.restore();
  }

  _hit(x, y) {
    if (x < LABELS) return null; // the lane titles, where clipped bars would sit
    let best = null;
    for (const b of this.bars) {
      if (y < b.y || y > b.y + b.h) continue;
      if (x >= b.x0 - 2 && x <= b.x1 + 2) {
        const w = b.x1 - b.x0;
        if (!best || w < best.x1 - best.x0) best = b; // the narrowest bar under the pointer
      }
    }
    return best;
  }
}
