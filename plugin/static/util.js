// Small helpers shared by the HLO Roofline tab: safe DOM building, number formatting, fetching.
//
// Every string that comes from a report (op names, metadata, source paths) reaches the page through
// textContent or an attribute value set with setAttribute: never parsed as markup.

/**
 * Create an element. `props`: className, text (textContent), title, attrs {name: value},
 * dataset {key: value}, on {event: handler}. Children: nodes or strings (added as text nodes).
 */
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  if (props.className) node.className = props.className;
  if (props.text !== undefined && props.text !== null) node.textContent = String(props.text);
  if (props.title !== undefined && props.title !== null) node.title = String(props.title);
  for (const [name, value] of Object.entries(props.attrs || {})) {
    if (value !== undefined && value !== null && value !== false) {
      node.setAttribute(name, value === true ? "" : String(value));
    }
  }
  for (const [key, value] of Object.entries(props.dataset || {})) node.dataset[key] = String(value);
  for (const [event, handler] of Object.entries(props.on || {}))
    node.addEventListener(event, handler);
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** Replace all children of `node`. */
export function setChildren(node, ...children) {
  node.replaceChildren(...children.filter((c) => c !== null && c !== undefined && c !== false));
}

/** An <option>, its label set as text. */
export function option(value, label, selected = false) {
  const node = el("option", { text: label, attrs: { value } });
  node.selected = selected;
  return node;
}

const SI = [
  [1e18, "E"],
  [1e15, "P"],
  [1e12, "T"],
  [1e9, "G"],
  [1e6, "M"],
  [1e3, "k"],
];

function isNum(x) {
  return typeof x === "number" && Number.isFinite(x);
}

/** 1.97e14 -> "197 T" (3 significant digits), with an optional unit appended. */
export function fmtSI(x, unit = "") {
  if (!isNum(x)) return "–";
  const sign = x < 0 ? "-" : "";
  const a = Math.abs(x);
  for (const [scale, prefix] of SI) {
    if (a >= scale) return `${sign}${fmt3(a / scale)} ${prefix}${unit}`;
  }
  if (a === 0) return `0${unit ? " " + unit : ""}`;
  if (a < 1e-3) return `${sign}${a.toExponential(2)}${unit ? " " + unit : ""}`;
  return `${sign}${fmt3(a)}${unit ? " " + unit : ""}`;
}

function fmt3(a) {
  if (a < 1) return String(Number(a.toPrecision(3))); // 0.00123, never "0.00"
  return a >= 100 ? a.toFixed(0) : a >= 10 ? a.toFixed(1) : a.toFixed(2);
}

/** Seconds -> "12.3 µs", "4.56 ms", "1.20 s". */
export function fmtTime(s) {
  if (!isNum(s)) return "–";
  const sign = s < 0 ? "-" : "";
  const a = Math.abs(s);
  if (a === 0) return "0";
  if (a >= 1) return `${sign}${fmt3(a)} s`;
  if (a >= 1e-3) return `${sign}${fmt3(a * 1e3)} ms`;
  if (a >= 1e-6) return `${sign}${fmt3(a * 1e6)} µs`;
  if (a >= 1e-9) return `${sign}${fmt3(a * 1e9)} ns`;
  return `${sign}${fmt3(a * 1e12)} ps`;
}

export function fmtBytes(b) {
  return fmtSI(b, "B");
}

export function fmtPct(f, digits = 1) {
  return isNum(f) ? `${(f * 100).toFixed(digits)}%` : "–";
}

export function fmtNum(x) {
  if (!isNum(x)) return "–";
  return Number.isInteger(x) ? String(x) : x.toPrecision(4);
}

/** A relative URL (resolved against the plugin's base URL, so --path_prefix works). */
export function route(path, params = {}) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") query.set(key, value);
  }
  const text = query.toString();
  return text ? `./${path}?${text}` : `./${path}`;
}

/** GET JSON; throw an Error carrying the server's {"error": ...} message if any. */
export async function getJSON(url, signal) {
  return (await getJSONText(url, signal)).body;
}

/** GET JSON as {body, text} (the text tells a reload whether anything changed). */
export async function getJSONText(url, signal) {
  const response = await fetch(url, { signal, credentials: "same-origin", cache: "no-store" });
  const text = await response.text();
  let body;
  try {
    body = JSON.parse(text);
  } catch {
    throw Object.assign(new Error(`${response.status} ${response.statusText}: not JSON`), {
      status: response.status,
    });
  }
  if (!response.ok) {
    const message = body && body.error ? body.error : `${response.status} ${response.statusText}`;
    throw Object.assign(new Error(message), { status: response.status });
  }
  return { body, text };
}

/** The `n` longest strings (what a column must fit). */
export function longest(strings, n = 3) {
  const top = [];
  for (const s of strings) {
    if (top.length < n) top.push(s);
    else {
      let k = 0;
      for (let i = 1; i < n; i++) if (top[i].length < top[k].length) k = i;
      if (s.length > top[k].length) top[k] = s;
    }
  }
  return top;
}
