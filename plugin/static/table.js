// A virtualized, sortable table: only the rows in view exist in the DOM, so 20k ops scroll freely.
//
// columns: [{key, label, width (CSS grid track), fit (strings the column must show whole: its
//            width is measured from them and the label), num (right-aligned, numeric sort),
//            value(id) -> sort value, text(id) -> displayed string, tip(id) -> tooltip (default:
//            the text), cls(id) -> extra class, middle (a long text is cut in its middle where
//            the column is too narrow: its end, which tells rows apart, stays; the cell holds
//            the whole text, shown on hover), drop (a column the table may leave out where the
//            columns' least widths do not fit its box: the highest first; the rest always show)}]
// Rows are opaque ids (row indices of the report); the caller supplies the filtered id list.
// Keyboard: the body is focusable; ↑/↓, PgUp/PgDn, Home/End move the selection.

import { el } from "./util.js";

/** Cut overflowing cells in their middle: a cell keeps its whole text (what is read, copied and
 * searched); the browser ends it in "…" before a right padding that shows its tail. Every cell is
 * measured before any is changed (a change between two reads made the browser lay the table out
 * again for each cell). */
function cutMiddle(cells, ctx) {
  const over = cells.filter((cell) => cell.scrollWidth > cell.clientWidth);
  if (!over.length) return;
  const style = getComputedStyle(over[0]); // the table's cells share one font
  ctx.font = `${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
  const cuts = over.map((cell) => {
    const text = cell.textContent;
    const room = 0.45 * cell.clientWidth;
    // the tail: at most 16 characters, 40% of the text, and 45% of the cell
    let n = Math.min(16, Math.floor(text.length * 0.4));
    while (n > 3 && ctx.measureText(text.slice(text.length - n)).width > room) n--;
    const tail = text.slice(text.length - n);
    return [cell, tail, Math.ceil(ctx.measureText(tail).width) + 8];
  });
  for (const [cell, tail, pad] of cuts) {
    cell.dataset.tail = tail;
    cell.style.paddingRight = `${pad}px`;
  }
}

export class VirtualTable {
  constructor(container, columns, { rowHeight = 26, height = 420, onSelect, onActivate, sort, label }) {
    this.rowHeight = rowHeight;
    this.onSelect = onSelect || (() => {});
    // onActivate (optional): a click or Enter on a row; the arrows then only move (onSelect)
    this.onActivate = onActivate || this.onSelect;
    this.sort = sort || { key: columns[0].key, dir: 1 };
    this.ids = [];
    this.position = new Map();
    this.selected = -1;
    this.header = el("div", { className: "hr-row hr-head", attrs: { role: "row" } });
    this.setColumns(columns);
    this.sizer = el("div", { className: "hr-sizer" });
    this.body = el(
      "div",
      {
        className: "hr-body",
        attrs: { role: "rowgroup", tabindex: 0, "aria-label": `${label || "table"} rows: ↑ ↓ select` },
      },
      this.sizer,
    );
    this.body.addEventListener("keydown", (e) => this._onKey(e));
    this.maxHeight = height;
    this.body.style.height = `${height}px`;
    this.root = el(
      "div",
      { className: "hr-table", attrs: { role: "grid", "aria-label": label || "table" } },
      this.header,
      this.body,
    );
    container.append(this.root);
    this._fitColumns(true);
    this.body.addEventListener("scroll", () => this._schedule());
    new ResizeObserver(() => {
      if (this._fitColumns()) this._sort(); // a new header: its sort mark again
      this._schedule();
    }).observe(this.root);
  }

  /** (Re)build the header: reports differ in columns (a measured report adds some). */
  setColumns(columns) {
    this.allColumns = columns;
    this._fitColumns(true);
  }

  /** The columns that fit the table's width: every column's least width (its measured track, or
   * its minmax's minimum) summed; where that is wider than the box, columns with `drop` leave,
   * the highest first, so the others show whole and nothing spills past the page. */
  _fitColumns(force = false) {
    const all = this.allColumns;
    const room = this.root ? this.root.clientWidth : 0;
    const least = (c) => {
      const track = this._track(c);
      const px = /^(?:minmax\()?(\d+(?:\.\d+)?)px/.exec(track);
      return px ? Number(px[1]) : 80;
    };
    let shown = all.slice();
    if (room > 0) {
      const droppable = all.filter((c) => c.drop).sort((a, b) => b.drop - a.drop);
      let width = shown.reduce((sum, c) => sum + least(c), 0);
      for (const c of droppable) {
        if (width <= room) break;
        shown = shown.filter((s) => s !== c);
        width -= least(c);
      }
    }
    const keys = shown.map((c) => c.key).join("\u0000");
    if (!force && keys === this.shownKeys) return false;
    this.shownKeys = keys;
    this._setShown(shown);
    return true;
  }

  _setShown(columns) {
    this.columns = columns;
    this.root?.setAttribute("data-hidden-columns",
      this.allColumns.filter((c) => !columns.includes(c)).map((c) => c.key).join(" "));
    this.template = columns.map((c) => this._track(c)).join(" ");
    this.header.style.gridTemplateColumns = this.template;
    this.header.replaceChildren(
      ...columns.map((c) =>
        el("div", {
          className: `hr-cell${c.num ? " hr-num" : ""}`,
          text: c.label,
          title: c.title || `Sort by ${c.label}`,
          attrs: { role: "columnheader", "data-key": c.key, tabindex: 0 },
          on: {
            click: () => this.sortBy(c.key),
            keydown: (e) => (e.key === "Enter" || e.key === " ") && this.sortBy(c.key),
          },
        }),
      ),
    );
  }

  /** A column's grid track: measured to fit its label (with the sort arrow) and `fit` strings. */
  _track(c) {
    if (!c.fit) return c.width || "minmax(80px, 1fr)";
    if (!VirtualTable._ctx) VirtualTable._ctx = document.createElement("canvas").getContext("2d");
    const ctx = VirtualTable._ctx;
    const style = getComputedStyle(document.body);
    const font = `${style.fontSize} ${style.fontFamily}`;
    ctx.font = `600 ${font}`;
    let widest = ctx.measureText(`${c.label} ▾`).width;
    ctx.font = font;
    const extra = c.cls ? 14 : 0; // a bound pill's dot
    for (const text of c.fit) widest = Math.max(widest, ctx.measureText(String(text)).width + extra);
    return `${Math.ceil(widest) + 16}px`; // + cell padding and rounding
  }

  /** Show these row ids (sorted by the current sort). */
  setRows(ids) {
    this.ids = ids.slice();
    // Short lists get a short table; long ones scroll inside maxHeight.
    const fit = Math.max(3, this.ids.length) * this.rowHeight + 2;
    this.body.style.height = `${Math.min(this.maxHeight, fit)}px`;
    this._sort();
    this.body.scrollTop = 0;
    this.render();
  }

  sortBy(key) {
    // A new numeric column sorts largest first; clicking the sorted column reverses it.
    const numeric = this.columns.find((c) => c.key === key)?.num;
    const dir = this.sort.key === key ? -this.sort.dir : numeric ? -1 : 1;
    this.sort = { key, dir };
    this._sort();
    this.render();
  }

  _sort() {
    const col = this.columns.find((c) => c.key === this.sort.key);
    if (!col) {
      this.position = new Map(this.ids.map((id, pos) => [id, pos]));
      return;
    }
    const dir = this.sort.dir;
    const value = col.value || col.text;
    const keyed = this.ids.map((id) => [value(id), id]);
    const missing = (v) =>
      v === null || v === undefined || (typeof v === "number" && Number.isNaN(v));
    keyed.sort((a, b) => {
      const va = a[0];
      const vb = b[0];
      if (missing(va) || missing(vb)) return missing(va) - missing(vb) || a[1] - b[1];
      if (va < vb) return -dir;
      if (va > vb) return dir;
      return a[1] - b[1];
    });
    this.ids = keyed.map((k) => k[1]);
    this.position = new Map(this.ids.map((id, pos) => [id, pos]));
    for (const cell of this.header.children) {
      const on = cell.dataset.key === this.sort.key;
      cell.classList.toggle("hr-sorted", on);
      cell.setAttribute("aria-sort", on ? (dir > 0 ? "ascending" : "descending") : "none");
    }
  }

  /** Highlight a row and scroll it into view (if it is shown). */
  select(id, scroll = true) {
    this.selected = id;
    const pos = this.position.get(id) ?? -1;
    if (scroll && pos >= 0) {
      const top = pos * this.rowHeight;
      const view = this.body.clientHeight;
      if (top < this.body.scrollTop || top + this.rowHeight > this.body.scrollTop + view) {
        this.body.scrollTop = Math.max(0, top - view / 2);
      }
    }
    this.render();
  }

  has(id) {
    return this.position.has(id);
  }

  _onKey(event) {
    if (!this.ids.length) return;
    const page = Math.max(1, Math.floor(this.body.clientHeight / this.rowHeight) - 1);
    const step = { ArrowDown: 1, ArrowUp: -1, PageDown: page, PageUp: -page }[event.key];
    const pos = this.position.get(this.selected) ?? -1;
    let next;
    if (step !== undefined) next = pos < 0 ? 0 : Math.min(this.ids.length - 1, Math.max(0, pos + step));
    else if (event.key === "Home") next = 0;
    else if (event.key === "End") next = this.ids.length - 1;
    else if (event.key === "Enter" && this.selected >= 0 && this.position.has(this.selected)) {
      event.preventDefault();
      this.onActivate(this.selected);
      return;
    } else return;
    event.preventDefault();
    this.onSelect(this.ids[next]);
  }

  _schedule() {
    if (this._pending) return;
    this._pending = true;
    requestAnimationFrame(() => {
      this._pending = false;
      this.render();
    });
  }

  render() {
    const h = this.rowHeight;
    this.sizer.style.height = `${this.ids.length * h}px`;
    const view = this.body.clientHeight || 420;
    const first = Math.max(0, Math.floor(this.body.scrollTop / h) - 5);
    const last = Math.min(this.ids.length, Math.ceil((this.body.scrollTop + view) / h) + 5);
    const rows = [];
    for (let pos = first; pos < last; pos++) {
      const id = this.ids[pos];
      const row = el("div", {
        className: `hr-row${id === this.selected ? " hr-selected" : ""}`,
        attrs: { role: "row", "aria-selected": String(id === this.selected), "data-row": id },
        on: { click: () => this.onActivate(id) },
      });
      row.style.gridTemplateColumns = this.template;
      row.style.transform = `translateY(${pos * h}px)`;
      row.style.height = `${h}px`;
      for (const c of this.columns) {
        const text = c.text(id);
        const extra = c.cls ? c.cls(id) : "";
        row.append(
          el("div", {
            className: `hr-cell${c.num ? " hr-num" : ""}${c.middle ? " hr-mid" : ""}${extra ? " " + extra : ""}`,
            text,
            title: c.tip ? c.tip(id) : c.num ? null : text,
            attrs: { role: "gridcell", "data-key": c.key },
          }),
        );
      }
      rows.push(row);
    }
    this.sizer.replaceChildren(...rows);
    if (this.columns.some((c) => c.middle)) {
      if (!VirtualTable._ctx) VirtualTable._ctx = document.createElement("canvas").getContext("2d");
      cutMiddle([...this.sizer.querySelectorAll(".hr-mid")], VirtualTable._ctx);
    }
  }
}
