// The layout exploration view (GET explorations: every hlo_roofline_explore.json that `explore`
// wrote beside its runs). Each candidate that compiled is a point: its predicted step time against
// its HBM per device, coloured by what bounds it; the chip's HBM capacity is a vertical line; the
// best-ranked candidate is ringed. A click on a point (or its row) opens that candidate's run.
// Every number is the document's; the face only maps them to pixels and formats them.

import { pill } from "./cells.js";
import { constants } from "./state.js";
import { el, fmtBytes, fmtPct, fmtTime, getJSON, route, setChildren } from "./util.js";

const SVG = "http://www.w3.org/2000/svg";
const W = 640;
const H = 300;
const PAD = { left: 64, right: 16, top: 14, bottom: 40 };

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

/** A log axis over [lo, hi] (padded a little) to pixels [a, b]. */
function logScale(values, a, b) {
  let lo = Math.min(...values);
  let hi = Math.max(...values);
  if (!(lo > 0)) lo = hi > 0 ? hi / 10 : 1;
  if (hi <= lo) hi = lo * 10;
  const l = Math.log10(lo) - 0.08;
  const h = Math.log10(hi) + 0.08;
  const map = (x) => a + ((Math.log10(x) - l) / (h - l)) * (b - a);
  map.ticks = () => {
    const out = [];
    for (let e = Math.ceil(l); e <= Math.floor(h); e++) out.push(10 ** e);
    if (out.length < 2) out.push(lo, hi);
    return out;
  };
  return map;
}

export class ExploreView {
  /** @param {HTMLElement} container @param {{onOpen: (run: string) => void}} options */
  constructor(container, { onOpen }) {
    this.onOpen = onOpen;
    this.box = el("section", {
      className: "hr-explore",
      attrs: { id: "hr-explore", "aria-label": "Layout exploration" },
    });
    this.box.hidden = true;
    container.append(this.box);
    this.text = "";
  }

  /** Fetch the explorations; redraw only when they changed (a reload re-asks). */
  async load() {
    let docs;
    try {
      docs = await getJSON(route("explorations"));
    } catch {
      return;
    }
    const text = JSON.stringify(docs);
    if (text === this.text) return;
    this.text = text;
    const open = new Set([...this.box.querySelectorAll("details[open]")].map((d) => d.dataset.dir));
    setChildren(this.box, ...docs.map((doc) => this._one(doc, open.has(doc.dir))));
    this.box.hidden = !docs.length;
    this.box.dataset.state = "ready";
  }

  _one(doc, open) {
    const where = doc.dir === "." ? "" : ` in ${doc.dir}`;
    const box = el("details", { className: "hr-explore-doc", dataset: { dir: doc.dir } });
    box.open = open || false;
    if (doc.error) {
      box.append(el("summary", { text: `Layout exploration${where}: cannot be read` }));
      box.append(el("p", { className: "hr-error", text: doc.error }));
      return box;
    }
    const ok = doc.rows.filter((r) => r.step_s !== null && r.hbm_per_device !== null);
    const best = doc.rows.find((r) => r.rank === 1);
    box.append(
      el(
        "summary",
        {},
        `Layout exploration${where}: ${doc.rows.length} candidates on ${doc.target}`,
        best ? el("span", { className: "hr-muted", text: ` · best ${best.candidate}` }) : null,
      ),
      el("p", {
        className: "hr-muted",
        text:
          "Predicted step (as scheduled) against HBM per device, one point per candidate that " +
          "compiled, coloured by what bounds it; the dashed line is the chip's HBM capacity, the " +
          "ring the best-ranked candidate. Click a point or a row to open its run.",
      }),
      this._chart(doc, ok),
      this._table(doc),
    );
    return box;
  }

