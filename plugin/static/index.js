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

import { pill, shortLine } from "./cells.js";
import { RooflineChart } from "./chart.js";
import { ExploreView } from "./explore.js";
import { loadCompare } from "./compare.js";
import { renderDetails } from "./details.js";
import { parseGroup, setGroupBy, showGroupFilter, UNATTRIBUTED } from "./groups.js";
import { actions, constants, fitOf, loadConstants, Model, state, ui } from "./state.js";
import { linkTrace, renderSummary } from "./summary.js";
import { VirtualTable } from "./table.js";
import { Timeline } from "./timeline.js";
import { connectHost, hostWindow, readURL, watchHost, writeURL } from "./url.js";
import { el, fmtBytes, fmtPct, fmtSI, fmtTime, getJSON, getJSONText, longest, option, route, setChildren } from "./util.js";

const POLL_MS = 30_000; // runs re-listed this often when no TensorBoard host tells us to reload
const SEARCH_WAIT_MS = 25; // typing pauses this long before the table is filtered (a 20k-op filter takes ~15 ms)

// -- layout -------------------------------------------------------------------------------------

export function css() {
  const link = el("link", {
    attrs: { rel: "stylesheet", href: new URL("./style.css", import.meta.url).href },
  });
  document.head.append(link);
}

export function buildLayout() {
  actions.selectOp = selectOp;
  actions.applyFilter = applyFilter;
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
    timer = setTimeout(() => setFilter({ text: ui.search.value }), SEARCH_WAIT_MS);
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
  // Layout explorations in the logdir: below the run's own view (the run is what the tab opens
  // on), each closed until asked for.
  ui.explore = new ExploreView(ui.root, { onOpen: (run) => openRun(run) });

  ui.chart = new RooflineChart(ui.chartBox, { onSelect: (row) => selectOp(row) });
  ui.timelineBox = el("section", { className: "hr-timeline-box", attrs: { "aria-label": "Timeline" } });
  ui.main.after(ui.timelineBox);
  ui.timeline = new Timeline(ui.timelineBox, { onSelect: (row) => selectOp(row) });
  ui.table = new VirtualTable(ui.tableBox, opColumns(), {
    onSelect: (row) => selectOp(row),
    sort: { key: "t_expected_s", dir: -1 },
    label: "Ops",
  });
  ui.groupBox = el("div", { className: "hr-groups", attrs: { id: "hr-groups" } });
  ui.groupBox.hidden = true;
  ui.tableBox.append(ui.groupBox); // its table is made when the ops are first grouped
}

export function opColumns() {
  const g = (c) => (row) => state.model.get(row, c);
  const text = (c) => (row) => String(state.model.get(row, c) ?? "");
  const numeric = (key, label, format) => {
    const show = (r) => format(g(key)(r));
    return { key, label, num: true, value: g(key), text: show, fit: fitOf(key, show) };
  };
  const m = state.model;
  return [
    // the name is what a row is found by: measured to show whole (the first three columns never
    // cut, at 1280 px too); op_name and the hint take the room that is left, and where even their
    // least widths do not fit, the user line, dtype, roof and hint leave the table (`drop`; the
    // op's details show them)
    { key: "name", label: "name", text: text("name"), fit: fitOf("name", text("name")) },
    { key: "opcode", label: "opcode", text: text("opcode"), fit: m ? longest(m.distinct("opcode")) : [] },
    {
      key: "bound",
      label: "bound",
      text: text("bound"),
      cls: (row) => pill(state.model.get(row, "bound")),
      fit: constants.bounds,
    },
    { key: "dtype", label: "dtype", text: text("dtype"), fit: m ? longest(m.distinct("dtype")) : [], drop: 3 },
    numeric("flops", "FLOPs", fmtSI),
    numeric("bytes_accessed", "bytes", fmtBytes),
    numeric("intensity", "FLOP/B", fmtSI),
    ...(m && m.has("t_bound_s") ? [numeric("t_bound_s", "time ≥", fmtTime)] : []),
    numeric("t_expected_s", "time ≈", fmtTime),
    numeric("share", "share", fmtPct),
    ...(m && m.has("roof_unit")
      ? [{ key: "roof_unit", label: "roof", text: text("roof_unit"), fit: longest(m.distinct("roof_unit")), tip: (row) => constants.roofUnits[state.model.get(row, "roof_unit")] || "", drop: 2 }]
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
            width: "minmax(60px, 1.5fr)",
            drop: 4,
            text: (row) => shortLine(state.model.get(row, "user_source")),
            tip: text("user_source"),
          },
        ]
      : []),
    { key: "op_name", label: "op_name", width: "minmax(60px, 2fr)", text: text("op_name"), middle: true },
    { key: "hint", label: "hint", width: "minmax(60px, 1.2fr)", text: text("hint"), middle: true, drop: 1 },
  ];
}

