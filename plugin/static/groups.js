// The op table grouped by user line, function or scope (Report.rollup on the server): arrows move
// between groups, Enter or a click opens one; the opened group is a filter with a way back.

import { pill, shortLine } from "./cells.js";
import { actions, constants, state, ui } from "./state.js";
import { VirtualTable } from "./table.js";
import { writeURL } from "./url.js";
import { el, fmtBytes, fmtPct, fmtSI, fmtTime, getJSON, longest, route, setChildren } from "./util.js";

export const UNATTRIBUTED = "(unattributed)"; // the group of ops without one (Report.rollup's name)

/** ``key=value`` (the URL's "in") as a group filter, or null. */
export function parseGroup(text) {
  if (!text) return null;
  const at = text.indexOf("=");
  const key = text.slice(0, at);
  return at > 0 && constants.groupings[key] ? { key, value: text.slice(at + 1) } : null;
}

/** Show the ops one row per group (Report.rollup on the server), or one row per op (""). */
export function setGroupBy(by) {
  state.groupBy = constants.groupings[by] ? by : "";
  ui.groupBy.value = state.groupBy;
  ui.table.root.hidden = Boolean(state.groupBy);
  ui.groupBox.hidden = !state.groupBy;
  writeURL();
  if (state.groupBy) loadGroups();
}

export async function loadGroups() {
  const by = state.groupBy;
  const id = state.requestId;
  ui.groupBox.dataset.state = "loading";
  if (!ui.groupTable) {
    ui.groupTable = new VirtualTable(ui.groupBox, [], {
      onSelect: (row) => ui.groupTable.select(row), // arrows move; Enter or a click opens
      onActivate: (row) => openGroup(row),
      sort: { key: "t_expected_s", dir: -1 },
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
    ui.count.textContent = `cannot group by ${constants.groupings[by]}: ${err.message}`;
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
      label: constants.groupings[by],
      width: "minmax(240px, 3fr)",
      text: by === "scope" ? key : (r) => shortLine(key(r)) || key(r),
      tip: key,
    },
    numeric("ops", "ops", (x) => String(x)),
    ...(idx.t_expected_s === undefined
      ? [numeric("flops", "FLOPs", fmtSI), numeric("bytes_accessed", "bytes", fmtBytes)]
      : [
          numeric("t_expected_s", "time", fmtTime),
          numeric("share", "share", fmtPct),
          { key: "bound", label: "bound", text: (r) => get(r, "bound"), cls: (r) => pill(get(r, "bound")), fit: constants.bounds },
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
export function openGroup(row) {
  const { by, get } = state.groups;
  state.filter.group = { key: by, value: String(get(row, by)) };
  setGroupBy("");
  actions.applyFilter();
  writeURL();
}

export function showGroupFilter() {
  const group = state.filter.group;
  ui.groupFilter.hidden = !group;
  if (!group) return;
  setChildren(
    ui.groupFilter,
    `${constants.groupings[group.key] || group.key}: `,
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
          actions.applyFilter();
          writeURL();
        },
      },
    }),
  );
}
