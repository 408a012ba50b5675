// The "HLO Roofline" TensorBoard tab. TensorBoard loads this module in an iframe whose base URL is
// /data/plugin/hlo_roofline/ and calls render() once. Every URL below is relative to that base.
//
// Layout: toolbar (run, chip, compare, CSV) · summary header · roofline chart + selection panel ·
// op table (filters, virtualized rows; or the ops grouped by user line, function or named scope,
// a group's row opening its ops) · comparison with another run.
// Verdicts always come from the server (report?chip=... re-classifies with hlo_roofline itself).
//
// State that survives a reload (run, chip, compared run, filters, selected op) lives in the URL:
// in TensorBoard's own hash as p.hlo_roofline.<key> (what its plugin API reads back), or in this
// document's query when it is opened on its own. TensorBoard's reload button and auto-reload reach
// the tab through its plugin message channel and re-read the runs and the report.

import { RooflineChart } from "./chart.js";
import { VirtualTable } from "./table.js";
import { Timeline } from "./timeline.js";
import {
  BOUNDS,
  el,
  fmtBytes,
  fmtNum,
  fmtPct,
  fmtSI,
  fmtTime,
  getJSON,
  getJSONText,
  GROUPINGS,
  loadConstants,
  longest,
  option,
  ROOF_UNITS,
  route,
  setChildren,
} from "./util.js";

const PLUGIN = "hlo_roofline";
const URL_KEYS = ["run", "chip", "other", "op", "bound", "opcode", "q", "all", "by", "in"];
const UNATTRIBUTED = "(unattributed)"; // the group of ops without one (Report.rollup's name)
const POLL_MS = 30_000; // runs re-listed this often when no TensorBoard host tells us to reload

/** One report payload ({columns, data, summary, ...}) with column access by name. */
class Model {
  constructor(payload) {
    this.payload = payload;
    this.columns = payload.columns || [];
    this.index = Object.fromEntries(this.columns.map((c, i) => [c, i]));
    this.rows = payload.data || [];
    this.summary = payload.summary || {};
    this.module = payload.module || "";
    this.stacks = payload.call_stacks || []; // the call_stack column indexes this list
    // Columns the server derives for the tab (each op's scope, user function), sent beside the
    // report's own: added as columns.
    for (const [column, values] of Object.entries(payload.derived || {})) {
      if (column in this.index || !Array.isArray(values) || values.length !== this.rows.length) continue;
      this.index[column] = this.columns.length;
      this.columns.push(column);
      for (let i = 0; i < this.rows.length; i++) this.rows[i].push(values[i]);
    }
    const fields = ["name", "op_name", "source", "user_source", "opcode", "hint", "fused_ops", "bound"]
      .map((c) => this.index[c])
      .filter((i) => i !== undefined);
    this.search = this.rows.map((r) =>
      fields
        .map((i) => r[i] ?? "")
        .join("\n")
        .toLowerCase(),
    );
    const name = this.index.name;
    this.byName = new Map(this.rows.map((r, i) => [r[name], i]));
  }

  has(column) {
    return column in this.index;
  }

  get(row, column) {
    const i = this.index[column];
    return i === undefined ? undefined : this.rows[row][i];
  }

  /** Distinct values of a text column. */
  distinct(column) {
    const i = this.index[column];
    return i === undefined ? [] : [...new Set(this.rows.map((r) => String(r[i] ?? "")))];
  }
}

const state = {
  runs: [], // runs whose report loads
  errors: {}, // run -> why it cannot be shown
  run: null,
  chip: "", // "" = the chip the report was written for
  chips: [],
  model: null,
  reportText: "",
  selected: -1,
  filter: { bound: "", opcode: "", text: "", timedOnly: true, group: null }, // group: {key, value}
  groupBy: "", // "" (one row per op) or a key of GROUPINGS
  other: "",
  compare: null,
  onlyFlipped: false,
  requestId: 0,
  pendingOp: null, // an op named by the URL, selected once its report is shown
};

const ui = {};

// -- the URL ------------------------------------------------------------------------------------

/** TensorBoard's window when the tab is in its iframe (same origin), else null. */
function hostWindow() {
  try {
    if (window.parent !== window && window.parent.location.href) return window.parent;
  } catch {
    // another origin: no host access
  }
  return null;
}

