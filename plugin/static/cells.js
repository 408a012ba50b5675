// Table cells shared by the op, group and comparison tables.

/** Table cell class for a bound ("" when the op has none, e.g. only in one compared run). */
export function pill(bound) {
  return bound ? `hr-pill hr-bound-${bound}` : "";
}

/** ``file.py:line (function)`` of a user line (its directories are in the cell's tooltip). */
export function shortLine(where) {
  return where ? String(where).replace(/^.*[\\/](?=[^\\/]*:\d+)/, "") : "";
}
