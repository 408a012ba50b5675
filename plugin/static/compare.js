// The comparison with another run: hlo_roofline.diff.compare on the server, as `hlo-roofline diff`
// prints it.

import { pill } from "./cells.js";
import { actions, constants, state, ui } from "./state.js";
import { VirtualTable } from "./table.js";
import { el, fmtPct, fmtTime, getJSON, longest, route, setChildren } from "./util.js";

export async function loadCompare() {
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

export function renderCompare() {
  const c = state.compare;
  const idx = Object.fromEntries(c.columns.map((n, i) => [n, i]));
  const get = (row, col) => c.data[row][idx[col]];
  const a = c.summary.run;
  const b = c.summary.other;
  const delta = (x, y) =>
    x > 0 && y !== null && y !== undefined ? ` (${y >= x ? "+" : ""}${fmtPct((y - x) / x)})` : "";
  const order = new Map(c.data.map((_, i) => [i, i])); // the server's (the CLI's) order
  // What `hlo-roofline diff` prints, in its words and order: the step, the counts, then the ops
  // that changed (flips, ops on one side only, time changes, each by the size of its change).
  const head = el(
    "div",
    { className: "hr-compare-head" },
    el("h3", { text: `${c.run} → ${c.other}` }),
    el("div", {
      attrs: { "data-testid": "compare-step" },
      text:
        `step: ${fmtTime(a.step_time_serial_s)} → ${fmtTime(b.step_time_serial_s)}` +
        `${delta(a.step_time_serial_s, b.step_time_serial_s)} on ${c.chip}`,
    }),
    el("div", {
      attrs: { "data-testid": "compare-counts" },
      text:
        `flipped bound: ${c.counts.flipped}  added: ${c.counts.added}  ` +
        `removed: ${c.counts.removed}  changed: ${c.counts.changed}`,
    }),
    el("div", {
      className: "hr-muted",
      text:
        `${c.counts.matched} timed ops matched (as hlo-roofline diff matches them); ` +
        `“added”: only in ${c.other}, “removed”: only in ${c.run}`,
    }),
    c.note ? el("div", { className: "hr-muted", text: `${c.other} ${c.note}` }) : null,
  );
  const which = el(
    "select",
    { attrs: { id: "hr-compare-which", "aria-label": "which ops" } },
    el("option", { attrs: { value: "changed" }, text: "ops that changed (as the CLI lists)" }),
    el("option", { attrs: { value: "flipped" }, text: "flipped verdicts only" }),
    el("option", { attrs: { value: "all" }, text: "every matched op" }),
  );
  which.value = state.compareWhich || "changed";
  const count = el("span", { className: "hr-count", attrs: { id: "hr-compare-count" } });
  const box = el("div", { className: "hr-filters" }, el("label", {}, "show ", which), count);
  const tableBox = el("div", {});
  setChildren(ui.compareBox, head, box, tableBox);
  const text = (col) => (row) => String(get(row, col) ?? "");
  const fit = (show) => longest(c.data.map((_, i) => show(i)));
  const time = (col) => (r) => fmtTime(get(r, col));
  const table = new VirtualTable(
    tableBox,
    [
      {
        key: "order",
        label: "#",
        num: true,
        value: (r) => order.get(r),
        text: (r) => String(order.get(r) + 1),
        fit: [String(c.data.length)],
        title: "the order hlo-roofline diff lists the ops in",
      },
      { key: "change", label: "change", text: text("change"), fit: ["flipped", "removed", "changed"] },
      { key: "op_name", label: "op_name", width: "minmax(180px, 2fr)", text: text("op_name") },
      { key: "opcode", label: "opcode", text: text("opcode"), fit: fit(text("opcode")) },
      {
        key: "bound",
        label: `bound (${c.run})`,
        text: text("bound"),
        cls: (r) => pill(get(r, "bound")),
        fit: constants.bounds,
      },
      {
        key: "bound_other",
        label: `bound (${c.other})`,
        text: text("bound_other"),
        cls: (r) => pill(get(r, "bound_other")),
        fit: constants.bounds,
      },
      {
        key: "t_expected_s",
        label: "time",
        num: true,
        value: (r) => get(r, "t_expected_s"),
        text: time("t_expected_s"),
        fit: fit(time("t_expected_s")),
      },
      {
        key: "t_expected_s_other",
        label: "time (other)",
        num: true,
        value: (r) => get(r, "t_expected_s_other"),
        text: time("t_expected_s_other"),
        fit: fit(time("t_expected_s_other")),
      },
      {
        key: "delta_s",
        label: "Δ time",
        num: true,
        value: (r) => Math.abs(get(r, "delta_s")),
        text: time("delta_s"),
        fit: fit(time("delta_s")),
      },
      {
        key: "name",
        label: "names",
        width: "minmax(140px, 1fr)",
        text: (r) => [get(r, "name"), get(r, "name_other")].filter(Boolean).join(" → "),
      },
    ],
    {
      height: 260,
      sort: { key: "order", dir: 1 },
      label: "Comparison",
      // Clicking a row shows the op of the current run (if it has one) in the chart and panel.
      onSelect: (r) => {
        const name = get(r, "name");
        const row = name === null ? -1 : (state.model.byName.get(name) ?? -1);
        if (row >= 0) actions.selectOp(row);
      },
    },
  );
  const show = () => {
    state.compareWhich = which.value;
    const keep = {
      changed: (i) => get(i, "change") !== "same",
      flipped: (i) => get(i, "flipped"),
      all: () => true,
    }[which.value];
    const ids = [];
    for (let i = 0; i < c.data.length; i++) if (keep(i)) ids.push(i);
    table.setRows(ids);
    count.textContent = `${ids.length} of ${c.data.length} ops`;
  };
  which.addEventListener("change", show);
  show();
}
