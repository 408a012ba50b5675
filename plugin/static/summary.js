// The summary header: step time range, MFU, the step as scheduled, time per bound, the per-op
// floor's share, coverage, HBM per device, the measured step and its XProf link.

import { constants, state, ui } from "./state.js";
import { el, fmtBytes, fmtPct, fmtSI, fmtTime, getJSON, route, setChildren } from "./util.js";

/** In a measured run, a link to the XProf session its trace was captured in. */
export async function linkTrace(id) {
  const box = ui.summary.querySelector("[data-card=measured] .hr-card-sub");
  if (!box) return;
  let where;
  try {
    where = await getJSON(route("trace", { run: state.run }));
  } catch {
    return;
  }
  if (id !== state.requestId) return;
  const link = where.run
    ? el("a", {
        className: "hr-xprof",
        text: "open its trace in XProf ↗",
        attrs: {
          id: "hr-xprof",
          href: route("../profile/index.html", { run: where.run, tool: "trace_viewer", host: where.host }),
          target: "_blank",
          rel: "noopener",
          title: `XProf session ${where.run}`,
        },
      })
    : el("span", {
        className: "hr-muted",
        text: `trace ${where.recorded} (not under this logdir)`,
        attrs: { id: "hr-xprof" },
      });
  box.append(el("br"), link);
}

export function renderSummary() {
  const m = state.model;
  const s = m.summary;
  const card = (label, value, sub, key) =>
    el(
      "div",
      { className: "hr-card", dataset: key ? { card: key } : {} },
      el("div", { className: "hr-card-label", text: label }),
      el("div", { className: "hr-card-value", text: value }),
      sub ? el("div", { className: "hr-card-sub", text: sub }) : null,
    );
  const share = s.time_share || {};
  const bar = el("div", { className: "hr-sharebar", attrs: { "aria-label": "time per bound" } });
  const legend = el("div", { className: "hr-card-sub" });
  for (const b of constants.bounds) {
    const f = share[b];
    if (!(f > 0)) continue;
    const seg = el("span", { className: `hr-bound-${b}`, title: `${b}: ${fmtPct(f)}` });
    seg.style.width = `${Math.max(0.5, f * 100)}%`;
    bar.append(seg);
    legend.append(
      el(
        "span",
        { className: "hr-legend-item" },
        el("span", { className: `hr-swatch hr-bound-${b}` }),
        `${b} ${fmtPct(f)}`,
      ),
    );
  }
  const classified = s.step_time_serial_s !== undefined && s.step_time_serial_s !== null;
  const timeBox = el(
    "div",
    { className: "hr-card hr-card-wide" },
    el("div", { className: "hr-card-label", text: "time per bound" }),
    bar,
    legend,
  );
  const unknown = Array.isArray(s.unknown_ops) ? s.unknown_ops.length : 0;
  setChildren(
    ui.summary,
    card(
      "step bound",
      classified
        ? `≥ ${fmtTime(s.step_bound_s ?? s.step_time_min_s ?? s.step_time_serial_s)}`
        : "not classified",
      classified
        ? "no run is faster: every unit, memory and link busy for its ops at the hardware's " +
            "published rates (no calibration, no schedule)"
        : "choose a chip above",
      "range",
    ),
    card(
      "MFU",
      `≤ ${fmtPct(s.mfu_upper_bound)}` +
        (typeof s.mfu_expected === "number" ? `, expected ${fmtPct(s.mfu_expected)}` : ""),
      s.chip_name || s.chip || "",
    ),
    classified && s.step_expected_s !== undefined && s.step_expected_s !== null
      ? card(
          "step expected, as scheduled",
          fmtTime(s.step_expected_s),
          (s.comm_time_s
            ? `communication ${fmtTime(s.comm_time_s)}, exposed ${fmtTime(s.exposed_comm_s)} ` +
              `(${fmtPct(s.exposed_comm_share)} of the step)`
            : "no communication") +
            (s.host_dispatch_s ? `; host dispatch ${fmtTime(s.host_dispatch_s)} a step` : ""),
          "scheduled",
        )
      : null,
    classified ? timeBox : null,
    classified && typeof s.floor_share === "number"
      ? card(
          "held at the per-op floor",
          fmtPct(s.floor_share),
          s.floor_share > 0
            ? "of the ops' expected time is ops whose work takes less than the chip's per-op floor"
            : "no op is held at the per-op floor",
          "floor",
        )
      : null,
    card(
      "coverage",
      fmtPct(s.coverage),
      unknown ? `${unknown} op(s) not priced` : "every op priced",
    ),
    card(
      "FLOPs / bytes",
      `${fmtSI(s.flops)} / ${fmtBytes(s.bytes_accessed)}`,
      s.comm_bytes ? `comm ${fmtBytes(s.comm_bytes)}` : null,
    ),
    s.measured_step_s
      ? card(
          "measured step",
          fmtTime(s.measured_step_s),
          `per-op times cover ${fmtPct(s.measured_coverage)}` +
            (s.measured_overlap ? " · ops overlapped in the trace (their times sum past the step)" : ""),
          "measured",
        )
      : null,
    memoryCard(s, m.memoryWords),
    card(
      "module",
      m.module || "–",
      `${m.rows.length} ops${s.cost_model ? ` · ${s.cost_model} model` : ""}`,
    ),
  );
}

/** The third roofline: the step's HBM need per device as a bar against one device's HBM.
 * ``words``: the server's wording of the fit (the payload's memory_words, sent with every fit). */
export function memoryCard(s, words) {
  const mem = s.memory;
  if (!mem) return null;
  const fit = s.memory_fit;
  const box = el(
    "div",
    { className: "hr-card hr-card-wide", dataset: { card: "memory" } },
    el("div", { className: "hr-card-label", text: "HBM per device" }),
  );
  if (!fit) {
    box.append(
      el("div", {
        className: "hr-card-value",
        text: `${mem.complete ? "" : "≥ "}${fmtBytes(mem.need_bytes)}`,
      }),
      el("div", { className: "hr-card-sub", text: "choose a chip to see whether it fits" }),
    );
    return box;
  }
  const used = fit.used_fraction;
  const code = words.code;
  const bar = el("div", {
    className: "hr-sharebar hr-membar",
    attrs: { role: "meter", "aria-label": "HBM used", "aria-valuenow": String(used) },
  });
  const seg = el("span", {
    className: `hr-fit-${code.replace(/[ _]/g, "-")}`,
    title: `${fmtBytes(fit.need_bytes)} of ${fmtBytes(fit.capacity_bytes)}`,
  });
  seg.style.width = `${Math.min(100, Math.max(0.5, used * 100))}%`;
  bar.append(seg);
  const source = {
    "compiler error": " · the compiler refused the program",
    hlo: " · temporaries unknown (HLO text only)",
  }[mem.source] || "";
  box.append(
    el("div", {
      className: "hr-card-value",
      text: `${fmtBytes(fit.need_bytes)} of ${fmtBytes(fit.capacity_bytes)} (${fmtPct(used)}): ${words.verdict}`,
    }),
    bar,
    el("div", { className: "hr-card-sub", text: `per device${source}` }),
  );
  if (code === "does_not_fit" || code === "tight") {
    const largest = (mem.largest || [])
      .slice(0, 3)
      .map((b) => `${b.name} ${fmtBytes(b.bytes)}`)
      .join(", ");
    if (largest) box.append(el("div", { className: "hr-card-sub", text: `largest: ${largest}` }));
    for (const advice of words.advice) {
      box.append(el("div", { className: "hr-card-sub", text: `try: ${advice}` }));
    }
  }
  return box;
}
