// The "HLO Roofline" TensorBoard tab. TensorBoard loads this module in an iframe whose base URL is
// /data/plugin/hlo_roofline/ and calls render() once. Every URL below is relative to that base.
//
// Layout: toolbar (run, chip, compare, CSV) · summary header · roofline chart + selection panel ·
// op table (filters, virtualized rows) · comparison with another run.
// Verdicts always come from the server (report?chip=... re-classifies with hlo_roofline itself).

import { RooflineChart } from "./chart.js";
import { VirtualTable } from "./table.js";
import {
  BOUNDS,
  el,
  fmtBytes,
  fmtNum,
  fmtPct,
  fmtSI,
  fmtTime,
  getJSON,
  option,
  route,
  setChildren,
} from "./util.js";

/** One report payload ({columns, data, summary, ...}) with column access by name. */
class Model {
  constructor(payload) {
    this.payload = payload;
    this.columns = payload.columns || [];
    this.index = Object.fromEntries(this.columns.map((c, i) => [c, i]));
    this.rows = payload.data || [];
    this.summary = payload.summary || {};
    this.module = payload.module || "";
    const fields = ["name", "op_name", "source", "opcode", "hint", "fused_ops", "bound"]
      .map((c) => this.index[c])
      .filter((i) => i !== undefined);
    this.search = this.rows.map((r) =>
      fields
        .map((i) => r[i] ?? "")
        .join("\n")
        .toLowerCase(),
    );
  }

  has(column) {
    return column in this.index;
  }

  get(row, column) {
    const i = this.index[column];
    return i === undefined ? undefined : this.rows[row][i];
  }
}

const state = {
  runs: [],
  run: null,
  chip: "", // "" = the chip the report was written for
  chips: [],
  model: null,
  selected: -1,
  filter: { bound: "", opcode: "", text: "", timedOnly: true },
  other: "",
  compare: null,
  onlyFlipped: false,
  requestId: 0,
};

const ui = {};

function css() {
  const link = el("link", {
    attrs: { rel: "stylesheet", href: new URL("./style.css", import.meta.url).href },
  });
  document.head.append(link);
}

function buildLayout() {
  ui.run = el("select", { attrs: { id: "hr-run", "aria-label": "Run" } });
  ui.chip = el("select", { attrs: { id: "hr-chip", "aria-label": "Chip" } });
  ui.other = el("select", { attrs: { id: "hr-other", "aria-label": "Compare with" } });
  ui.csv = el("a", { className: "hr-button", text: "Download CSV", attrs: { download: "" } });
  ui.status = el("span", { className: "hr-status", attrs: { role: "status" } });
  ui.run.addEventListener("change", () => selectRun(ui.run.value));
  ui.chip.addEventListener("change", () => {
    state.chip = ui.chip.value;
    loadReport();
  });
  ui.other.addEventListener("change", () => {
    state.other = ui.other.value;
    loadCompare();
  });

  const toolbar = el(
    "div",
    { className: "hr-toolbar" },
    el("label", {}, "Run ", ui.run),
    el("label", {}, "Chip ", ui.chip),
    el("label", {}, "Compare with ", ui.other),
    ui.csv,
    ui.status,
  );
  ui.error = el("div", { className: "hr-error", attrs: { role: "alert" } });
  ui.error.hidden = true;
  ui.summary = el("section", { className: "hr-summary", attrs: { "aria-label": "Summary" } });

  ui.chartBox = el("section", { className: "hr-chart", attrs: { "aria-label": "Roofline chart" } });
  ui.details = el("aside", { className: "hr-details", attrs: { "aria-label": "Selected op" } });
  ui.main = el("div", { className: "hr-main" }, ui.chartBox, ui.details);

  ui.compareBox = el("section", { className: "hr-compare", attrs: { "aria-label": "Comparison" } });
  ui.compareBox.hidden = true;

  ui.boundFilter = el("select", { attrs: { id: "hr-filter-bound", "aria-label": "Bound filter" } });
  ui.opcodeFilter = el("select", {
    attrs: { id: "hr-filter-opcode", "aria-label": "Opcode filter" },
  });
  ui.search = el("input", {
    attrs: {
      id: "hr-search",
      type: "search",
      placeholder: "search name, op_name, source, hint…",
      "aria-label": "Search ops",
    },
  });
  ui.timedOnly = el("input", { attrs: { type: "checkbox", id: "hr-timed-only" } });
  ui.timedOnly.checked = state.filter.timedOnly;
  ui.count = el("span", { className: "hr-count", attrs: { id: "hr-count" } });
  ui.boundFilter.addEventListener("change", () => setFilter({ bound: ui.boundFilter.value }));
  ui.opcodeFilter.addEventListener("change", () => setFilter({ opcode: ui.opcodeFilter.value }));
  let timer = 0;
  ui.search.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(() => setFilter({ text: ui.search.value }), 120);
  });
  ui.timedOnly.addEventListener("change", () => setFilter({ timedOnly: ui.timedOnly.checked }));
  const filters = el(
    "div",
    { className: "hr-filters" },
    el("label", {}, "Bound ", ui.boundFilter),
    el("label", {}, "Opcode ", ui.opcodeFilter),
    ui.search,
    el("label", {}, ui.timedOnly, " only ops with time"),
    ui.count,
  );
  ui.tableBox = el("section", { className: "hr-ops", attrs: { "aria-label": "Ops" } }, filters);
  ui.content = el(
    "div",
    { className: "hr-content" },
    ui.summary,
    ui.main,
    ui.compareBox,
    ui.tableBox,
  );
  ui.root = el("div", { className: "hr-app" }, toolbar, ui.error, ui.content);
  document.body.append(ui.root);

  ui.chart = new RooflineChart(ui.chartBox, { onSelect: (row) => selectOp(row, true) });
  ui.table = new VirtualTable(ui.tableBox, opColumns(), {
    onSelect: (row) => selectOp(row, false),
    sort: { key: "t_roofline_s", dir: -1 },
    label: "Ops",
  });
}

