// The step as scheduled (GET timeline: Report.timeline on the server): one lane for the compute
// stream and one per transfer engine (DMA; ICI links per device group on a TPU, NVLink and the
// network on a GPU), each op a bar from its begin to its end. The part of a transfer the stream
// waited for (its exposed time) is hatched in red on its bar and drawn as a wait on the stream.
// A click on a bar selects its op. Fetched only when the section is opened; drawn on one canvas so
// a 20k-op step stays fast. Every time here is the server's; the face only maps them to pixels.

import { BOUND_COLORS, el, fmtTime, getJSON, route } from "./util.js";

const LANE = 24; // px per lane
const LABELS = 170; // lane titles on the left
const AXIS = 22; // time axis at the bottom

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
    this.canvas = el("canvas", {
      className: "hr-timeline-canvas",
      attrs: { role: "img", "aria-label": "Timeline of the step", "data-testid": "timeline-canvas" },
    });
    this.box.append(this.canvas);
    container.append(this.box);
    this.data = null;
    this.key = "";
    this.bars = [];
    this.box.addEventListener("toggle", () => this.box.open && this._load());
    this.canvas.addEventListener("click", (e) => {
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
      this.box.dataset.state = "idle";
      if (this.box.open) this._load();
    }
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
    const step = d.step_s > 0 ? d.step_s : 1;
    const X = (t) => LABELS + (t / step) * (width - LABELS - 8);
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
    for (const r of d.data) {
      const lane = laneOf.get(r[at.lane]);
      const x0 = X(r[at.begin_s]);
      const x1 = Math.max(x0 + 1, X(r[at.end_s]));
      const y = lane * LANE + 3;
      const bound = m ? m.get(r[at.row], "bound") : "unknown";
      ctx.fillStyle = BOUND_COLORS[lane === 0 ? bound : "communication"] || BOUND_COLORS.unknown;
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
      const t = (step * k) / 4;
      ctx.textAlign = k === 0 ? "left" : k === 4 ? "right" : "center";
      ctx.fillText(fmtTime(t), X(t), d.lanes.length * LANE + 4);
    }
    this.bars = bars;
    this.canvas.dataset.bars = String(bars.length);
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
