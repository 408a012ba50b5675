// The comparison with another run: hlo_roofline.diff.compare on the server, as `hlo-roofline diff`
// prints it.

import { pill } from "./cells.js";
import { selectOp } from "./index.js";
import { state, ui } from "./state.js";
import { VirtualTable } from "./table.js";
import { BOUNDS, el, fmtPct, fmtTime, getJSON, longest, route, setChildren } from "./util.js";

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
  const head = el(
    "div",
    { className: "hr-compare-head" },
    el("h3", { text: `${c.run} → ${c.other}` }),
    el("div", {
      text:
        `step ≥ ${fmtTime(a.step_time_serial_s)} (${a.chip || "no chip"}) → ` +
        `${fmtTime(b.step_time_serial_s)} (${b.chip || "no chip"})` +
        delta(a.step_time_serial_s, b.step_time_serial_s),
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
