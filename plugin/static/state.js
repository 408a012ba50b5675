// The tab's state: the report shown (Model), what is chosen (state) and the page's elements (ui).
// Every other module reads and writes them here; no module keeps state of its own.

import { getJSON, longest, route } from "./util.js";

/** One report payload ({columns, data, summary, ...}) with column access by name. `base`: the
 * run's report as written, which a re-judged payload that names the columns it left out
 * (`same`: the chip did not change them) takes them from, with its derived columns. */
export class Model {
  constructor(payload, base = null) {
    this.payload = payload;
    this.columns = payload.columns || [];
    this.index = Object.fromEntries(this.columns.map((c, i) => [c, i]));
    let derived = payload.derived || {};
    let cols = payload.cols ? payload.cols.map(decode) : payload.cols;
    this.stacks = payload.call_stacks || []; // the call_stack column indexes this list
    this.derived = []; // the columns the server derived for the tab (added at the rows' end)
    let rows = null;
    this.fits = new Map(); // column -> the longest texts it shows (see fitOf)
    if (payload.same && base) {
      const same = new Set(payload.same);
      for (const [key, fit] of base.fits) if (same.has(key)) this.fits.set(key, fit);
      if (same.has("call_stack")) this.stacks = base.stacks;
      const sent = cols;
      let k = 0;
      const aligned =
        base.columns.length === this.columns.length + base.derived.length &&
        this.columns.every((c, j) => base.columns[j] === c);
      if (aligned) {
        // the run's rows (its derived columns at their end), with what the chip changed
        rows = base.rows.map((r) => r.slice());
        this.columns.forEach((c, j) => {
          if (same.has(c)) return;
          const values = sent[k++];
          for (let i = 0; i < rows.length; i++) rows[i][j] = values[i];
        });
        for (const c of base.derived) {
          this.index[c] = this.columns.length;
          this.columns.push(c);
          this.derived.push(c);
        }
      } else {
        cols = this.columns.map((c) => (same.has(c) ? base.column(c) : sent[k++]));
        derived = Object.fromEntries(base.derived.map((c) => [c, base.column(c)]));
      }
    }
    // Rows as written ("data"), or a re-judged report's columns ("cols"), turned into rows here.
    this.rows = rows || payload.data || (cols ? rowsOf(cols) : []);
    this.summary = payload.summary || {};
    this.module = payload.module || "";
    this.memoryWords = payload.memory_words || null; // the memory fit in the server's words
    this.stamp = payload.stamp || null; // the version of the file a report as written is
    // Columns the server derives for the tab (each op's scope, user function), sent beside the
    // report's own: added as columns.
    for (const [column, values] of Object.entries(derived)) {
      if (column in this.index || !Array.isArray(values) || values.length !== this.rows.length) continue;
      this.index[column] = this.columns.length;
      this.columns.push(column);
      this.derived.push(column);
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

  /** One column's values, in row order. */
  column(name) {
    const i = this.index[name];
    return this.rows.map((r) => r[i]);
  }

  /** Distinct values of a text column. */
  distinct(column) {
    const i = this.index[column];
    return i === undefined ? [] : [...new Set(this.rows.map((r) => String(r[i] ?? "")))];
  }
}

/** A column as sent: an array, or a float column's little-endian doubles in base64
 * ({f64}), read back as numbers with NaN and ±inf as null (as JSON has them). */
function decode(values) {
  if (Array.isArray(values) || !values || typeof values.f64 !== "string") return values;
  let bytes;
  if (Uint8Array.fromBase64) bytes = Uint8Array.fromBase64(values.f64);
  else {
    const text = atob(values.f64);
    bytes = new Uint8Array(text.length);
    for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
  }
  const out = new Array(bytes.length / 8);
  if (LITTLE_ENDIAN) {
    const doubles = new Float64Array(bytes.buffer, bytes.byteOffset, out.length);
    for (let i = 0; i < out.length; i++) out[i] = Number.isFinite(doubles[i]) ? doubles[i] : null;
    return out;
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset);
  for (let i = 0; i < out.length; i++) {
    const v = view.getFloat64(8 * i, true);
    out[i] = Number.isFinite(v) ? v : null;
  }
  return out;
}

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1; // this machine's order

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

// Constants the server owns (GET constants: the bounds and their palette, shared with the PNG/SVG
// plot; the groupings; the memory-fit colours; what each roof unit means). Filled by
// loadConstants() before anything is drawn.
export const constants = { bounds: [], boundColors: {}, groupings: {}, fitColors: {}, roofUnits: {} };

export async function loadConstants() {
  const c = await getJSON(route("constants"));
  constants.bounds = c.bounds;
  constants.boundColors = c.bound_colors;
  constants.groupings = c.groupings;
  constants.fitColors = c.fit_colors;
  constants.roofUnits = c.roof_units;
  const root = document.documentElement.style;
  for (const [bound, color] of Object.entries(constants.boundColors)) root.setProperty(`--hr-${bound}`, color);
  for (const [fit, color] of Object.entries(constants.fitColors))
    root.setProperty(`--hr-fit-${fit.replace(/[ _]/g, "-")}`, color);
}

export const state = {
  runs: [], // runs whose report loads
  errors: {}, // run -> why it cannot be shown
  run: null,
  chip: "", // "" = the chip the report was written for
  chips: [],
  model: null,
  written: null, // the shown run's report as written ({run, model}): what a chip's answer builds on
  reportText: "",
  selected: -1,
  filter: { bound: "", opcode: "", text: "", timedOnly: true, group: null }, // group: {key, value}
  groupBy: "", // "" (one row per op) or a key of constants.groupings
  other: "",
  compare: null,
  compareWhich: "changed", // the compare view's rows: "changed" (as the CLI lists), "flipped" or "all"
  requestId: 0,
  pendingOp: null, // an op named by the URL, selected once its report is shown
  hashKeys: "", // the tab's keys in the host's hash as url.js last read or wrote them
};

export const ui = {};

// What the views call on the page (index.js sets them as it starts): a view never imports the
// page, so the modules' imports have no cycle (tests/test_layering.py checks).
export const actions = {
  /** Select an op (a row of the run's report) everywhere it shows. */
  selectOp: (_row) => {},
  /** Filter the op table and the chart by state.filter. */
  applyFilter: () => {},
};

/** The longest texts column `key` shows over the report's rows (its width is measured from
 * them): made once per report, and a chip's report takes the run's for the columns it left. */
export function fitOf(key, format) {
  const m = state.model;
  if (!m) return [];
  if (!m.fits.has(key)) m.fits.set(key, longest(m.rows.map((_, i) => format(i))));
  return m.fits.get(key);
}