export function setStatus(text) {
  ui.status.textContent = text;
}

export function showError(message) {
  ui.error.hidden = !message;
  ui.error.textContent = message ? `Run “${state.run}”: ${message}` : "";
  ui.content.hidden = Boolean(message);
}

// -- runs ---------------------------------------------------------------------------------------

/** List the runs and fill the run menus with those not known to fail (the check of every report,
 * run_errors, comes after the shown run is drawn: see checkRuns). */
export async function listRuns() {
  const runs = await getJSON(route("runs"));
  state.all = runs;
  fillRuns();
  return runs;
}

/** Ask which runs cannot be shown (the server reads every report for it): never before the shown
 * run is drawn, so a logdir of big reports does not hold up the first paint. */
export async function checkRuns() {
  let errors;
  try {
    errors = await getJSON(route("run_errors"));
  } catch {
    return;
  }
  state.errors = errors || {};
  ui.root.dataset.runsChecked = "1"; // for tests and the benchmark: every run's report was read
  fillRuns();
  // the run shown by default failed: show the first that loads (a run the URL named stays)
  if (state.run in state.errors && state.autoRun && state.runs.length) await selectRun(state.runs[0]);
}

export function fillRuns() {
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

export function fillOther() {
  setChildren(
    ui.other,
    option("", "—"),
    ...state.runs.filter((r) => r !== state.run).map((r) => option(r, r, r === state.other)),
  );
}

export async function init() {
  css();
  buildLayout();
  setStatus("loading…");
  const wanted = readURL();
  let all;
  try {
    const rest = Promise.all([getJSON(route("chips")).catch(() => []), loadConstants()]);
    // The run the tab will most likely show: ask for its report now, beside the constants (a
    // run the URL names at once, beside the run list; else the first run listed).
    const prefetch = (run) => {
      const url = route("report", { run, chip: wanted.chip || "" });
      if (state.prefetch && state.prefetch.url === url) return;
      state.prefetch = { url, promise: getJSONText(url) };
      state.prefetch.promise.catch(() => {});
    };
    if (wanted.run) prefetch(wanted.run);
    all = await listRuns();
    const likely = all.includes(wanted.run) ? wanted.run : all[0];
    if (likely !== undefined) prefetch(likely);
    [state.chips] = await rest;
  } catch (err) {
    showError(`cannot list runs: ${err.message}`);
    return;
  }
  setChildren(
    ui.groupBy,
    option("", "op (no grouping)"),
    ...Object.entries(constants.groupings).map(([key, label]) => option(key, label)),
  );
  const hosted = connectHost(() => refresh());
  if (!hosted) setInterval(() => refresh(), POLL_MS);
  watchHost((values) => navigate(values));
  followTheme();
  if (!all.length) {
    showEmpty();
    return;
  }
  await show(wanted);
  checkRuns();
  ui.explore.load();
}

/** Open a run from elsewhere in the tab (the exploration view), as choosing it in the menu. */
async function openRun(run) {
  state.autoRun = false;
  await selectRun(run);
  ui.content.scrollIntoView({ block: "start" });
}

/** Show what a URL asks for: run, chip, compared run, filters, grouping, selected op. */
async function show(wanted) {
  const all = state.all;
  state.chip = wanted.chip || "";
  state.other = state.runs.includes(wanted.other) ? wanted.other : "";
  state.filter = {
    bound: wanted.bound || "",
    opcode: wanted.opcode || "",
    text: wanted.q || "",
    timedOnly: wanted.all !== "1",
    group: parseGroup(wanted.in),
  };
  state.groupBy = constants.groupings[wanted.by] ? wanted.by : "";
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
}

/** The host's URL changed to another view of this tab (a shared link opened in a window already
 * on it): show that view. */
async function navigate(values) {
  state.run = null; // the URL's filters are for the run it names: none is carried over
  await show(values);
}

/** TensorBoard's dark theme (its body's dark-mode class), followed as it changes; on its own, the
 * page follows the system's (style.css, prefers-color-scheme). */
function followTheme() {
  const host = hostWindow();
  const body = host && host.document && host.document.body;
  if (!body) return;
  const apply = () => {
    const dark = body.classList.contains("dark-mode");
    document.documentElement.classList.toggle("hr-dark", dark);
    document.documentElement.classList.toggle("hr-light", !dark);
    if (ui.chart && state.model) ui.chart.draw();
    if (ui.timeline) ui.timeline.draw();
  };
  apply();
  new host.MutationObserver(apply).observe(body, { attributes: true, attributeFilter: ["class"] });
}

export function showEmpty() {
  ui.content.hidden = true;
  ui.error.hidden = false;
  ui.error.textContent =
    "No hlo_roofline reports under this logdir. Write one with " +
    "Report.write_tensorboard(logdir, run); it shows up on TensorBoard's next reload.";
  setStatus("");
  ui.root.dataset.state = "empty";
}

/** TensorBoard reloaded (button or auto-reload): new runs, rewritten reports, vanished runs. */
export async function refresh() {
  if (state.refreshing) return;
  state.refreshing = true;
  try {
    const all = await listRuns();
    checkRuns();
    ui.explore.load();
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

export async function selectRun(run) {
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

export function fillChips() {
  const own = state.model ? state.model.summary.chip : null;
  const ownName = state.model ? state.model.summary.chip_name : null;
  const label = own ? `as written (${ownName || own})` : "as written (no chip)";
  const options = [option("", label, state.chip === "")];
  for (const c of state.chips)
    options.push(option(c.key, `${c.name} (${c.key})`, c.key === state.chip));
  setChildren(ui.chip, ...options);
}

export async function loadReport({ quiet = false } = {}) {
  const id = ++state.requestId;
  if (!quiet) {
    setStatus("loading…");
    ui.root.dataset.state = "loading";
  }
  ui.csv.href = route("csv", { run: state.run, chip: state.chip });
  performance.mark("hr-report-asked");
  let base = null;
  let payload;
  let text;
  try {
    // A chip's answer is only what the chip changes, when the run as written is here to add it to
    const held = state.written && state.written.run === state.run ? state.written.model : null;
    base = state.chip && held && held.stamp ? held : null;
    const url = route("report", { run: state.run, chip: state.chip, since: base ? base.stamp : "" });
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
  performance.mark("hr-report-parsed");
  const previous =
    state.pendingOp ??
    (state.model && state.selected >= 0 ? state.model.get(state.selected, "name") : null);
  state.pendingOp = null;
  state.model = new Model(payload, base);
  state.reportText = text;
  if (!state.chip) state.written = { run: state.run, model: state.model };
  else if (state.written && state.written.run !== state.run) state.written = null;
  performance.mark("hr-model");
  ui.table.setColumns(opColumns());
  fillChips();
  state.selected = previous === null ? -1 : (state.model.byName.get(previous) ?? -1);
  renderSummary();
  fillFilters();
  ui.measuredToggle.hidden = !state.model.has("measured_s");
  ui.chart.showMeasured = ui.showMeasured.checked;
  ui.chart.setModel(state.model, { draw: false }); // drawn once, by applyFilter's setShown
  performance.mark("hr-chart");
  ui.timeline.setRun(state.run, state.chip, state.model.summary.chip ? state.model : null);
  applyFilter();
  setGroupBy(state.groupBy);
  if (state.selected >= 0) selectOp(state.selected);
  else renderDetails();
  // For tests and scripts: which run and chip the page shows, and that it is done loading.
  ui.root.dataset.run = state.run;
  ui.root.dataset.chip = state.model.summary.chip || "";
  ui.root.dataset.state = "ready";
  performance.mark("hr-ready");
  const model = state.model;
  setTimeout(() => model.search, 0); // the search index, once the page is drawn
  // For the benchmark and anyone profiling: where the report's time went in this page.
  measure("hr-fetch", "hr-report-asked", "hr-report-parsed");
  measure("hr-model", "hr-report-parsed", "hr-model");
  measure("hr-chart", "hr-model", "hr-chart");
  measure("hr-rest", "hr-chart", "hr-ready");
  writeURL();
  if (state.other) await loadCompare();
  if (state.model.summary.measured_trace) linkTrace(id);
}

export function fillFilters() {
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
    ...constants.bounds.map((b) => option(b, b, b === state.filter.bound)),
  );
}

export function setFilter(change) {
  Object.assign(state.filter, change);
  applyFilter();
  writeURL();
}

export function clearFilters() {
  // "only ops with time" is a view setting, not a filter: it stays, unless the op to show has none
  const selected = state.model && state.selected >= 0 ? state.model.get(state.selected, "t_expected_s") : 1;
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

function measure(name, start, end) {
  try {
    performance.measure(name, start, end);
  } catch {
    // a mark of an earlier load was cleared or never made: nothing to say
  }
}

export function applyFilter() {
  const m = state.model;
  if (!m) return;
  const started = performance.now();
  const { bound, opcode, text, timedOnly } = state.filter;
  const group = state.filter.group && m.has(state.filter.group.key) ? state.filter.group : null;
  const needle = text.trim().toLowerCase();
  const hasTime = m.has("t_expected_s");
  const search = needle ? m.search : null;
  const ids = [];
  const shown = new Uint8Array(m.rows.length);
  let inGroup = 0; // the group's ops, whatever the other filters (the count its row showed)
  for (let i = 0; i < m.rows.length; i++) {
    if (group && (m.get(i, group.key) || UNATTRIBUTED) !== group.value) continue;
    inGroup++;
    if (bound && m.get(i, "bound") !== bound) continue;
    if (opcode && m.get(i, "opcode") !== opcode) continue;
    if (timedOnly && hasTime && !(m.get(i, "t_expected_s") > 0)) continue;
    if (needle && !search[i].includes(needle)) continue;
    ids.push(i);
    shown[i] = 1;
  }
  ui.table.setRows(ids);
  ui.chart.setShown(ids.length === m.rows.length ? null : shown);
  ui.count.textContent = group
    ? `${ids.length} of the group's ${inGroup} ops (of ${m.rows.length})` +
      (ids.length < inGroup && timedOnly ? ": ops without time hidden" : "")
    : `${ids.length} of ${m.rows.length} ops`;
  ui.count.dataset.group = group ? String(inGroup) : "";
  ui.count.dataset.shown = String(ids.length);
  ui.count.dataset.total = String(m.rows.length);
  if (state.selected >= 0) ui.table.select(state.selected, true);
  showHiddenNote();
  showGroupFilter();
  performance.measure("hr-filter", { start: started });
}

/** Say so when the selected op is one the filters hide; offer to show it (never done silently). */
export function showHiddenNote() {
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

export function selectOp(row) {
  state.selected = row;
  ui.table.select(row, true);
  ui.chart.select(row);
  ui.timeline.select(row);
  showHiddenNote();
  renderDetails();
  writeURL();
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