/** Table cell class for a bound ("" when the op has none, e.g. only in one compared run). */
function pill(bound) {
  return bound ? `hr-pill hr-bound-${bound}` : "";
}

function opColumns() {
  const g = (c) => (row) => state.model.get(row, c);
  const text = (c) => (row) => String(state.model.get(row, c) ?? "");
  return [
    { key: "name", label: "name", width: "minmax(140px, 1.4fr)", text: text("name") },
    { key: "opcode", label: "opcode", width: "110px", text: text("opcode") },
    {
      key: "bound",
      label: "bound",
      width: "104px",
      text: text("bound"),
      cls: (row) => pill(state.model.get(row, "bound")),
    },
    { key: "dtype", label: "dtype", width: "60px", text: text("dtype") },
    {
      key: "flops",
      label: "FLOPs",
      width: "78px",
      num: true,
      value: g("flops"),
      text: (r) => fmtSI(g("flops")(r)),
    },
    {
      key: "bytes_accessed",
      label: "bytes",
      width: "78px",
      num: true,
      value: g("bytes_accessed"),
      text: (r) => fmtBytes(g("bytes_accessed")(r)),
    },
    {
      key: "intensity",
      label: "FLOP/B",
      width: "70px",
      num: true,
      value: g("intensity"),
      text: (r) => fmtSI(g("intensity")(r)),
    },
    {
      key: "t_roofline_s",
      label: "time",
      width: "78px",
      num: true,
      value: g("t_roofline_s"),
      text: (r) => fmtTime(g("t_roofline_s")(r)),
    },
    {
      key: "share",
      label: "share",
      width: "62px",
      num: true,
      value: g("share"),
      text: (r) => fmtPct(g("share")(r)),
    },
    ...measuredColumns(g),
    { key: "op_name", label: "op_name", width: "minmax(160px, 2fr)", text: text("op_name") },
    { key: "hint", label: "hint", width: "minmax(120px, 1.2fr)", text: text("hint") },
  ];
}

/** Measured time and roofline efficiency, shown next to the prediction when a profile was joined. */
function measuredColumns(g) {
  if (!state.model || !state.model.has("measured_s")) return [];
  return [
    {
      key: "measured_s",
      label: "measured",
      width: "84px",
      num: true,
      value: g("measured_s"),
      text: (r) => fmtTime(g("measured_s")(r)),
    },
    {
      key: "efficiency",
      label: "efficiency",
      width: "78px",
      num: true,
      value: g("efficiency"),
      text: (r) => fmtPct(g("efficiency")(r)),
    },
  ];
}

