// The selected op's details: every number the server computed for it, its roof named, its call
// stack with the user's line marked. No arithmetic on the model here.

import { constants, state, ui } from "./state.js";
import { el, fmtBytes, fmtNum, fmtPct, fmtSI, fmtTime, setChildren } from "./util.js";

/** The roof the op's predicted point lies on, in the server's numbers (verdict.classify's
 * roof columns): the unit and what it is, the compute roof, the memory roof. No arithmetic here. */
export function roofText(g) {
  const unit = g("roof_unit");
  if (!unit) return "";
  const parts = [`${unit}: ${constants.roofUnits[unit] || unit}`];
  if (g("roof_flops_per_s") > 0) parts.push(`compute roof ${fmtSI(g("roof_flops_per_s"), "FLOP/s")}`);
  if (g("roof_bytes_per_s") > 0) parts.push(`memory roof ${fmtSI(g("roof_bytes_per_s"), "B/s")}`);
  return parts.join(" · ");
}

/** Why a measured op sits where it does, where the join found a problem. */
export function measuredText(g) {
  const e = g("efficiency");
  const problem = state.model.has("measurement_problem") ? g("measurement_problem") : "";
  if (problem) return `${fmtPct(e)} (${problem})`;
  return fmtPct(e);
}

export function renderDetails() {
  const m = state.model;
  const row = state.selected;
  if (!m || row < 0) {
    setChildren(
      ui.details,
      el("p", {
        className: "hr-muted",
        text: "Click a point or a row to see the op (or focus the chart or the table and use the arrow keys).",
      }),
    );
    return;
  }
  const g = (c) => m.get(row, c);
  const entries = [
    ["opcode", g("opcode")],
    ["bound", g("bound")],
    ["computation", g("computation")],
    ["fusion kind", g("fusion_kind")],
    ["dtype", g("dtype")],
    ...(m.has("precision") && g("precision") ? [["precision", g("precision")]] : []),
    ["shape", g("shape")],
    ["count per step", fmtNum(g("count"))],
    ["FLOPs", fmtSI(g("flops"))],
    ["transcendentals", g("transcendentals") ? fmtSI(g("transcendentals")) : ""],
    ["bytes", fmtBytes(g("bytes_accessed"))],
    ["of them in VMEM", g("vmem_bytes") ? fmtBytes(g("vmem_bytes")) : ""],
    ["comm bytes", g("comm_bytes") ? fmtBytes(g("comm_bytes")) : ""],
    ["intensity", g("intensity") > 0 ? `${fmtSI(g("intensity"))} FLOP/B` : "no FLOPs"],
    ["roof", m.has("roof_unit") ? roofText(g) : ""],
    ["ridge", g("critical_intensity") > 0 ? `${fmtSI(g("critical_intensity"))} FLOP/B` : ""],
    ["compute unit", m.has("compute_unit") ? g("compute_unit") : ""],
    ["t compute", fmtTime(g("t_compute_s"))],
    ["t memory", fmtTime(g("t_memory_s"))],
    ["t comm", fmtTime(g("t_comm_s"))],
    ["time ≥ (bound)", m.has("t_bound_s") ? fmtTime(g("t_bound_s")) : ""],
    ["time ≈ (expected)", fmtTime(g("t_expected_s"))],
    ["expected by", m.has("expected_by") ? g("expected_by") : ""],
    ["exposed", m.has("t_exposed_s") && g("t_exposed_s") > 0 ? `${fmtTime(g("t_exposed_s"))} the stream waited for its transfer` : ""],
    ["XLA's estimate", m.has("xla_estimate_s") && g("xla_estimate_s") > 0 ? fmtTime(g("xla_estimate_s")) : ""],
    ["XLA's gap", m.has("xla_gap") ? g("xla_gap") : ""],
    ["share", fmtPct(g("share"))],
    ...(m.has("measured_s")
      ? [
          ["measured", fmtTime(g("measured_s"))],
          ["efficiency", measuredText(g)],
          ["achieved FLOP/s", fmtSI(g("achieved_flops_per_s"))],
          ["achieved bytes/s", fmtSI(g("achieved_bytes_per_s"))],
        ]
      : []),
    ["op_name", g("op_name")],
    ["user line", g("user_source")],
    ["source", g("source")],
    ["hint", g("hint")],
    // the hint's fields (reports written before them lack the columns)
    ["hint reason", m.has("hint_reason") ? g("hint_reason") : ""],
    ["ridge M", m.has("ridge_m") && g("ridge_m") != null ? fmtNum(Math.round(g("ridge_m"))) : ""],
    ["ridge K", m.has("ridge_k") && g("ridge_k") != null ? fmtNum(Math.round(g("ridge_k"))) : ""],
    ["MXU padding waste", m.has("mxu_waste") && g("mxu_waste") > 0 ? fmtPct(g("mxu_waste")) : ""],
    ["note", g("note")],
  ];
  const dl = el("dl", { className: "hr-dl" });
  for (const [k, v] of entries) {
    if (v === "" || v === null || v === undefined) continue;
    dl.append(el("dt", { text: k }), el("dd", { text: v, dataset: { field: k } }));
  }
  const fused = g("fused_ops");
  const stack = m.stacks[g("call_stack")] || "";
  setChildren(
    ui.details,
    el("h3", { className: "hr-op-name", text: g("name") }),
    dl,
    fused ? el("h4", { text: "fused ops" }) : null,
    fused ? el("pre", { className: "hr-fused", text: fused }) : null,
    stack ? el("h4", { text: "call stack (innermost first; the user's line marked)" }) : null,
    stack ? callStack(stack.split("\n"), g("user_source")) : null,
  );
}

/** The Python frames an op was traced in, innermost first; the user's own line stands out. */
export function callStack(frames, userLine) {
  return el(
    "ol",
    { className: "hr-stack", attrs: { id: "hr-stack" } },
    ...frames.map((frame) =>
      el("li", {
        text: frame,
        className: frame === userLine ? "hr-user-frame" : "",
        attrs: { "aria-current": frame === userLine ? "true" : null },
      }),
    ),
  );
}
