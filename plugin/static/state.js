// The tab's state: the report shown (Model), what is chosen (state) and the page's elements (ui).
// Every other module reads and writes them here; no module keeps state of its own.

import { longest } from "./util.js";

/** One report payload ({columns, data, summary, ...}) with column access by name. */
export class Model {
  constructor(payload) {
    this.payload = payload;
    this.columns = payload.columns || [];
    this.index = Object.fromEntries(this.columns.map((c, i) => [c, i]));
    // Rows as written ("data"), or a re-judged report's columns ("cols"), turned into rows here.
    this.rows = payload.data || (payload.cols ? rowsOf(payload.cols) : []);
    this.summary = payload.summary || {};
    this.module = payload.module || "";
    this.memoryWords = payload.memory_words || null; // the memory fit in the server's words
    this.stacks = payload.call_stacks || []; // the call_stack column indexes this list
    // Columns the server derives for the tab (each op's scope, user function), sent beside the
    // report's own: added as columns.
    for (const [column, values] of Object.entries(payload.derived || {})) {
      if (column in this.index || !Array.isArray(values) || values.length !== this.rows.length) continue;
      this.index[column] = this.columns.length;
      this.columns.push(column);
      for (let i = 0; i < this.rows.length; i++) this.rows[i].push(values[i]);
    }
    this._search = null; // made on first use (see search), not before the first paint
    const name = this.index.name;
    this.byName = new Map(this.rows.map((r, i) => [r[name], i]));
  }

  /** Each row's searchable text, lower case: made once, when first searched or when the page
   * is idle after drawing (see loadReport), never in the way of the first paint. */
  get search() {
    if (this._search === null) {
      const fields = ["name", "op_name", "source", "user_source", "opcode", "hint", "fused_ops", "bound"]
        .map((c) => this.index[c])
        .filter((i) => i !== undefined);
      this._search = this.rows.map((r) =>
        fields
          .map((i) => r[i] ?? "")
          .join("\n")
          .toLowerCase(),
      );
    }
    return this._search;
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

/** Rows from one array per column. */
function rowsOf(cols) {
  const n = cols.length ? cols[0].length : 0;
  const rows = new Array(n);
  for (let i = 0; i < n; i++) {
    const row = new Array(cols.length);
    for (let j = 0; j < cols.length; j++) row[j] = cols[j][i];
    rows[i] = row;
  }
  return rows;
}

export const state = {
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

export const ui = {};

/** The longest texts a column shows over the report's rows (its width is measured from them). */
export function fitOf(format) {
  const m = state.model;
  if (!m) return [];
  return longest(m.rows.map((_, i) => format(i)));
}