function setStatus(text) {
  ui.status.textContent = text;
}

function showError(message) {
  ui.error.hidden = !message;
  ui.error.textContent = message ? `Run “${state.run}”: ${message}` : "";
  ui.content.hidden = Boolean(message);
}

async function init() {
  css();
  buildLayout();
  setStatus("loading…");
  try {
    [state.runs, state.chips] = await Promise.all([
      getJSON(route("runs")),
      getJSON(route("chips")).catch(() => []),
    ]);
  } catch (err) {
    showError(`cannot list runs: ${err.message}`);
    return;
  }
  if (!state.runs.length) {
    ui.content.hidden = true;
    ui.error.hidden = false;
    ui.error.textContent =
      "No hlo_roofline reports under this logdir. Write one with " +
      "Report.write_tensorboard(logdir, run) and reload.";
    setStatus("");
    return;
  }
  setChildren(ui.run, ...state.runs.map((r) => option(r, r)));
  // Opened directly (data/plugin_entry.html?name=hlo_roofline&run=NAME), start on that run.
  const wanted = new URLSearchParams(window.location.search).get("run");
  await selectRun(state.runs.includes(wanted) ? wanted : state.runs[0]);
}

async function selectRun(run) {
  state.run = run;
  state.selected = -1;
  ui.run.value = run;
  if (state.other === run) state.other = "";
  setChildren(
    ui.other,
    option("", "—"),
    ...state.runs.filter((r) => r !== run).map((r) => option(r, r, r === state.other)),
  );
  await loadReport();
}

function fillChips() {
  const own = state.model ? state.model.summary.chip : null;
  const ownName = state.model ? state.model.summary.chip_name : null;
  const label = own ? `as written (${ownName || own})` : "as written (no chip)";
  const options = [option("", label, state.chip === "")];
  for (const c of state.chips)
    options.push(option(c.key, `${c.name} (${c.key})`, c.key === state.chip));
  setChildren(ui.chip, ...options);
}

async function loadReport() {
  const id = ++state.requestId;
  setStatus("loading…");
  ui.root.dataset.state = "loading";
  ui.csv.href = route("csv", { run: state.run, chip: state.chip });
  let payload;
  try {
    payload = await getJSON(route("report", { run: state.run, chip: state.chip }));
  } catch (err) {
    if (id !== state.requestId) return;
    state.model = null;
    ui.table.setRows([]);
    ui.chart.setModel(null);
    fillChips();
    showError(err.message);
    setStatus("");
    ui.root.dataset.state = "error";
    ui.root.dataset.run = state.run;
    return;
  }
  if (id !== state.requestId) return;
  showError("");
  const previous =
    state.model && state.selected >= 0 ? state.model.get(state.selected, "name") : null;
  state.model = new Model(payload);
  ui.table.setColumns(opColumns());
  fillChips();
  state.selected = -1;
  if (previous !== null) {
    const row = state.model.rows.findIndex((_, i) => state.model.get(i, "name") === previous);
    if (row >= 0) state.selected = row;
  }
  renderSummary();
  fillFilters();
  ui.chart.setModel(state.model);
  applyFilter();
  renderDetails();
  if (state.selected >= 0) selectOp(state.selected, true);
  setStatus("");
  // For tests and scripts: which run and chip the page shows, and that it is done loading.
  ui.root.dataset.run = state.run;
  ui.root.dataset.chip = state.model.summary.chip || "";
  ui.root.dataset.state = "ready";
  if (state.other) await loadCompare();
}