function parseHash(hash) {
  const parts = hash.replace(/^#/, "").split("&");
  const tab = parts[0].includes("=") ? "" : parts.shift();
  const pairs = parts
    .filter((p) => p.includes("="))
    .map((p) => p.split("=").map((x) => decodeURIComponent(x)));
  return { tab, pairs };
}

function readURL() {
  const host = hostWindow();
  const values = {};
  if (host) {
    const prefix = `p.${PLUGIN}.`;
    for (const [k, v] of parseHash(host.location.hash).pairs)
      if (k.startsWith(prefix)) values[k.slice(prefix.length)] = v;
  }
  // Opened on its own (data/plugin_entry.html?name=hlo_roofline&run=...): its own query.
  const own = new URLSearchParams(window.location.search);
  for (const k of URL_KEYS) if (!(k in values) && own.has(k)) values[k] = own.get(k);
  return values;
}

function urlValues() {
  const f = state.filter;
  const op = state.model && state.selected >= 0 ? state.model.get(state.selected, "name") : "";
  return {
    run: state.run || "",
    chip: state.chip,
    other: state.other,
    op: op || "",
    bound: f.bound,
    opcode: f.opcode,
    q: f.text,
    all: f.timedOnly ? "" : "1",
    by: state.groupBy,
    in: f.group ? `${f.group.key}=${f.group.value}` : "",
  };
}

/** Put the tab's state in the URL soon (one write per burst of clicks or keys: browsers throttle
 * history updates, and the write need not delay the selection it records). */
function writeURL() {
  clearTimeout(state.urlTimer);
  state.urlTimer = setTimeout(writeURLNow, 100);
}

/** Put the tab's state in the URL (replacing the entry: no history step per click). */
function writeURLNow() {
  const values = urlValues();
  const host = hostWindow();
  if (host) {
    const { tab, pairs } = parseHash(host.location.hash);
    if (tab !== PLUGIN) return; // another tab is showing: leave its URL alone
    const prefix = `p.${PLUGIN}.`;
    const kept = pairs.filter(([k]) => !k.startsWith(prefix));
    for (const k of URL_KEYS) if (values[k]) kept.push([prefix + k, values[k]]);
    const hash = [tab, ...kept.map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`)];
    const url = new URL(host.location.href);
    url.hash = hash.join("&");
    if (url.href !== host.location.href) host.history.replaceState(host.history.state, "", url.href);
    return;
  }
  const query = new URLSearchParams(window.location.search);
  for (const k of URL_KEYS) {
    if (values[k]) query.set(k, values[k]);
    else query.delete(k);
  }
  const url = new URL(window.location.href);
  url.search = query.toString();
  if (url.href !== window.location.href) window.history.replaceState(null, "", url.href);
}

/** TensorBoard's plugin channel: its reload button and auto-reload say "experimental.DataReloaded". */
function connectHost(onReload) {
  if (!hostWindow()) return false;
  const channel = new MessageChannel();
  channel.port1.onmessage = (event) => {
    let message;
    try {
      message = JSON.parse(event.data);
    } catch {
      return;
    }
    if (message.isReply) return;
    if (message.type === "experimental.DataReloaded" || message.type === "experimental.RunsChanged")
      onReload();
    const reply = { type: message.type, id: message.id, payload: null, error: null, isReply: true };
    channel.port1.postMessage(JSON.stringify(reply));
  };
  window.parent.postMessage("experimental.bootstrap", window.location.origin, [channel.port2]);
  return true;
}

// -- layout -------------------------------------------------------------------------------------

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
  ui.run.addEventListener("change", () => {
    state.autoRun = false;
    selectRun(ui.run.value);
  });
  ui.chip.addEventListener("change", () => {
    state.chip = ui.chip.value;
    loadReport();
  });
  ui.other.addEventListener("change", () => {
    state.other = ui.other.value;
    writeURL();
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
  ui.runErrors = el("details", { className: "hr-run-errors", attrs: { id: "hr-run-errors" } });
  ui.runErrors.hidden = true;
  ui.error = el("div", { className: "hr-error", attrs: { role: "alert" } });
  ui.error.hidden = true;
  ui.summary = el("section", { className: "hr-summary", attrs: { "aria-label": "Summary" } });

  ui.chartBox = el("section", { className: "hr-chart", attrs: { "aria-label": "Roofline chart" } });
  ui.showMeasured = el("input", { attrs: { type: "checkbox", id: "hr-show-measured" } });
  ui.showMeasured.checked = true;
  ui.showMeasured.addEventListener("change", () => ui.chart.setShowMeasured(ui.showMeasured.checked));
  ui.measuredToggle = el(
    "label",
    { className: "hr-chart-toggle" },
    ui.showMeasured,
    " measured points (◆ FLOPs ÷ measured time)",
  );
  ui.measuredToggle.hidden = true;
  ui.chartBox.append(ui.measuredToggle);
  ui.details = el("aside", {
    className: "hr-details",
    attrs: { "aria-label": "Selected op", "aria-live": "polite" },
  });
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
  ui.groupBy = el("select", { attrs: { id: "hr-group-by", "aria-label": "Group ops by" } });
  ui.groupBy.addEventListener("change", () => setGroupBy(ui.groupBy.value));
  // The group whose ops the table shows (after a click on a group's row), with a way back.
  ui.groupFilter = el("span", { className: "hr-group-filter", attrs: { id: "hr-group-filter" } });
  ui.groupFilter.hidden = true;
  const filters = el(
    "div",
    { className: "hr-filters" },
    el("label", {}, "Bound ", ui.boundFilter),
    el("label", {}, "Opcode ", ui.opcodeFilter),
    ui.search,
    el("label", {}, ui.timedOnly, " only ops with time"),
    el("label", {}, "Group by ", ui.groupBy),
    ui.groupFilter,
    ui.count,
  );
  // Shown when the selected op is one the filters hide (a click on a faint point, a URL).
  ui.hiddenNote = el("div", { className: "hr-hidden-note", attrs: { id: "hr-hidden-note", role: "status" } });
  ui.hiddenNote.hidden = true;
  ui.tableBox = el(
    "section",
    { className: "hr-ops", attrs: { "aria-label": "Ops" } },
    filters,
    ui.hiddenNote,
  );
  ui.content = el(
    "div",
    { className: "hr-content" },
    ui.summary,
    ui.main,
    ui.compareBox,
    ui.tableBox,
  );
  ui.root = el("div", { className: "hr-app" }, toolbar, ui.runErrors, ui.error, ui.content);
  document.body.append(ui.root);

  ui.chart = new RooflineChart(ui.chartBox, { onSelect: (row) => selectOp(row) });
  ui.timelineBox = el("section", { className: "hr-timeline-box", attrs: { "aria-label": "Timeline" } });
  ui.main.after(ui.timelineBox);
  ui.timeline = new Timeline(ui.timelineBox, { onSelect: (row) => selectOp(row) });
  ui.table = new VirtualTable(ui.tableBox, opColumns(), {
    onSelect: (row) => selectOp(row),
    sort: { key: "t_roofline_s", dir: -1 },
    label: "Ops",
  });
  ui.groupBox = el("div", { className: "hr-groups", attrs: { id: "hr-groups" } });
  ui.groupBox.hidden = true;
  ui.tableBox.append(ui.groupBox); // its table is made when the ops are first grouped
}

/** Table cell class for a bound ("" when the op has none, e.g. only in one compared run). */
function pill(bound) {
  return bound ? `hr-pill hr-bound-${bound}` : "";
}

/** The longest texts a column shows over the report's rows (its width is measured from them). */
function fitOf(format) {
  const m = state.model;
  if (!m) return [];
  return longest(m.rows.map((_, i) => format(i)));
}

function opColumns() {
  const g = (c) => (row) => state.model.get(row, c);
  const text = (c) => (row) => String(state.model.get(row, c) ?? "");
  const numeric = (key, label, format) => {
    const show = (r) => format(g(key)(r));
    return { key, label, num: true, value: g(key), text: show, fit: fitOf(show) };
  };
  const m = state.model;
  return [
    { key: "name", label: "name", width: "minmax(140px, 1.4fr)", text: text("name"), middle: true },
    { key: "opcode", label: "opcode", text: text("opcode"), fit: m ? longest(m.distinct("opcode")) : [] },
    {
      key: "bound",
      label: "bound",
      text: text("bound"),
      cls: (row) => pill(state.model.get(row, "bound")),
      fit: BOUNDS,
    },
    { key: "dtype", label: "dtype", text: text("dtype"), fit: m ? longest(m.distinct("dtype")) : [] },
    numeric("flops", "FLOPs", fmtSI),
    numeric("bytes_accessed", "bytes", fmtBytes),
    numeric("intensity", "FLOP/B", fmtSI),
    numeric("t_roofline_s", "time", fmtTime),
    numeric("share", "share", fmtPct),
    ...(m && m.has("roof_unit")
      ? [{ key: "roof_unit", label: "roof", text: text("roof_unit"), fit: longest(m.distinct("roof_unit")), tip: (row) => ROOF_UNITS[state.model.get(row, "roof_unit")] || "" }]
      : []),
    ...(m && m.has("t_exposed_s") && m.summary.exposed_comm_s > 0 ? [numeric("t_exposed_s", "exposed", fmtTime)] : []),
    ...(m && m.has("measured_s")
      ? [numeric("measured_s", "measured", fmtTime), numeric("efficiency", "efficiency", fmtPct)]
      : []),
    ...(m && m.has("user_source")
      ? [
          {
            key: "user_source",
            label: "user line",
            width: "minmax(160px, 1.5fr)",
            text: (row) => shortLine(state.model.get(row, "user_source")),
            tip: text("user_source"),
          },
        ]
      : []),
    { key: "op_name", label: "op_name", width: "minmax(160px, 2fr)", text: text("op_name"), middle: true },
    { key: "hint", label: "hint", width: "minmax(120px, 1.2fr)", text: text("hint") },
  ];
}

/** ``file.py:line (function)`` of a user line (its directories are in the cell's tooltip). */
function shortLine(where) {
  return where ? String(where).replace(/^.*[\\/](?=[^\\/]*:\d+)/, "") : "";
}

function setStatus(text) {
  ui.status.textContent = text;
}

function showError(message) {
  ui.error.hidden = !message;
  ui.error.textContent = message ? `Run “${state.run}”: ${message}` : "";
  ui.content.hidden = Boolean(message);
}

// -- runs ---------------------------------------------------------------------------------------

/** List the runs and fill the run menus with those not known to fail (the check of every report,
 * run_errors, comes after the shown run is drawn: see checkRuns). */
async function listRuns() {
  const runs = await getJSON(route("runs"));
  state.all = runs;
  fillRuns();
  return runs;
}

/** Ask which runs cannot be shown (the server reads every report for it): never before the shown
 * run is drawn, so a logdir of big reports does not hold up the first paint. */
async function checkRuns() {
  let errors;
  try {
    errors = await getJSON(route("run_errors"));
  } catch {
    return;
  }
  state.errors = errors || {};
  fillRuns();
  // the run shown by default failed: show the first that loads (a run the URL named stays)
  if (state.run in state.errors && state.autoRun && state.runs.length) await selectRun(state.runs[0]);
}

function fillRuns() {
  const runs = state.all;
  state.runs = runs.filter((r) => !(r in state.errors));
  const bad = runs.filter((r) => r in state.errors);
  const options = state.runs.map((r) => option(r, r, r === state.run));
  if (bad.length) {
    const group = el("optgroup", { attrs: { label: "cannot be loaded" } });
    for (const r of bad) {
      const o = option(r, `${r} (error)`, r === state.run);
      o.disabled = true;
      group.append(o);
    }
    options.push(group);
  }
  setChildren(ui.run, ...options);
  if (state.run) ui.run.value = state.run;
  ui.runErrors.hidden = !bad.length;
  setChildren(
    ui.runErrors,
    el("summary", {
      text: `${bad.length} run${bad.length === 1 ? "" : "s"} cannot be loaded (not offered above)`,
    }),
    el(
      "ul",
      {},
      ...bad.map((r) =>
        el("li", { dataset: { run: r } }, el("strong", { text: r }), `: ${state.errors[r]}`),
      ),
    ),
  );
  fillOther();
}

function fillOther() {
  setChildren(
    ui.other,
    option("", "—"),
    ...state.runs.filter((r) => r !== state.run).map((r) => option(r, r, r === state.other)),
  );
}

async function init() {
  css();
  buildLayout();
  setStatus("loading…");
  const wanted = readURL();
  let all;
  try {
    const rest = Promise.all([getJSON(route("chips")).catch(() => []), loadConstants()]);
    all = await listRuns();
    // The run the tab will most likely show: ask for its report now, beside the constants.
    const likely = all.includes(wanted.run) ? wanted.run : all[0];
    if (likely !== undefined) {
      const url = route("report", { run: likely, chip: wanted.chip || "" });
      state.prefetch = { url, promise: getJSONText(url) };
      state.prefetch.promise.catch(() => {});
    }
    [state.chips] = await rest;
  } catch (err) {
    showError(`cannot list runs: ${err.message}`);
    return;
  }
  setChildren(
    ui.groupBy,
    option("", "op (no grouping)"),
    ...Object.entries(GROUPINGS).map(([key, label]) => option(key, label)),
  );
  const hosted = connectHost(() => refresh());
  if (!hosted) setInterval(() => refresh(), POLL_MS);
  if (!all.length) {
    showEmpty();
    return;
  }
  state.chip = wanted.chip || "";
  state.other = state.runs.includes(wanted.other) ? wanted.other : "";
  state.filter = {
    bound: wanted.bound || "",
    opcode: wanted.opcode || "",
    text: wanted.q || "",
    timedOnly: wanted.all !== "1",
    group: parseGroup(wanted.in),
  };
  state.groupBy = GROUPINGS[wanted.by] ? wanted.by : "";
  ui.search.value = state.filter.text;
  ui.timedOnly.checked = state.filter.timedOnly;
  state.pendingOp = wanted.op || null;
  // A run the URL names is shown even if it cannot load (its error, not another run); otherwise
  // the first run that loads.
  state.autoRun = !all.includes(wanted.run); // the tab chose the run: on to the next if it fails
  const run = state.autoRun ? state.runs[0] : wanted.run;
  if (run === undefined) {
    ui.content.hidden = true;
    setStatus("");
    ui.root.dataset.state = "error";
    return;
  }
  await selectRun(run);
  checkRuns();
}

/** ``key=value`` (the URL's "in") as a group filter, or null. */
function parseGroup(text) {
  if (!text) return null;
  const at = text.indexOf("=");
  const key = text.slice(0, at);
  return at > 0 && GROUPINGS[key] ? { key, value: text.slice(at + 1) } : null;
}

function showEmpty() {
  ui.content.hidden = true;
  ui.error.hidden = false;
  ui.error.textContent =
    "No hlo_roofline reports under this logdir. Write one with " +
    "Report.write_tensorboard(logdir, run); it shows up on TensorBoard's next reload.";
  setStatus("");
  ui.root.dataset.state = "empty";
}

/** TensorBoard reloaded (button or auto-reload): new runs, rewritten reports, vanished runs. */
async function refresh() {
  if (state.refreshing) return;
  state.refreshing = true;
  try {
    const all = await listRuns();
    checkRuns();
    if (!all.length) {
      state.run = null;
      showEmpty();
      return;
    }
    if (!state.run || !all.includes(state.run)) {
      if (state.runs.length) await selectRun(state.runs[0]);
      return;
    }
    await loadReport({ quiet: true });
  } catch (err) {
    setStatus(`reload failed: ${err.message}`);
  } finally {
    state.refreshing = false;
  }
}

async function selectRun(run) {
  if (run !== state.run && state.run) {
    // a group, an op name search and an opcode belong to the run they were chosen in
    state.selected = -1;
    state.filter = { ...state.filter, text: "", opcode: "", group: null };
    ui.search.value = "";
  }
  if (run !== state.run) state.selected = -1;
  state.run = run;
  ui.run.value = run;
  if (state.other === run) state.other = "";
  fillOther();
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

async function loadReport({ quiet = false } = {}) {
  const id = ++state.requestId;
  if (!quiet) {
    setStatus("loading…");
    ui.root.dataset.state = "loading";
  }
  ui.csv.href = route("csv", { run: state.run, chip: state.chip });
  let payload;
  let text;
  try {
    const url = route("report", { run: state.run, chip: state.chip });
    const early = state.prefetch && state.prefetch.url === url ? state.prefetch.promise : null;
    state.prefetch = null;
    ({ body: payload, text } = await (early || getJSONText(url)));
  } catch (err) {
    if (id !== state.requestId) return;
    if (state.autoRun && !quiet && err.status && err.status !== 400) {
      // the run the tab picked cannot be shown: say so in the menu and show the next one
      state.errors[state.run] = err.message;
      fillRuns();
      if (state.runs.length) return selectRun(state.runs[0]);
    }
    state.model = null;
    state.reportText = "";
    ui.table.setRows([]);
    ui.chart.setModel(null);
    ui.timeline.setRun(null, "", null);
    fillChips();
    showError(err.message);
    setStatus("");
    ui.root.dataset.state = "error";
    ui.root.dataset.run = state.run;
    writeURL();
    return;
  }
  if (id !== state.requestId) return;
  showError("");
  setStatus("");
  if (quiet && text === state.reportText) return; // a reload that changed nothing
  const previous =
    state.pendingOp ??
    (state.model && state.selected >= 0 ? state.model.get(state.selected, "name") : null);
  state.pendingOp = null;
  state.model = new Model(payload);
  state.reportText = text;
  ui.table.setColumns(opColumns());
  fillChips();
  state.selected = previous === null ? -1 : (state.model.byName.get(previous) ?? -1);
  renderSummary();
  fillFilters();
  ui.measuredToggle.hidden = !state.model.has("measured_s");
  ui.chart.showMeasured = ui.showMeasured.checked;
  ui.chart.setModel(state.model);
  ui.timeline.setRun(state.run, state.chip, state.model.summary.chip ? state.model : null);
  applyFilter();
  setGroupBy(state.groupBy);
  if (state.selected >= 0) selectOp(state.selected);
  else renderDetails();
  // For tests and scripts: which run and chip the page shows, and that it is done loading.
  ui.root.dataset.run = state.run;
  ui.root.dataset.chip = state.model.summary.chip || "";
  ui.root.dataset.state = "ready";
  writeURL();
  if (state.other) await loadCompare();
  if (state.model.summary.measured_trace) linkTrace(id);
}

/** In a measured run, a link to the XProf session its trace was captured in. */
async function linkTrace(id) {
  const box = ui.summary.querySelector("[data-card=measured] .hr-card-sub");
  if (!box) return;
  let where;
  try {
    where = await getJSON(route("trace", { run: state.run }));
  } catch {
    return;
  }
  if (id !== state.requestId) return;
  const link = where.run
    ? el("a", {
        className: "hr-xprof",
        text: "open its trace in XProf ↗",
        attrs: {
          id: "hr-xprof",
          href: route("../profile/index.html", { run: where.run, tool: "trace_viewer", host: where.host }),
          target: "_blank",
          rel: "noopener",
          title: `XProf session ${where.run}`,
        },
      })
    : el("span", {
        className: "hr-muted",
        text: `trace ${where.recorded} (not under this logdir)`,
        attrs: { id: "hr-xprof" },
      });
  box.append(el("br"), link);
}

function renderSummary() {
  const m = state.model;
  const s = m.summary;
  const card = (label, value, sub, key) =>
    el(
      "div",
      { className: "hr-card", dataset: key ? { card: key } : {} },
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
        ? `${fmtTime(s.step_time_min_s ?? s.step_time_lower_s)} – ${fmtTime(s.step_time_upper_s)}`
        : "not classified",
      classified
        ? "every op's units overlapping perfectly – none overlapping; the step as scheduled " +
            "(the ops in XLA's order, transfers beside them) lies in between"
        : "choose a chip above",
      "range",
    ),
    card("MFU upper bound", fmtPct(s.mfu_upper_bound), s.chip_name || s.chip || ""),
    classified && s.step_time_scheduled_s !== undefined && s.step_time_scheduled_s !== null
      ? card(
          "step as scheduled",
          fmtTime(s.step_time_scheduled_s),
          s.comm_time_s
            ? `communication ${fmtTime(s.comm_time_s)}, exposed ${fmtTime(s.exposed_comm_s)} ` +
                `(${fmtPct(s.exposed_comm_share)} of the step)`
            : "no communication",
          "scheduled",
        )
      : null,
    classified ? timeBox : null,
    classified && typeof s.floor_share === "number"
      ? card(
          "held at the per-op floor",
          fmtPct(s.floor_share),
          s.floor_share > 0
            ? "of the step's lower bound is ops whose work takes less than the chip's per-op floor"
            : "no op is held at the per-op floor",
          "floor",
        )
      : null,
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
            (s.measured_overlap ? " · ops overlapped in the trace (their times sum past the step)" : ""),
          "measured",
        )
      : null,
    memoryCard(s),
    card(
      "module",
      m.module || "–",
      `${m.rows.length} ops${s.cost_model ? ` · ${s.cost_model} model` : ""}`,
    ),
  );
}

/** The third roofline: the step's HBM need per device as a bar against one device's HBM. */
function memoryCard(s) {
  const mem = s.memory;
  if (!mem) return null;
  const fit = s.memory_fit;
  const box = el(
    "div",
    { className: "hr-card hr-card-wide", dataset: { card: "memory" } },
    el("div", { className: "hr-card-label", text: "HBM per device" }),
  );
  if (!fit) {
    box.append(
      el("div", {
        className: "hr-card-value",
        text: `${mem.complete ? "" : "≥ "}${fmtBytes(mem.need_bytes)}`,
      }),
      el("div", { className: "hr-card-sub", text: "choose a chip to see whether it fits" }),
    );
    return box;
  }
  const used = fit.used_fraction;
  const bar = el("div", {
    className: "hr-sharebar hr-membar",
    attrs: { role: "meter", "aria-label": "HBM used", "aria-valuenow": String(used) },
  });
  const seg = el("span", {
    className: `hr-fit-${fit.verdict.replace(/ /g, "-")}`,
    title: `${fmtBytes(fit.need_bytes)} of ${fmtBytes(fit.capacity_bytes)}`,
  });
  seg.style.width = `${Math.min(100, Math.max(0.5, used * 100))}%`;
  bar.append(seg);
  const source = {
    "compiler error": " · the compiler refused the program",
    hlo: " · temporaries unknown (HLO text only)",
  }[mem.source] || "";
  box.append(
    el("div", {
      className: "hr-card-value",
      text: `${fmtBytes(fit.need_bytes)} of ${fmtBytes(fit.capacity_bytes)} (${fmtPct(used)}): ${fit.verdict}`,
    }),
    bar,
    el("div", { className: "hr-card-sub", text: `per device${source}` }),
  );
  if (fit.verdict === "does not fit" || fit.verdict === "tight") {
    const largest = (mem.largest || [])
      .slice(0, 3)
      .map((b) => `${b.name} ${fmtBytes(b.bytes)}`)
      .join(", ");
    if (largest) box.append(el("div", { className: "hr-card-sub", text: `largest: ${largest}` }));
    for (const advice of fit.advice || []) {
      box.append(el("div", { className: "hr-card-sub", text: `try: ${advice}` }));
    }
  }
  return box;
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
  writeURL();
}

function clearFilters() {
  // "only ops with time" is a view setting, not a filter: it stays, unless the op to show has none
  const selected = state.model && state.selected >= 0 ? state.model.get(state.selected, "t_roofline_s") : 1;
  const timedOnly = state.filter.timedOnly && selected > 0;
  state.filter = { bound: "", opcode: "", text: "", timedOnly, group: null };
  ui.boundFilter.value = "";
  ui.opcodeFilter.value = "";
  ui.search.value = "";
  ui.timedOnly.checked = timedOnly;
  applyFilter();
  if (state.selected >= 0) selectOp(state.selected);
  writeURL();
}

function applyFilter() {
  const m = state.model;
  if (!m) return;
  const { bound, opcode, text, timedOnly } = state.filter;
  const group = state.filter.group && m.has(state.filter.group.key) ? state.filter.group : null;
  const needle = text.trim().toLowerCase();
  const hasTime = m.has("t_roofline_s");
  const ids = [];
  const shown = new Uint8Array(m.rows.length);
  for (let i = 0; i < m.rows.length; i++) {
    if (bound && m.get(i, "bound") !== bound) continue;
    if (opcode && m.get(i, "opcode") !== opcode) continue;
    if (timedOnly && hasTime && !(m.get(i, "t_roofline_s") > 0)) continue;
    if (needle && !m.search[i].includes(needle)) continue;
    if (group && (m.get(i, group.key) || UNATTRIBUTED) !== group.value) continue;
    ids.push(i);
    shown[i] = 1;
  }
  ui.table.setRows(ids);
  ui.chart.setShown(ids.length === m.rows.length ? null : shown);
  ui.count.textContent = `${ids.length} of ${m.rows.length} ops`;
  ui.count.dataset.shown = String(ids.length);
  ui.count.dataset.total = String(m.rows.length);
  if (state.selected >= 0) ui.table.select(state.selected, true);
  showHiddenNote();
  showGroupFilter();
}

// -- grouping -----------------------------------------------------------------------------------

/** Show the ops one row per group (Report.rollup on the server), or one row per op (""). */
function setGroupBy(by) {
  state.groupBy = GROUPINGS[by] ? by : "";
  ui.groupBy.value = state.groupBy;
  ui.table.root.hidden = Boolean(state.groupBy);
  ui.groupBox.hidden = !state.groupBy;
  writeURL();
  if (state.groupBy) loadGroups();
}

async function loadGroups() {
  const by = state.groupBy;
  const id = state.requestId;
  ui.groupBox.dataset.state = "loading";
  if (!ui.groupTable) {
    ui.groupTable = new VirtualTable(ui.groupBox, [], {
      onSelect: (row) => ui.groupTable.select(row), // arrows move; Enter or a click opens
      onActivate: (row) => openGroup(row),
      sort: { key: "t_roofline_s", dir: -1 },
      label: "Groups",
    });
  }
  let body;
  try {
    body = await getJSON(route("rollup", { run: state.run, by, chip: state.chip }));
  } catch (err) {
    if (id !== state.requestId || by !== state.groupBy) return;
    ui.groupTable.setColumns([]);
    ui.groupTable.setRows([]);
    ui.groupBox.dataset.state = "error";
    ui.count.textContent = `cannot group by ${GROUPINGS[by]}: ${err.message}`;
    return;
  }
  if (id !== state.requestId || by !== state.groupBy) return;
  const idx = Object.fromEntries(body.columns.map((c, i) => [c, i]));
  const get = (row, col) => body.data[row][idx[col]];
  state.groups = { by, get };
  const fit = (show) => longest(body.data.map((_, i) => show(i)));
  const numeric = (key, label, format) => {
    const show = (r) => (idx[key] === undefined ? "" : format(get(r, key)));
    return { key, label, num: true, value: (r) => get(r, key), text: show, fit: fit(show) };
  };
  const key = (r) => String(get(r, by));
  ui.groupTable.setColumns([
    {
      key: by,
      label: GROUPINGS[by],
      width: "minmax(240px, 3fr)",
      text: by === "scope" ? key : (r) => shortLine(key(r)) || key(r),
      tip: key,
    },
    numeric("ops", "ops", (x) => String(x)),
    ...(idx.t_roofline_s === undefined
      ? [numeric("flops", "FLOPs", fmtSI), numeric("bytes_accessed", "bytes", fmtBytes)]
      : [
          numeric("t_roofline_s", "time", fmtTime),
          numeric("share", "share", fmtPct),
          { key: "bound", label: "bound", text: (r) => get(r, "bound"), cls: (r) => pill(get(r, "bound")), fit: BOUNDS },
          numeric("mix_compute", "compute-bound", fmtPct),
          numeric("mix_memory", "memory-bound", fmtPct),
          ...(state.model.summary.comm_time_s > 0 && idx.mix_communication !== undefined
            ? [numeric("mix_communication", "comm-bound", fmtPct)]
            : []),
          ...(state.model.summary.exposed_comm_s > 0 && idx.t_exposed_s !== undefined
            ? [numeric("t_exposed_s", "exposed", fmtTime)]
            : []),
          numeric("flops", "FLOPs", fmtSI),
        ]),
  ]);
  ui.groupTable.setRows(body.data.map((_, i) => i));
  ui.groupBox.dataset.state = "ready";
  ui.groupBox.dataset.by = by;
  ui.count.textContent = `${body.data.length} groups of ${state.model.rows.length} ops`;
}

/** A click on a group: its ops, one row each (the filter says which group, with a way back). */
function openGroup(row) {
  const { by, get } = state.groups;
  state.filter.group = { key: by, value: String(get(row, by)) };
  setGroupBy("");
  applyFilter();
  writeURL();
}

function showGroupFilter() {
  const group = state.filter.group;
  ui.groupFilter.hidden = !group;
  if (!group) return;
  setChildren(
    ui.groupFilter,
    `${GROUPINGS[group.key] || group.key}: `,
    el("strong", { text: group.key === "scope" ? group.value : shortLine(group.value) || group.value, title: group.value }),
    " ",
    el("button", {
      className: "hr-button",
      text: "✕",
      title: "Show every op",
      attrs: { type: "button", id: "hr-clear-group", "aria-label": "Show every op" },
      on: {
        click: () => {
          state.filter.group = null;
          applyFilter();
          writeURL();
        },
      },
    }),
  );
}

/** Say so when the selected op is one the filters hide; offer to show it (never done silently). */
function showHiddenNote() {
  const row = state.selected;
  const hidden = state.model && row >= 0 && !ui.table.has(row);
  ui.hiddenNote.hidden = !hidden;
  if (!hidden) return;
  const button = el("button", {
    className: "hr-button",
    text: "Clear the filters",
    attrs: { type: "button", id: "hr-clear-filters" },
    on: { click: clearFilters },
  });
  setChildren(
    ui.hiddenNote,
    `“${state.model.get(row, "name")}” is hidden by the table's filters. `,
    button,
  );
}

function selectOp(row) {
  state.selected = row;
  ui.table.select(row, true);
  ui.chart.select(row);
  ui.timeline.select(row);
  showHiddenNote();
  renderDetails();
  writeURL();
}

/** The roof the op's predicted point lies on, in the server's numbers (verdict.classify's
 * roof columns): the unit and what it is, the compute roof, the memory roof. No arithmetic here. */
function roofText(g) {
  const unit = g("roof_unit");
  if (!unit) return "";
  const parts = [`${unit}: ${ROOF_UNITS[unit] || unit}`];
  if (g("roof_flops_per_s") > 0) parts.push(`compute roof ${fmtSI(g("roof_flops_per_s"), "FLOP/s")}`);
  if (g("roof_bytes_per_s") > 0) parts.push(`memory roof ${fmtSI(g("roof_bytes_per_s"), "B/s")}`);
  return parts.join(" · ");
}

/** Why a measured op sits where it does, where the join found a problem. */
function measuredText(g) {
  const e = g("efficiency");
  const problem = state.model.has("measurement_problem") ? g("measurement_problem") : "";
  if (problem) return `${fmtPct(e)} (${problem})`;
  return fmtPct(e);
}

function renderDetails() {
  const m = state.model;
  const row = state.selected;
  if (!m || row < 0) {
    setChildren(
      ui.details,
      el("p", {
        className: "hr-muted",
        text: "Click a point or a row to see the op (or focus the chart or the table and use the arrow keys).",
      }),
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
    ...(m.has("precision") && g("precision") ? [["precision", g("precision")]] : []),
    ["shape", g("shape")],
    ["count per step", fmtNum(g("count"))],
    ["FLOPs", fmtSI(g("flops"))],
    ["transcendentals", g("transcendentals") ? fmtSI(g("transcendentals")) : ""],
    ["bytes", fmtBytes(g("bytes_accessed"))],
    ["of them in VMEM", g("vmem_bytes") ? fmtBytes(g("vmem_bytes")) : ""],
    ["comm bytes", g("comm_bytes") ? fmtBytes(g("comm_bytes")) : ""],
    ["intensity", g("intensity") > 0 ? `${fmtSI(g("intensity"))} FLOP/B` : "no FLOPs"],
    ["roof", m.has("roof_unit") ? roofText(g) : ""],
    ["ridge", g("critical_intensity") > 0 ? `${fmtSI(g("critical_intensity"))} FLOP/B` : ""],
    ["compute unit", m.has("compute_unit") ? g("compute_unit") : ""],
    ["t compute", fmtTime(g("t_compute_s"))],
    ["t memory", fmtTime(g("t_memory_s"))],
    ["t comm", fmtTime(g("t_comm_s"))],
    ["t roofline", fmtTime(g("t_roofline_s"))],
    ["exposed", m.has("t_exposed_s") && g("t_exposed_s") > 0 ? `${fmtTime(g("t_exposed_s"))} the stream waited for its transfer` : ""],
    ["XLA's estimate", m.has("xla_estimate_s") && g("xla_estimate_s") > 0 ? fmtTime(g("xla_estimate_s")) : ""],
    ["XLA's gap", m.has("xla_gap") ? g("xla_gap") : ""],
    ["share", fmtPct(g("share"))],
    ...(m.has("measured_s")
      ? [
          ["measured", fmtTime(g("measured_s"))],
          ["efficiency", measuredText(g)],
          ["achieved FLOP/s", fmtSI(g("achieved_flops_per_s"))],
          ["achieved bytes/s", fmtSI(g("achieved_bytes_per_s"))],
        ]
      : []),
    ["op_name", g("op_name")],
    ["user line", g("user_source")],
    ["source", g("source")],
    ["hint", g("hint")],
    // the hint's fields (reports written before them lack the columns)
    ["hint reason", m.has("hint_reason") ? g("hint_reason") : ""],
    ["ridge M", m.has("ridge_m") && g("ridge_m") != null ? fmtNum(Math.round(g("ridge_m"))) : ""],
    ["ridge K", m.has("ridge_k") && g("ridge_k") != null ? fmtNum(Math.round(g("ridge_k"))) : ""],
    ["MXU padding waste", m.has("mxu_waste") && g("mxu_waste") > 0 ? fmtPct(g("mxu_waste")) : ""],
    ["note", g("note")],
  ];
  const dl = el("dl", { className: "hr-dl" });
  for (const [k, v] of entries) {
    if (v === "" || v === null || v === undefined) continue;
    dl.append(el("dt", { text: k }), el("dd", { text: v, dataset: { field: k } }));
  }
  const fused = g("fused_ops");
  const stack = m.stacks[g("call_stack")] || "";
  setChildren(
    ui.details,
    el("h3", { className: "hr-op-name", text: g("name") }),
    dl,
    fused ? el("h4", { text: "fused ops" }) : null,
    fused ? el("pre", { className: "hr-fused", text: fused }) : null,
    stack ? el("h4", { text: "call stack (innermost first; the user's line marked)" }) : null,
    stack ? callStack(stack.split("\n"), g("user_source")) : null,
  );
}

/** The Python frames an op was traced in, innermost first; the user's own line stands out. */
function callStack(frames, userLine) {
  return el(
    "ol",
    { className: "hr-stack", attrs: { id: "hr-stack" } },
    ...frames.map((frame) =>
      el("li", {
        text: frame,
        className: frame === userLine ? "hr-user-frame" : "",
        attrs: { "aria-current": frame === userLine ? "true" : null },
      }),
    ),
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
        `${c.counts.matched} timed ops matched (as hlo-roofline diff matches them) · ` +
        `${c.counts.flipped} flipped verdict(s) · ${c.counts.only_run} only in ${c.run} · ` +
        `${c.counts.only_other} only in ${c.other}`,
    }),
    c.note ? el("div", { className: "hr-muted", text: `${c.other} ${c.note}` }) : null,
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
  const fit = (show) => longest(c.data.map((_, i) => show(i)));
  const time = (col) => (r) => fmtTime(get(r, col));
  const table = new VirtualTable(
    tableBox,
    [
      {
        key: "flipped",
        label: "⇄",
        fit: ["⇄"],
        value: (r) => (get(r, "flipped") ? 0 : 1),
        text: (r) => (get(r, "flipped") ? "⇄" : ""),
        title: "verdict flipped",
      },
      { key: "op_name", label: "op_name", width: "minmax(180px, 2fr)", text: text("op_name") },
      { key: "opcode", label: "opcode", text: text("opcode"), fit: fit(text("opcode")) },
      {
        key: "bound",
        label: `bound (${c.run})`,
        text: text("bound"),
        cls: (r) => pill(get(r, "bound")),
        fit: BOUNDS,
      },
      {
        key: "bound_other",
        label: `bound (${c.other})`,
        text: text("bound_other"),
        cls: (r) => pill(get(r, "bound_other")),
        fit: BOUNDS,
      },
      {
        key: "t_roofline_s",
        label: "time",
        num: true,
        value: (r) => get(r, "t_roofline_s"),
        text: time("t_roofline_s"),
        fit: fit(time("t_roofline_s")),
      },
      {
        key: "t_roofline_s_other",
        label: "time (other)",
        num: true,
        value: (r) => get(r, "t_roofline_s_other"),
        text: time("t_roofline_s_other"),
        fit: fit(time("t_roofline_s_other")),
      },
      {
        key: "delta_s",
        label: "Δ time",
        num: true,
        value: (r) => Math.abs(get(r, "delta_s")),
        text: time("delta_s"),
        fit: fit(time("delta_s")),
      },
      { key: "match", label: "match", text: text("match"), fit: ["exact", "shape", "only_run", "only_other"] },
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
        const row = name === null ? -1 : (state.model.byName.get(name) ?? -1);
        if (row >= 0) selectOp(row);
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
