// The URL: the tab's state in TensorBoard's hash (p.hlo_roofline.<key>) or its own query, and
// TensorBoard's plugin channel (reload, runs changed).

import { state } from "./state.js";

export const PLUGIN = "hlo_roofline";
export const URL_KEYS = ["run", "chip", "other", "op", "bound", "opcode", "q", "all", "by", "in"];

/** TensorBoard's window when the tab is in its iframe (same origin), else null. */
export function hostWindow() {
  try {
    if (window.parent !== window && window.parent.location.href) return window.parent;
  } catch {
    // another origin: no host access
  }
  return null;
}

export function parseHash(hash) {
  const parts = hash.replace(/^#/, "").split("&");
  const tab = parts[0].includes("=") ? "" : parts.shift();
  const pairs = parts
    .filter((p) => p.includes("="))
    .map((p) => p.split("=").map((x) => decodeURIComponent(x)));
  return { tab, pairs };
}

// state.hashKeys: the tab's keys in the host's hash as this tab last read or wrote them; keys
// that differ from these were written by someone else (a link opened, the back button), not to be
// overwritten.

/** The tab's own keys of a host hash, as one string that compares whatever their order. */
function ownKeys(hash) {
  const prefix = `p.${PLUGIN}.`;
  return parseHash(hash)
    .pairs.filter(([k]) => k.startsWith(prefix))
    .map(([k, v]) => `${k}=${v}`)
    .sort()
    .join("&");
}

export function readURL() {
  const host = hostWindow();
  const values = {};
  if (host) {
    const prefix = `p.${PLUGIN}.`;
    for (const [k, v] of parseHash(host.location.hash).pairs)
      if (k.startsWith(prefix)) values[k.slice(prefix.length)] = v;
    state.hashKeys = ownKeys(host.location.hash);
  }
  // Opened on its own (data/plugin_entry.html?name=hlo_roofline&run=...): its own query.
  const own = new URLSearchParams(window.location.search);
  for (const k of URL_KEYS) if (!(k in values) && own.has(k)) values[k] = own.get(k);
  return values;
}

export function urlValues() {
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
export function writeURL() {
  clearTimeout(state.urlTimer);
  state.urlTimer = setTimeout(writeURLNow, 100);
}

/** Put the tab's state in the URL (replacing the entry: no history step per click). */
export function writeURLNow() {
  const values = urlValues();
  const host = hostWindow();
  if (host) {
    const { tab, pairs } = parseHash(host.location.hash);
    if (tab !== PLUGIN) return; // another tab is showing: leave its URL alone
    const theirs = ownKeys(host.location.hash);
    // Another view of this tab was put in the URL since this tab last wrote it (its hashchange
    // event may not have run yet): that view is shown next, its keys are not overwritten.
    if (theirs && theirs !== state.hashKeys) return;
    const prefix = `p.${PLUGIN}.`;
    const kept = pairs.filter(([k]) => !k.startsWith(prefix));
    for (const k of URL_KEYS) if (values[k]) kept.push([prefix + k, values[k]]);
    const hash = [tab, ...kept.map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`)];
    const url = new URL(host.location.href);
    url.hash = hash.join("&");
    if (url.href !== host.location.href) host.history.replaceState(host.history.state, "", url.href);
    state.hashKeys = ownKeys(url.hash);
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
export function connectHost(onReload) {
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

/** Keep the host's URL and the view together: a hash that names another view of this tab calls
 * ``onNavigate`` with its values; coming back to the tab (TensorBoard drops the tab's keys when
 * another tab shows) puts the tab's state back in the URL. */
export function watchHost(onNavigate) {
  const host = hostWindow();
  if (!host) return;
  host.addEventListener("hashchange", () => {
    const { tab, pairs } = parseHash(host.location.hash);
    if (tab !== PLUGIN) return;
    const prefix = `p.${PLUGIN}.`;
    if (!pairs.some(([k]) => k.startsWith(prefix))) {
      writeURLNow();
      return;
    }
    const wanted = readURL();
    const now = urlValues();
    if (URL_KEYS.some((k) => (wanted[k] || "") !== (now[k] || ""))) onNavigate(wanted);
  });
}