function renderSummary() {
  const m = state.model;
  const s = m.summary;
  const card = (label, value, sub) =>
    el(
      "div",
      { className: "hr-card" },
      el("div", { className: "hr-card-label", text: label }),
      el("div", { className: "hr-card-value", text: value }),
      sub ? el("div", { className: "hr-card-sub", text: sub }) : null,
    );
  const share = s.time_share || {};
  const bar = el("div", { className: "hr-sharebar", attrs: { "aria-label": "time per bound" } });
  const legend = el("div", { className: "hr-card-sub" });
  for (const b of BOUNDS) {
    const f = share[b];
    if (!(f > 0)) continue;
    const seg = el("span", { className: `hr-bound-${b}`, title: `${b}: ${fmtPct(f)}` });
    seg.style.width = `${Math.max(0.5, f * 100)}%`;
    bar.append(seg);
    legend.append(
      el(
        "span",
        { className: "hr-legend-item" },
        el("span", { className: `hr-swatch hr-bound-${b}` }),
        `${b} ${fmtPct(f)}`,
      ),
    );
  }
  const classified = s.step_time_lower_s !== undefined && s.step_time_lower_s !== null;
  const timeBox = el(
    "div",
    { className: "hr-card hr-card-wide" },
    el("div", { className: "hr-card-label", text: "time per bound" }),
    bar,
    legend,
  );
  const unknown = Array.isArray(s.unknown_ops) ? s.unknown_ops.length : 0;
  setChildren(
    ui.summary,
    card(
      "predicted step time",
      classified
        ? `${fmtTime(s.step_time_lower_s)} – ${fmtTime(s.step_time_upper_s)}`
        : "not classified",
      classified ? "perfect overlap – no overlap" : "choose a chip above",
    ),
    card("MFU upper bound", fmtPct(s.mfu_upper_bound), s.chip_name || s.chip || ""),
    classified ? timeBox : null,
    card(
      "coverage",
      fmtPct(s.coverage),
      unknown ? `${unknown} op(s) not priced` : "every op priced",
    ),
    card(
      "FLOPs / bytes",
      `${fmtSI(s.flops)} / ${fmtBytes(s.bytes_accessed)}`,
      s.comm_bytes ? `comm ${fmtBytes(s.comm_bytes)}` : null,
    ),
    s.measured_step_s
      ? card(
          "measured step",
          fmtTime(s.measured_step_s),
          `per-op times cover ${fmtPct(s.measured_coverage)}` +
            (s.measured_overlap ? " · ops overlapped: capture on one core" : ""),
        )
      : null,
    card(
      "module",
      m.module || "–",
      `${m.rows.length} ops${s.cost_model ? ` · ${s.cost_model} model` : ""}`,
    ),
  );
}

function fillFilters() {
  const m = state.model;
  const counts = new Map();
  for (let i = 0; i < m.rows.length; i++) {
    const op = m.get(i, "opcode");
    counts.set(op, (counts.get(op) || 0) + 1);
  }
  const opcodes = [...counts.entries()].sort(
    (a, b) => b[1] - a[1] || String(a[0]).localeCompare(String(b[0])),
  );
  if (state.filter.opcode && !counts.has(state.filter.opcode)) state.filter.opcode = "";
  setChildren(
    ui.opcodeFilter,
    option("", "all"),
    ...opcodes.map(([op, n]) => option(op, `${op} (${n})`, op === state.filter.opcode)),
  );
  setChildren(
    ui.boundFilter,
    option("", "all"),
    ...BOUNDS.map((b) => option(b, b, b === state.filter.bound)),
  );
}

function setFilter(change) {
  Object.assign(state.filter, change);
  applyFilter();
}

function applyFilter() {
  const m = state.model;
  if (!m) return;
  const { bound, opcode, text, timedOnly } = state.filter;
  const needle = text.trim().toLowerCase();
  const hasTime = m.has("t_roofline_s");
  const ids = [];
  for (let i = 0; i < m.rows.length; i++) {
    if (bound && m.get(i, "bound") !== bound) continue;
    if (opcode && m.get(i, "opcode") !== opcode) continue;
    if (timedOnly && hasTime && !(m.get(i, "t_roofline_s") > 0)) continue;
    if (needle && !m.search[i].includes(needle)) continue;
    ids.push(i);
  }
  ui.table.setRows(ids);
  ui.count.textContent = `${ids.length} of ${m.rows.length} ops`;
  ui.count.dataset.shown = String(ids.length);
  ui.count.dataset.total = String(m.rows.length);
  if (state.selected >= 0) ui.table.select(state.selected, true);
}

function selectOp(row, fromChart) {
  state.selected = row;
  if (fromChart && !ui.table.has(row)) {
    // The op is filtered out of the table: clear the filters so the row can be shown.
    state.filter = { bound: "", opcode: "", text: "", timedOnly: false };
    ui.boundFilter.value = "";
    ui.opcodeFilter.value = "";
    ui.search.value = "";
    ui.timedOnly.checked = false;
    applyFilter();
  }
  ui.table.select(row, true);
  ui.chart.select(row);
  renderDetails();
}