  _chart(doc, ok) {
    const chart = svg("svg", {
      class: "hr-explore-chart",
      viewBox: `0 0 ${W} ${H}`,
      width: W,
      height: H,
      role: "img",
      "aria-label": "Step time against HBM per device",
    });
    if (!ok.length) {
      chart.append(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }, "no candidate compiled"));
      return chart;
    }
    const xs = ok.map((r) => r.hbm_per_device);
    if (doc.hbm_capacity) xs.push(doc.hbm_capacity);
    const x = logScale(xs, PAD.left, W - PAD.right);
    const y = logScale(
      ok.map((r) => r.step_s),
      H - PAD.bottom,
      PAD.top,
    );
    const axis = svg("g", { class: "hr-explore-axis" });
    for (const t of x.ticks()) {
      const px = x(t);
      axis.append(svg("line", { x1: px, x2: px, y1: PAD.top, y2: H - PAD.bottom, class: "hr-grid" }));
      axis.append(svg("text", { x: px, y: H - PAD.bottom + 14, "text-anchor": "middle" }, fmtBytes(t)));
    }
    for (const t of y.ticks()) {
      const py = y(t);
      axis.append(svg("line", { x1: PAD.left, x2: W - PAD.right, y1: py, y2: py, class: "hr-grid" }));
      axis.append(svg("text", { x: PAD.left - 4, y: py + 4, "text-anchor": "end" }, fmtTime(t)));
    }
    axis.append(
      svg("text", { x: (PAD.left + W - PAD.right) / 2, y: H - 6, "text-anchor": "middle" }, "HBM per device"),
      svg("text", { x: 12, y: PAD.top + 8, "text-anchor": "start" }, "step"),
    );
    chart.append(axis);
    if (doc.hbm_capacity) {
      const px = x(doc.hbm_capacity);
      chart.append(
        svg("line", {
          x1: px, x2: px, y1: PAD.top, y2: H - PAD.bottom,
          class: "hr-explore-capacity", "data-testid": "hbm-capacity", "data-bytes": doc.hbm_capacity,
        }),
        svg("text", { x: px - 4, y: PAD.top + 10, "text-anchor": "end", class: "hr-explore-capacity-label" },
          `HBM ${fmtBytes(doc.hbm_capacity)}`),
      );
    }
    for (const r of ok) {
      const cx = x(r.hbm_per_device);
      const cy = y(r.step_s);
      const point = svg("circle", {
        cx, cy, r: 6,
        fill: constants.boundColors[r.bound] || constants.boundColors.none || "#888",
        class: `hr-explore-point${r.run ? " hr-link" : ""}`,
        "data-candidate": r.candidate,
        "data-bound": r.bound,
        "data-step": r.step_s,
        "data-hbm": r.hbm_per_device,
        tabindex: r.run ? 0 : -1,
      });
      if (r.run) point.setAttribute("data-run", r.run);
      point.append(
        svg("title", {}, `${r.candidate}\nstep ${fmtTime(r.step_s)} · HBM ${fmtBytes(r.hbm_per_device)} · ${r.bound}-bound · ${r.fit}` +
          (r.rank ? ` · rank ${r.rank}` : "") + (r.why ? `\n${r.why}` : "")),
      );
      if (r.run) {
        point.addEventListener("click", () => this.onOpen(r.run));
        point.addEventListener("keydown", (e) => e.key === "Enter" && this.onOpen(r.run));
      }
      chart.append(point);
      if (r.rank === 1) {
        chart.append(
          svg("circle", { cx, cy, r: 11, class: "hr-explore-best", "data-testid": "explore-best", "data-candidate": r.candidate }),
          svg("text", { x: cx + 13, y: cy - 8, class: "hr-explore-best-label" }, "best"),
        );
      }
    }
    return chart;
  }

  _table(doc) {
    const head = ["rank", "candidate", "step ≈ (expected)", "step ≥ (bound)", "HBM / device", "fit", "bound", "exposed comm", "status"];
    const rows = [...doc.rows].sort((a, b) => (a.rank ?? Infinity) - (b.rank ?? Infinity));
    return el(
      "table",
      { className: "hr-explore-table" },
      el("thead", {}, el("tr", {}, ...head.map((h) => el("th", { text: h })))),
      el(
        "tbody",
        {},
        ...rows.map((r) => {
          const name = r.run
            ? el("a", { text: r.candidate, attrs: { href: "#", "data-run": r.run }, on: { click: (e) => { e.preventDefault(); this.onOpen(r.run); } } })
            : r.candidate;
          return el(
            "tr",
            { dataset: { candidate: r.candidate }, title: r.why || r.error || "" },
            el("td", { className: "hr-num", text: r.rank ?? "–" }),
            el("td", {}, name),
            el("td", { className: "hr-num", text: r.step_s === null ? "–" : fmtTime(r.step_s) }),
            el("td", { className: "hr-num", text: r.lower_s === null || r.lower_s === undefined ? "–" : fmtTime(r.lower_s) }),
            el("td", { className: "hr-num", text: r.hbm_per_device === null ? "–" : fmtBytes(r.hbm_per_device) }),
            el("td", { text: r.fit }),
            el("td", {}, r.bound ? el("span", { className: pill(r.bound), text: r.bound }) : ""),
            el("td", { className: "hr-num", text: r.exposed_comm_share === null ? "–" : fmtPct(r.exposed_comm_share) }),
            el("td", {
              text: `${r.status_text}${r.status !== "ok" && r.error ? `: ${r.error}` : ""}`,
              attrs: { "data-status": r.status },
            }),
          );
        }),
      ),
    );
  }
}