function renderDetails() {
  const m = state.model;
  const row = state.selected;
  if (!m || row < 0) {
    setChildren(
      ui.details,
      el("p", { className: "hr-muted", text: "Click a point or a row to see the op." }),
    );
    return;
  }
  const g = (c) => m.get(row, c);
  const entries = [
    ["opcode", g("opcode")],
    ["bound", g("bound")],
    ["computation", g("computation")],
    ["fusion kind", g("fusion_kind")],
    ["dtype", g("dtype")],
    ...(state.model.has("precision") && g("precision") ? [["precision", g("precision")]] : []),
    ["shape", g("shape")],
    ["count per step", fmtNum(g("count"))],
    ["FLOPs", fmtSI(g("flops"))],
    ["transcendentals", g("transcendentals") ? fmtSI(g("transcendentals")) : ""],
    ["bytes", fmtBytes(g("bytes_accessed"))],
    ["of them in VMEM", g("vmem_bytes") ? fmtBytes(g("vmem_bytes")) : ""],
    ["comm bytes", g("comm_bytes") ? fmtBytes(g("comm_bytes")) : ""],
    ["intensity", `${fmtSI(g("intensity"))} FLOP/B (ridge ${fmtSI(g("critical_intensity"))})`],
    ["t compute", fmtTime(g("t_compute_s"))],
    ["t memory", fmtTime(g("t_memory_s"))],
    ["t comm", fmtTime(g("t_comm_s"))],
    ["t roofline", fmtTime(g("t_roofline_s"))],
    ["share", fmtPct(g("share"))],
    ...(state.model.has("measured_s")
      ? [
          ["measured", fmtTime(g("measured_s"))],
          [
            "efficiency",
            g("efficiency") > 1
              ? `${fmtPct(g("efficiency"))} (above the DRAM roof: cache-resident)`
              : fmtPct(g("efficiency")),
          ],
          ["achieved FLOP/s", fmtSI(g("achieved_flops_per_s"))],
          ["achieved bytes/s", fmtSI(g("achieved_bytes_per_s"))],
        ]
      : []),
    ["op_name", g("op_name")],
    ["source", g("source")],
    ["hint", g("hint")],
    ["note", g("note")],
  ];
  const dl = el("dl", { className: "hr-dl" });
  for (const [k, v] of entries) {
    if (v === "" || v === null || v === undefined) continue;
    dl.append(el("dt", { text: k }), el("dd", { text: v, dataset: { field: k } }));
  }
  const fused = g("fused_ops");
  setChildren(
    ui.details,
    el("h3", { className: "hr-op-name", text: g("name") }),
    dl,
    fused ? el("h4", { text: "fused ops" }) : null,
    fused ? el("pre", { className: "hr-fused", text: fused }) : null,
  );
}

// -- comparison ---------------------------------------------------------------------------------

async function loadCompare() {
  if (!state.other) {
    state.compare = null;
    ui.compareBox.hidden = true;
    return;
  }
  const id = state.requestId;
  ui.compareBox.hidden = false;
  ui.compareBox.dataset.state = "loading";
  setChildren(
    ui.compareBox,
    el("p", { className: "hr-muted", text: `comparing with ${state.other}…` }),
  );
  let payload;
  try {
    payload = await getJSON(
      route("compare", { run: state.run, other: state.other, chip: state.chip }),
    );
  } catch (err) {
    if (id !== state.requestId) return;
    setChildren(
      ui.compareBox,
      el("div", { className: "hr-error", text: `Compare with “${state.other}”: ${err.message}` }),
    );
    ui.compareBox.dataset.state = "error";
    return;
  }
  if (id !== state.requestId) return;
  state.compare = payload;
  renderCompare();
  ui.compareBox.dataset.state = "ready";
}

function renderCompare() {
  const c = state.compare;
  const idx = Object.fromEntries(c.columns.map((n, i) => [n, i]));
  const get = (row, col) => c.data[row][idx[col]];
  const a = c.summary.run;
  const b = c.summary.other;
  const delta = (x, y) =>
    x > 0 && y !== null && y !== undefined ? ` (${y >= x ? "+" : ""}${fmtPct((y - x) / x)})` : "";
  const head = el(
    "div",
    { className: "hr-compare-head" },
    el("h3", { text: `${c.run} → ${c.other}` }),
    el("div", {
      text:
        `step ≥ ${fmtTime(a.step_time_lower_s)} (${a.chip || "no chip"}) → ` +
        `${fmtTime(b.step_time_lower_s)} (${b.chip || "no chip"})` +
        delta(a.step_time_lower_s, b.step_time_lower_s),
    }),
    el("div", {
      className: "hr-muted",
      text:
        `${c.counts.matched} ops matched by op_name, source, opcode and shape · ` +
        `${c.counts.flipped} flipped verdict(s) · ${c.counts.only_run} only in ${c.run} · ` +
        `${c.counts.only_other} only in ${c.other}`,
    }),
  );
  const only = el("input", { attrs: { type: "checkbox", id: "hr-only-flipped" } });
  only.checked = state.onlyFlipped;
  const count = el("span", { className: "hr-count", attrs: { id: "hr-compare-count" } });
  const box = el(
    "div",
    { className: "hr-filters" },
    el("label", {}, only, " only flipped verdicts"),
    count,
  );
  const tableBox = el("div", {});
  setChildren(ui.compareBox, head, box, tableBox);
  const text = (col) => (row) => String(get(row, col) ?? "");
  const table = new VirtualTable(
    tableBox,
    [
      {
        key: "flipped",
        label: "⇄",
        width: "34px",
        value: (r) => (get(r, "flipped") ? 0 : 1),
        text: (r) => (get(r, "flipped") ? "⇄" : ""),
        title: "verdict flipped",
      },
      { key: "op_name", label: "op_name", width: "minmax(180px, 2fr)", text: text("op_name") },
      { key: "opcode", label: "opcode", width: "100px", text: text("opcode") },
      {
        key: "bound",
        label: `bound (${c.run})`,
        width: "minmax(110px, 0.8fr)",
        text: text("bound"),
        cls: (r) => pill(get(r, "bound")),
      },
      {
        key: "bound_other",
        label: `bound (${c.other})`,
        width: "minmax(110px, 0.8fr)",
        text: text("bound_other"),
        cls: (r) => pill(get(r, "bound_other")),
      },
      {
        key: "t_roofline_s",
        label: "time",
        width: "78px",
        num: true,
        value: (r) => get(r, "t_roofline_s"),
        text: (r) => fmtTime(get(r, "t_roofline_s")),
      },
      {
        key: "t_roofline_s_other",
        label: "time (other)",
        width: "90px",
        num: true,
        value: (r) => get(r, "t_roofline_s_other"),
        text: (r) => fmtTime(get(r, "t_roofline_s_other")),
      },
      {
        key: "delta_s",
        label: "Δ time",
        width: "84px",
        num: true,
        value: (r) => Math.abs(get(r, "delta_s")),
        text: (r) => fmtTime(get(r, "delta_s")),
      },
      { key: "match", label: "match", width: "86px", text: text("match") },
      {
        key: "name",
        label: "names",
        width: "minmax(140px, 1fr)",
        text: (r) => [get(r, "name"), get(r, "name_other")].filter(Boolean).join(" → "),
      },
    ],
    {
      height: 260,
      sort: { key: "flipped", dir: 1 },
      label: "Comparison",
      // Clicking a row shows the op of the current run (if it has one) in the chart and panel.
      onSelect: (r) => {
        const name = get(r, "name");
        const row =
          name === null
            ? -1
            : state.model.rows.findIndex((_, i) => state.model.get(i, "name") === name);
        if (row >= 0) selectOp(row, true);
      },
    },
  );
  const show = () => {
    state.onlyFlipped = only.checked;
    const ids = [];
    for (let i = 0; i < c.data.length; i++) if (!only.checked || get(i, "flipped")) ids.push(i);
    table.setRows(ids);
    count.textContent = `${ids.length} of ${c.data.length} ops`;
  };
  only.addEventListener("change", show);
  show();
}

export function render() {
  init().catch((err) => {
    console.error(err);
    if (ui.error) {
      ui.error.hidden = false;
      ui.error.textContent = `HLO Roofline failed: ${err.message}`;
    }
  });
}
