// stepbill's page: controls → URL → /api/view and /api/recompute → charts. Every number opens its derivation.
"use strict";

const $ = sel => document.querySelector(sel);
const GIB = 2 ** 30, MIB = 2 ** 20, TIB = 2 ** 40;
const SHARED = ["seq", "micro-batch", "recipe", "convention", "attention"];  // options both routes read
const CONFIG_KEY = "stepbill.config";
let choices = null, defaults = {}, inflight = null, renders = 0;
let lastBill = null;  // the bill drawn last: the planner takes its GPU count and tokens per step
let planImpl = null;  // the optimizer implementation the last plan assumed (fused Adam / AdamW): a loaded row keeps it
let config = null;  // {text, name}: a pasted or uploaded config.json, sent as content (never a path)
const labCache = new Map();

// ---------- formatting (binary memory units, decimal FLOPs) ----------
function fmtBytes(b) {
  const a = Math.abs(b);
  if (a >= TIB) return `${(b / TIB).toFixed(2)} TiB`;
  if (a >= GIB) return `${(b / GIB).toFixed(2)} GiB`;
  if (a >= MIB) return `${(b / MIB).toFixed(1)} MiB`;
  return `${Math.round(b).toLocaleString("en-US")} B`;
}
function fmtAxisBytes(b) { return b === 0 ? "0" : b >= TIB ? `${+(b / TIB).toFixed(2)} TiB` : `${+(b / GIB).toFixed(1)} GiB`; }
function fmtFlops(f) {
  if (Math.abs(f) >= 1e15) return `${(f / 1e15).toFixed(2)} PFLOP`;
  if (Math.abs(f) >= 1e12) return `${(f / 1e12).toFixed(2)} TFLOP`;
  return `${(f / 1e9).toFixed(2)} GFLOP`;
}
function fmtCount(n) {
  if (Math.abs(n) >= 1e9) return `${(n / 1e9).toFixed(2)}B`;
  if (Math.abs(n) >= 1e6) return `${(n / 1e6).toFixed(2)}M`;
  return Math.round(n).toLocaleString("en-US");
}
function fmtSeconds(s) { return s >= 1 ? `${s.toFixed(3)} s` : `${(s * 1e3).toFixed(2)} ms`; }
function fmtValue(value, unit) {
  if (typeof value !== "number") return String(value);
  switch (unit) {
    case "bytes": return fmtBytes(value);
    case "FLOPs": return fmtFlops(value);
    case "params": return fmtCount(value);
    case "s": return fmtSeconds(value);
    case "1": return value <= 1.5 ? `${(100 * value).toFixed(1)} %` : value.toFixed(3);
    case "cards": return `${value.toLocaleString("en-US")} cards`;
    default: return `${Number(value.toPrecision(4)).toLocaleString("en-US")} ${unit || ""}`.trim();
  }
}
function fmtInput(v) {
  if (typeof v === "number") return Number.isInteger(v) ? v.toLocaleString("en-US") : String(Number(v.toPrecision(6)));
  return typeof v === "object" ? JSON.stringify(v) : String(v);
}

// ---------- the derivation panel ----------
function explain(line) {
  $("#explain-name").textContent = line.name;
  const unit = line.unit && line.unit !== "1" ? ` ${line.unit}` : "";
  $("#explain-value").textContent = `${fmtValue(line.value, line.unit)}  (${fmtInput(line.value)}${unit})`;
  $("#explain-formula").textContent = line.formula || "—";
  $("#explain-filled").textContent = line.explain || line.formula || "—";
  const table = $("#explain-inputs");
  table.replaceChildren();
  for (const [k, v] of Object.entries(line.inputs || {})) {
    const tr = table.insertRow();
    tr.insertCell().textContent = k;
    tr.insertCell().textContent = fmtInput(v);
  }
  if (!Object.keys(line.inputs || {}).length) table.insertRow().insertCell().textContent = "—";
  $("#explain-provenance").textContent = line.provenance || "derived";
  $("#explain-convention").textContent = line.convention || "—";
  $("#explain").hidden = false;
}

function number(text, line, testid) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = "num";
  b.textContent = text;
  b.title = "click: formula, inputs, provenance";
  if (testid) b.dataset.testid = testid;
  b.addEventListener("click", () => explain(line));
  return b;
}

// ---------- state: controls ⇄ URL ----------
function controls() { return [...document.querySelectorAll("#controls [name], .inline-controls [name]")]; }

function readControls() {
  const s = {};
  for (const c of controls()) {
    const v = c.type === "checkbox" ? (c.checked ? "true" : "false") : c.value.trim();
    const d = c.name === "model" ? choices.default_model : defaults[c.name];
    const dtext = d === null || d === undefined ? "" : String(d);
    if (v !== dtext && !(c.type === "checkbox" && v === "false" && !d)) s[c.name] = v;
  }
  return s;
}

function writeControls(s) {
  for (const c of controls()) {
    const d = c.name === "model" ? choices.default_model : defaults[c.name];
    const v = c.name in s ? s[c.name] : (d === null || d === undefined ? "" : String(d));
    if (c.type === "checkbox") c.checked = v === "true";
    else c.value = v;
  }
  $("#config-box").hidden = $("#model").value !== "config";
}

function stateFromURL() {
  const s = {};
  for (const [k, v] of new URLSearchParams(location.search)) s[k] = v;
  return s;
}

function saveURL(s, lab) {
  const q = new URLSearchParams(s);
  if (lab && lab !== choices.lab_topics[0]) q.set("lab", lab);
  const url = q.toString() ? `?${q}` : location.pathname;
  history.replaceState(null, "", url);
}

function payload(s) {
  const p = {...s};
  delete p.lab;
  p.model = s.model || choices.default_model;
  for (const k of SHARED) if (!(k in p)) p[k] = String(defaults[k]);
  if (p.model === "config") {
    if (!config) throw new Error("paste or upload a config.json first (it is not kept in the link)");
    p.config = config.text;
    p["config-name"] = config.name;
  }
  return p;
}

async function post(path, body, signal) {
  const r = await fetch(path, {method: "POST", headers: {"Content-Type": "application/json"},
                               body: JSON.stringify(body), signal});
  const data = await r.json();
  if (!r.ok) throw new Error(data.error || `HTTP ${r.status}`);
  return data;
}

function showError(message) {
  const e = $("#error");
  e.hidden = !message;
  e.textContent = message ? `stepbill: error: ${message}` : "";
  document.body.classList.toggle("stale", !!message);
}

async function refresh() {
  const s = readControls();
  saveURL(s, currentLab);
  if (inflight) inflight.abort();
  const ctl = inflight = new AbortController();
  document.body.dataset.state = "loading";
  const started = performance.now();
  let body;
  try {
    body = payload(s);
  } catch (err) {
    showError(err.message);
    document.body.dataset.state = "idle";
    return;
  }
  try {
    const view = await post("/api/view", body, ctl.signal);
    if (ctl.signal.aborted) return;
    showError("");
    const drawStart = performance.now();
    render(view);
    document.body.dataset.drawMs = (performance.now() - drawStart).toFixed(1);
    document.body.dataset.latencyMs = (performance.now() - started).toFixed(1);  // change → drawn (tests read it)
  } catch (err) {
    if (err.name === "AbortError") return;
    showError(err.message);
  }
  // the ranking (with a budget: the exact solver) is asked for once the bill is drawn, so the two never compete
  const ranking = post("/api/recompute", body, ctl.signal)
    .catch(err => ({error: err.message, aborted: err.name === "AbortError"}))
    .then(r => {
      if (ctl.signal.aborted) return;
      renderRecompute(r);
      document.body.dataset.rankings = String(Number(document.body.dataset.rankings || 0) + 1);
    });
  await ranking;
  if (inflight === ctl) {
    inflight = null;
    document.body.dataset.state = "idle";
  }
}

// ---------- views ----------
function render(view) {
  const bill = view.bill;
  lastBill = bill;
  $("#cli-command").textContent = view.command;
  $("#cli-command").title = view.command;
  $("#recompute-command").textContent = view.recompute_command || "—";
  renderSummary(bill, view.time_lines);
  renderMemory(bill);
  renderTimeline(bill);
  renderComm(bill, view.time_lines);
  renders += 1;
  document.body.dataset.renders = String(renders);
}

function card(label, text, line, testid, sub) {
  const div = document.createElement("div");
  div.className = "card";
  const l = document.createElement("div");
  l.className = "card-label";
  l.textContent = label;
  div.append(l, number(text, line, testid));
  if (sub) {
    const s = document.createElement("div");
    s.className = "card-sub";
    s.textContent = sub;
    div.append(s);
  }
  return div;
}

function rankPeakLine(c) {
  return {name: `peak of rank class "${c.class}"`, value: c.memory.peak, unit: "bytes",
          formula: "largest total over this class's timeline moments (resident + activations in flight + transients)",
          explain: Object.entries(c.memory).map(([k, v]) => `${k} ${fmtBytes(v)}`).join(", "),
          inputs: {...c.memory, ranks: c.ranks, micro_batches_in_flight: c.micro_batches_in_flight},
          provenance: "derived (engine/parallel.py, per-rank bill)"};
}

function renderSummary(bill, timeLines) {
  const L = bill.lines, host = $("#summary");
  const cards = [
    card("parameters", fmtCount(L["params.total"].value), L["params.total"], "num-params",
         `${bill.model.name} · ${bill.model.family}`),
    card("peak memory (global)", fmtBytes(L["memory.peak"].value), L["memory.peak"], "num-peak",
         `at ${bill.memory.peak_moment}`),
    card("resident", fmtBytes(L["memory.resident"].value), L["memory.resident"], "num-resident"),
    card("activations", fmtBytes(L["memory.activations"].value), L["memory.activations"], "num-activations"),
    card("step FLOPs", fmtFlops(L["flops.step"].value), L["flops.step"], "num-flops"),
    card("checkpoint", fmtBytes(L["checkpoint.bytes"].value), L["checkpoint.bytes"], "num-checkpoint"),
  ];
  if (bill.ranks.length && bill.parallel.world > 1) {
    const worst = bill.ranks.find(c => c.class === bill.worst_rank) || bill.ranks[0];
    cards.splice(2, 0, card("peak per GPU (worst rank)", fmtBytes(worst.memory.peak), rankPeakLine(worst),
                            "num-rank-peak", `${worst.class}, world ${bill.parallel.world}`));
  }
  if (timeLines.step) {
    cards.push(card("step time", fmtSeconds(timeLines.step.value), timeLines.step, "num-step-time",
                    bill.gpu.display));
    cards.push(card("MFU", fmtValue(timeLines.mfu.value, "1"), timeLines.mfu, "num-mfu"));
  }
  if (bill.fit) {
    const worst = bill.ranks.map(c => c.fit).find(f => f && f.judged_class) || bill.ranks[0].fit || {};
    const fit = {...bill.fit, ...worst, fits: bill.fit.fits};  // the layout's verdict: every card and the host
    cards.push(card("fits?", fit.fits ? "yes" : "no", fitLine(fit), "num-fit",
                    fit.headroom_bytes !== undefined ? `headroom ${fmtBytes(fit.headroom_bytes)}` : ""));
  }
  for (const [k, line] of Object.entries(L)) {
    if (k.startsWith("cards.")) cards.push(card(k.replace("cards.", "cards: "), fmtValue(line.value, ""), line));
  }
  host.replaceChildren(...cards);
}

function capacity(bill) {
  // what a rank may use: the fit verdict's usable memory less its reserve (engine/fit.py), else the card
  if (bill.fit) {
    const bytes = bill.fit.usable_bytes - bill.fit.reserve_bytes;
    return {bytes, label: `usable − reserve ${fmtAxisBytes(bytes)}`};
  }
  const gm = readControls()["gpu-mem"];
  if (gm) return {bytes: Number(gm) * GIB, label: `card ${gm} GiB`};
  if (bill.gpu) return {bytes: bill.gpu.memory_bytes, label: `${bill.gpu.display} ${fmtAxisBytes(bill.gpu.memory_bytes)}`};
  return null;
}

function fitLine(fit) {
  return {name: "fit", value: fit.fits ? "fits" : "does not fit", unit: "",
          formula: "fits when the worst rank's peak ({convention} convention) + reserve ≤ usable memory",
          explain: `${fmtBytes(fit.peak_bytes ?? 0)} + reserve ${fmtBytes(fit.reserve_bytes)} vs usable ` +
                   `${fmtBytes(fit.usable_bytes)}: ${fit.fits ? "fits" : "does not fit"}` +
                   (fit.host ? `; ${fit.host.summary}` : ""),
          inputs: Object.fromEntries(Object.entries(fit).filter(([, v]) => typeof v !== "object")),
          provenance: fit.usable_source || "derived (engine/fit.py)", convention: fit.convention_note || ""};
}

function renderMemory(bill) {
  const cap = capacity(bill);
  const keys = new Set();
  const rows = bill.ranks.map(c => ({
    label: `${c.class}${c.ranks > 1 ? ` ×${c.ranks}` : ""}`,
    segments: c.items.map((item, i) => {
      keys.add(item.name);
      return {key: item.name, value: item.value, title: `${item.name}: ${fmtBytes(item.value)} — ${item.explain}`,
              onclick: () => explain(item), testid: `mem-${c.pp_stages[0]}-${i}`};
    }),
    marker: {value: c.memory.peak, label: `peak ${fmtBytes(c.memory.peak)}`},
    note: `peak ${fmtBytes(c.memory.peak)}${c.fit && c.fit.fits === false ? " ✗ does not fit" : ""}`,
  }));
  Charts.stackedBars($("#memory-chart"), {rows, fmt: fmtAxisBytes, capacity: cap && cap.bytes,
                                          capacityLabel: cap && cap.label, label: "memory per rank class"});
  const legend = $("#memory-legend");
  legend.replaceChildren(...[...keys].map(k => {
    const span = document.createElement("span");
    span.innerHTML = `<i style="background:${Charts.color(k)}"></i>`;
    span.append(k);
    return span;
  }));
}

function momentLine(m, keys) {
  const items = Object.fromEntries(keys.filter(k => k in m).map(k => [k, m[k]]));
  return {name: `moment: ${m.moment}`, value: m.total, unit: "bytes",
          formula: keys.filter(k => k in m).map(k => `{${k}}`).join(" + ") + " B alive at this moment",
          explain: Object.entries(items).map(([k, v]) => `${k} ${fmtBytes(v)}`).join(" + "),
          inputs: {phase: m.phase, ...items},
          provenance: "derived (engine/timeline.py: the bill's timeline moments)"};
}

function renderTimeline(bill) {
  const moments = bill.timeline;
  const reserved = new Set(["phase", "moment", "total"]);
  const order = ["weights", "optimizer", "grads", "activations"];
  const extra = [...new Set(moments.flatMap(m => Object.keys(m)))].filter(k => !reserved.has(k) && !order.includes(k));
  const keys = [...order.filter(k => moments.some(m => k in m)), ...extra];
  const peak = bill.lines["memory.peak"];
  let peakIndex = moments.findIndex(m => m.moment === bill.memory.peak_moment && m.total === bill.memory.peak);
  if (peakIndex < 0) peakIndex = moments.findIndex(m => m.moment === bill.memory.peak_moment);
  const cap = bill.parallel.world === 1 ? capacity(bill) : null;  // the timeline is the global bill: one GPU's card only
  const peakText = `peak ${fmtBytes(bill.memory.peak)}, dominated by ${bill.memory.peak_dominant}`;
  Charts.timeline($("#timeline-chart"), {moments, keys, fmt: fmtAxisBytes, peakIndex, peakText,
                                         onPeak: () => explain(peak), capacity: cap && cap.bytes,
                                         onMoment: m => explain(momentLine(m, keys)),
                                         label: "memory over the step"});
  const note = $("#timeline-note");
  note.replaceChildren(
    "peak ", number(fmtBytes(peak.value), peak, "num-timeline-peak"), ` at ${bill.memory.peak_moment}; `,
    "forward peak ", number(fmtBytes(bill.lines["memory.peak_forward"].value), bill.lines["memory.peak_forward"]),
    ", backward peak ", number(fmtBytes(bill.lines["memory.peak_backward"].value), bill.lines["memory.peak_backward"]),
    `. ${bill.memory.advice}. Legend: ${keys.join(", ")}.`);
}

function renderRecompute(r) {
  const host = $("#recompute-chart"), note = $("#recompute-note");
  if (r.error) {
    if (r.aborted) return;
    host.replaceChildren();
    note.textContent = `stepbill: error: ${r.error}`;
    return;
  }
  // the budget's first solution is the exact solver, the second the greedy ranking (report/recompute_table.py)
  const exact = r.budget ? Object.values(r.budget)[0] : null;
  const drop = exact ? new Set(exact.drop[r.layer_kind] || []) : null;
  const rowLine = row => ({
    name: `recompute ${row.label}`, value: row.tflop_per_gib, unit: "TFLOP/GiB",
    formula: "{flops} FLOPs to recompute ÷ {bytes} B saved, per layer (TFLOP = 1e12, GiB = 2^30 B)",
    explain: `${row.flops.toLocaleString("en-US")} FLOPs ÷ ${row.bytes.toLocaleString("en-US")} B = ` +
             `${row.flops_per_byte.toPrecision(4)} FLOP/B = ${row.tflop_per_gib.toPrecision(4)} TFLOP/GiB`,
    inputs: {flops: row.flops, bytes: row.bytes, tensors: row.tensors.join(", "), input_width: row.input_width,
             cumulative_bytes: row.cumulative_bytes},
    provenance: "derived (engine/recompute_rank.py; the seed's recompute ranking)"});
  const rows = r.rows.map((row, i) => ({
    label: row.label, value: row.tflop_per_gib,
    cls: `${row.below_cut ? "below-cut" : "above-cut"}${drop && row.tensors.some(t => drop.has(t)) ? " dropped" : ""}`,
    title: `${row.label}: saves ${fmtBytes(row.bytes)} for ${fmtFlops(row.flops)} (${row.tflop_per_gib.toPrecision(3)} TFLOP/GiB)`,
    onclick: () => explain(rowLine(row)), testid: `rc-row-${i}`}));
  Charts.hbars(host, {rows, fmt: v => (v >= 100 ? v.toFixed(0) : v >= 1 ? v.toFixed(1) : v.toPrecision(2)),
                      cut: r.threshold_tflop_per_gib, cutLabel: `cut ${r.threshold_tflop_per_gib} TFLOP/GiB`,
                      log: true, label: "recompute ranking", left: 220});
  const cut = {name: "recompute cut", value: r.cut.bytes, unit: "bytes",
               formula: "sum of bytes of the rows below {threshold} TFLOP/GiB; costs {flops} FLOPs per layer",
               explain: `${r.rows.filter(x => x.below_cut).map(x => x.label).join(" + ")}`,
               inputs: {threshold: r.threshold_tflop_per_gib, flops: r.cut.flops, layer_bytes: r.layer_bytes,
                        layer_step_flops: r.layer_step_flops},
               provenance: "derived (engine/recompute_rank.py)"};
  const parts = [`${r.layer_kind} layer: the cut saves `, number(fmtBytes(r.cut.bytes), cut, "num-cut"),
                 ` for ${fmtFlops(r.cut.flops)} (${(100 * r.cut.selective_cost_of_step).toFixed(1)} % of the layer's step). `];
  if (r.budget) {
    Object.entries(r.budget).forEach(([method, sol], k) => {
      const n = Object.values(sol.drop).reduce((a, v) => a + v.length, 0);
      parts.push(number(`${method}: ${n} tensors dropped, peak ${fmtBytes(sol.peak_bytes)}, ${fmtFlops(sol.flops)}`,
                        {name: `budget solver (${method})`, value: sol.peak_bytes, unit: "bytes",
                         formula: k === 0 ? "exact: fewest recompute FLOPs with the peak within the budget"
                                          : "greedy: drop rows in ranking order until the peak fits the budget",
                         explain: Object.entries(sol.drop).map(([k, v]) => `${k}: ${v.join(", ")}`).join("; "),
                         inputs: {flops: sol.flops, peak_bytes: sol.peak_bytes},
                         provenance: "derived (engine/recompute_budget.py)"}, `num-budget-${k}`), " ");
    });
    parts.push("Outlined bars: dropped by the exact solver.");
  } else {
    parts.push("Set a budget (e.g. 40GiB) to see the exact solver's choice beside the ranking.");
  }
  note.replaceChildren(...parts);
}

function renderComm(bill, T) {
  const chart = $("#time-chart"), table = $("#comm-table");
  if (!bill.time) {
    chart.replaceChildren();
    const p = document.createElement("p");
    p.className = "note";
    p.textContent = "Choose a GPU to see the step time (compute, exposed communication, pipeline bubble).";
    chart.append(p);
  } else {
    const compute = T.roofline.value, pipeline = T.pipeline.value;
    const segs = [
      {key: "compute", value: compute, line: T.roofline},
      {key: "bubble", value: pipeline - compute, line: {...T.pipeline, name: "time.pipeline (bubble = pipeline − roofline)"}},
      {key: "exposed comm", value: T.comm_exposed.value, line: T.comm_exposed},
      {key: "comm spill", value: T.comm_spill.value, line: T.comm_spill},
    ];
    Charts.stackedBars(chart, {
      rows: [{label: "step time", segments: segs.map(s => ({key: s.key, value: s.value, onclick: () => explain(s.line),
                                                           title: `${s.key}: ${fmtSeconds(s.value)}`,
                                                           testid: `time-${s.key.replace(" ", "-")}`})),
              marker: {value: T.step.value, label: `step ${fmtSeconds(T.step.value)}`},
              note: `step ${fmtSeconds(T.step.value)}`}],
      fmt: v => fmtSeconds(v), label: "step time breakdown"});
    const legend = document.createElement("div");
    legend.className = "legend";
    for (const s of segs) {
      const span = document.createElement("span");
      span.innerHTML = `<i style="background:${Charts.color(s.key)}"></i>`;
      span.append(`${s.key} `, number(fmtSeconds(s.value), s.line));
      legend.append(span);
    }
    chart.append(legend);
  }
  const cs = bill.comm.collectives;
  if (!cs.length) {
    table.innerHTML = `<p class="note">No collectives: one GPU (set dp, tp, pp, cp or ep above 1).</p>`;
    return;
  }
  const fig = document.createElement("div");
  fig.dataset.testid = "comm-chart";
  const timed = cs.filter(c => typeof c.seconds === "number");
  if (timed.length) {
    Charts.hbars(fig, {rows: timed.map(c => ({label: c.name, value: c.seconds, cls: `overlap-${c.overlap}`,
                                              title: `${c.name}: ${fmtSeconds(c.seconds)}, overlap ${c.overlap}`})),
                       fmt: fmtSeconds, label: "time per collective", left: 190});
  }
  const t = document.createElement("table");
  t.className = "data";
  t.innerHTML = "<thead><tr><th>collective</th><th>axis</th><th>op</th><th>group</th><th>link</th><th>calls</th>" +
                "<th>bytes (busiest link)</th><th>time</th><th>overlap</th></tr></thead>";
  const body = t.createTBody();
  cs.forEach((c, i) => {
    const line = {name: c.name, value: c.bytes, unit: "bytes", formula: c.formula, explain: c.explain,
                  inputs: {calls: c.calls, group: c.group, scope: c.scope, link: c.link, overlap: c.overlap},
                  provenance: "derived (engine/comm.py)"};
    const tline = {...line, name: `${c.name} time`, value: c.seconds, unit: "s",
                   formula: `${c.formula}, over the ${c.link} link's bandwidth`};
    const tr = body.insertRow();
    for (const v of [c.name, c.axis, c.op, c.group, c.link, c.calls]) tr.insertCell().textContent = v;
    tr.insertCell().append(number(fmtBytes(c.bytes), line, `comm-bytes-${i}`));
    tr.insertCell().append(c.seconds === null || c.seconds === undefined ? "—" : number(fmtSeconds(c.seconds), tline));
    tr.insertCell().textContent = c.overlap;
  });
  const key = document.createElement("p");
  key.className = "note";
  key.textContent = timed.length ? "bars: seconds per step on the busiest link; blue hides under compute (overlap yes), " +
                                   "red is exposed (no), amber partly (counted as exposed)" : "";
  table.replaceChildren(fig, key, t);
}

// ---------- labs ----------
let currentLab = null;

async function showLab(topic) {
  currentLab = topic;
  for (const b of document.querySelectorAll("#lab-tabs button")) b.classList.toggle("active", b.dataset.topic === topic);
  saveURL(readControls(), topic);
  const host = $("#lab-view");
  let data = labCache.get(topic);
  if (!data) {
    const r = await fetch(`/api/lab/${topic}`);
    data = await r.json();
    if (!r.ok) { host.textContent = `stepbill: error: ${data.error}`; return; }
    labCache.set(topic, data);
  }
  if (currentLab !== topic) return;
  const settings = document.createElement("p");
  settings.className = "note";
  settings.textContent = "settings: " + Object.entries(data.settings).map(([k, v]) => `${k} = ${fmtInput(v)}`).join(", ");
  if (data.units_note) settings.textContent += ` · ${data.units_note}`;
  const parts = [settings];
  data.tables.forEach((t, k) => {
    const h = document.createElement("h3");
    h.textContent = t.title;
    parts.push(h);
    if (t.takeaway) {
      const take = document.createElement("p");
      take.className = "takeaway";
      take.textContent = t.takeaway;
      parts.push(take);
    }
    const numericCols = t.columns.map((_, j) => j).filter(j => j > 0 && t.rows.every(r => typeof r[j] === "number"));
    // a "quantity | value" table mixes units row by row: a table, not a figure
    const drawn = t.rows.length >= 2 && numericCols.length > 0 && t.columns[0] !== "quantity";
    if (drawn) {
      const fig = document.createElement("div");
      fig.className = "lab-figure";
      fig.dataset.testid = `lab-figure-${k}`;
      const xs = t.rows.map(r => r[0]);
      if (xs.every(v => typeof v === "number")) {
        Charts.lines(fig, {x: xs, series: numericCols.map(j => ({name: t.columns[j], values: t.rows.map(r => r[j])})),
                           xLabel: t.columns[0], label: t.title});
      } else {
        const j = numericCols[0];
        const vals = t.rows.map(r => r[j]);
        const positive = vals.every(v => v > 0);
        Charts.hbars(fig, {rows: t.rows.map(r => ({label: String(r[0]).slice(0, 34), value: r[j]})),
                           fmt: v => Number(v.toPrecision(3)).toLocaleString("en-US"),
                           log: positive && Math.max(...vals) / Math.min(...vals) > 1e3, label: t.title});
        const cap = document.createElement("p");
        cap.className = "note";
        cap.textContent = `bars: ${t.columns[j]}`;
        fig.append(cap);
      }
      parts.push(fig);
    }
    const details = document.createElement("details");
    const summary = document.createElement("summary");
    summary.textContent = `table: ${t.rows.length} rows`;
    const table = document.createElement("table");
    table.className = "data";
    details.append(summary, table);
    const head = table.createTHead().insertRow();
    for (const c of t.columns) head.insertCell().textContent = c;
    const body = table.createTBody();
    for (const r of t.rows) {
      const tr = body.insertRow();
      for (const v of r) tr.insertCell().textContent = typeof v === "number" ? fmtInput(v) : String(v);
    }
    parts.push(drawn ? details : table);  // under a figure the table is folded; alone it is shown
  });
  host.replaceChildren(...parts);
  host.dataset.topic = topic;  // drawn (tests wait on it)
}

// ---------- start ----------
function fill(select, values, labels) {
  select.replaceChildren(...values.map((v, i) => {
    const o = document.createElement("option");
    o.value = v;
    o.textContent = labels ? labels[i] : v;
    return o;
  }));
}

async function useConfig(text, name) {
  if (new Blob([text]).size > choices.max_config_bytes) {
    showError(`config is larger than ${choices.max_config_bytes.toLocaleString("en-US")} bytes`);
    return;
  }
  config = {text, name: name || "custom"};
  try { sessionStorage.setItem(CONFIG_KEY, JSON.stringify(config)); } catch (e) { /* storage full or off */ }
  await refresh();
}

// ---------- planner ----------
// A plan row's layout → the page's controls (CLI names); the rest of the state (model, recipe, GPU) is kept.
const PLAN_LAYOUT = {dp: "dp", tp: "tp", pp: "pp", cp: "cp", ep: "ep", zero: "zero", shard_group: "shard-group",
                     sp: "sp", pp_schedule: "pp-schedule", vpp: "vpp", micro_batches: "micro-batches",
                     offload_optimizer: "offload-optimizer", offload_activations: "offload-activations",
                     etp: "etp", pp_layers: "pp-layers"};

function layoutText(row) {
  const l = row.layout;
  const axes = ["dp", "tp", "pp", "cp", "ep", "etp"].filter(k => l[k] > 1 || k === "dp").map(k => `${k}${l[k]}`);
  if (l.sp) axes.push("sp");
  if (l.pp_schedule === "interleaved") axes.push(`vpp${l.vpp}`);
  if (l.pp_schedule === "gpipe") axes.push("GPipe");
  if (l.pp_layers) axes.push(`stages ${l.pp_layers.join("/")}`);
  axes.push(`ZeRO-${l.zero}${l.shard_group ? ` (group ${l.shard_group})` : ""}`);
  axes.push(`mb ${row.micro_batch} × ${l.micro_batches}`, row.recompute);
  if (l.offload_optimizer) axes.push("offload opt");
  if (l.offload_activations) axes.push("offload act");
  return axes.join(" · ");
}

function loadPlanRow(row) {
  const s = readControls();
  delete s.gpus;  // dp is given: the row's layout sets the GPU count
  for (const [key, name] of Object.entries(PLAN_LAYOUT)) {
    const v = row.layout[key];
    // etp 1 is the default (and a dense model refuses any --etp): leave the control empty
    if (v === null || v === undefined || (key === "etp" && v === 1)) delete s[name];
    else s[name] = Array.isArray(v) ? v.join(",") : String(v);
  }
  s["micro-batch"] = String(row.micro_batch);
  s.recompute = row.recompute;
  if (planImpl) s["optimizer-impl"] = planImpl;  // as the row's command: the plan's AdamW, not the device's default
  writeControls(s);
  document.body.dataset.planLoaded = String(row.rank);
  refresh();
}

function renderPlan(data) {
  const plan = data.plan, search = plan.search;
  planImpl = plan.request.optimizer_impl;
  $("#plan-command").textContent = data.command;
  const budget = data.points.length ? data.points[0].budget_bytes : null;
  Charts.scatter($("#plan-chart"), {
    points: data.points.map(p => ({x: p.step_s, y: p.peak_bytes, front: p.front, onclick: () => loadPlanRow(p),
                                   testid: `plan-point-${p.rank}`,
                                   title: `#${p.rank} ${layoutText(p)}: peak ${fmtBytes(p.peak_bytes)}, step ` +
                                          `${fmtSeconds(p.step_s)}, MFU ${(100 * p.mfu).toFixed(1)} % — click to load`})),
    fmtX: t => `${+t.toPrecision(3)} s`, fmtY: fmtAxisBytes, xLabel: "step time (s)", yLabel: "peak per GPU",
    capacity: budget, capacityLabel: budget ? `budget ${fmtBytes(budget)}` : "", label: "candidate layouts"});
  const rejected = Object.entries(search.rejected).map(([k, n]) => `${k.replaceAll("_", " ")} ${n.toLocaleString("en-US")}`);
  $("#plan-note").textContent =
    `${plan.fits.toLocaleString("en-US")} of ${search.candidates.toLocaleString("en-US")} candidates fit ` +
    `(${search.evaluated.toLocaleString("en-US")} evaluated in ${search.seconds.toFixed(1)} s)` +
    (search.complete ? "" : `; stopped after ${search.seconds.toFixed(1)} s with ` +
     `${search.not_searched.toLocaleString("en-US")} candidates not searched: fix some axes, or run the command ` +
     "below for the whole space") +
    (rejected.length ? `. Rejected: ${rejected.join(", ")}.` : ".") +
    ` Red: the Pareto front of memory vs time. Showing ${data.points.length.toLocaleString("en-US")} points.`;
  const table = document.createElement("table");
  table.className = "data plan";
  table.innerHTML = "<tr><th>#</th><th>GPUs</th><th>layout</th><th>peak</th><th>headroom</th><th>step</th>" +
                    "<th>MFU</th><th>tokens/s</th><th></th></tr>";
  for (const row of plan.top) {
    const tr = document.createElement("tr");
    const cells = [row.rank, row.gpus, layoutText(row), fmtBytes(row.peak_bytes), fmtBytes(row.headroom_bytes),
                   fmtSeconds(row.step_s), `${(100 * row.mfu).toFixed(1)} %`, Math.round(row.tokens_per_s).toLocaleString("en-US")];
    for (const c of cells) { const td = document.createElement("td"); td.textContent = c; tr.appendChild(td); }
    const td = document.createElement("td");
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = "load";
    b.title = row.command;
    b.dataset.testid = `plan-load-${row.rank}`;
    b.addEventListener("click", () => loadPlanRow(row));
    td.appendChild(b);
    tr.appendChild(td);
    table.appendChild(tr);
  }
  $("#plan-table").replaceChildren(table);
}

async function runPlan() {
  const s = readControls();
  const note = $("#plan-note");
  let body;
  try { body = payload(s); } catch (err) { note.textContent = err.message; return; }
  if (!body.gpu) { note.textContent = "pick a GPU first: the planner fits layouts to its memory"; return; }
  if (!lastBill) { note.textContent = "the bill has not been drawn yet"; return; }
  const req = {model: body.model, gpu: body.gpu, seq: body.seq, recipe: body.recipe,
               objective: $("#plan-objective").value,
               gpus: $("#plan-gpus").value.trim() || String(lastBill.parallel.world),
               "global-batch-tokens": String(lastBill.run.global_batch_tokens.value)};
  if (body.optimizer) req.optimizer = body.optimizer;
  if (body.reserve) req.reserve = body.reserve;
  if (body["host-mem"]) req["host-mem"] = body["host-mem"];
  if (body.efficiency) req.efficiency = body.efficiency;
  const fix = $("#plan-fix").value.trim();
  if (fix) req.fix = fix;
  if (body.config) { req.config = body.config; req["config-name"] = body["config-name"]; }
  document.body.dataset.plan = "searching";
  note.textContent = `searching the layouts of ${req.gpus} × ${body.gpu} (at most 8 s)…`;
  $("#plan-run").disabled = true;
  try {
    renderPlan(await post("/api/plan", req));
    document.body.dataset.plan = "done";
  } catch (err) {
    note.textContent = `stepbill: error: ${err.message}`;
    document.body.dataset.plan = "error";
  } finally {
    $("#plan-run").disabled = false;
  }
}

async function init() {
  choices = await (await fetch("/api/choices")).json();
  // shared options (seq, micro-batch, ...) take the bill's defaults: the page is the bill's view
  for (const o of [...choices.recompute_options, ...choices.bill_options]) defaults[o.name] = o.default;
  const form = $("#controls");
  fill(form.model, [...choices.models, "config"], [...choices.models, "custom config.json…"]);
  fill(form.recipe, choices.recipes);
  fill(form.optimizer, choices.optimizers);
  fill(form["optimizer-impl"], ["", ...choices.optimizer_impls],
       ["PyTorch's default (foreach for Adam / AdamW on a GPU)", ...choices.optimizer_impls]);
  fill(form.convention, choices.conventions);
  fill(form.attention, choices.attentions);
  fill(form.zero, choices.zero.map(String));
  fill(form["pp-schedule"], choices.pp_schedules);
  fill(form.gpu, ["", ...choices.gpus.map(g => g.name)], ["none (memory only)", ...choices.gpus.map(g => g.display)]);
  try { config = JSON.parse(sessionStorage.getItem(CONFIG_KEY) || "null"); } catch (e) { config = null; }
  if (config) $("#config-text").value = config.text;
  const s = stateFromURL();
  writeControls(s);
  for (const c of controls()) {
    c.addEventListener(c.tagName === "SELECT" || c.type === "checkbox" ? "change" : "input", () => {
      $("#config-box").hidden = $("#model").value !== "config";
      refresh();
    });
  }
  $("#config-use").addEventListener("click", () => useConfig($("#config-text").value, "custom"));
  $("#config-file").addEventListener("change", async ev => {
    const file = ev.target.files[0];
    if (!file) return;
    if (file.size > choices.max_config_bytes) { showError(`config is larger than ${choices.max_config_bytes} bytes`); return; }
    const text = await file.text();
    $("#config-text").value = text;
    await useConfig(text, file.name.replace(/\.json$/, ""));
  });
  $("#plan-run").addEventListener("click", runPlan);
  $("#explain-close").addEventListener("click", () => { $("#explain").hidden = true; });
  document.addEventListener("keydown", ev => { if (ev.key === "Escape") $("#explain").hidden = true; });
  $("#copy-cli").addEventListener("click", async () => {
    const text = $("#cli-command").textContent;
    try { await navigator.clipboard.writeText(text); $("#copy-cli").textContent = "copied"; }
    catch (e) { getSelection().selectAllChildren($("#cli-command")); $("#copy-cli").textContent = "selected: press Ctrl-C"; }
    setTimeout(() => { $("#copy-cli").textContent = "copy as CLI command"; }, 1500);
  });
  const tabs = $("#lab-tabs");
  tabs.replaceChildren(...choices.lab_topics.map(t => {
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = t;
    b.dataset.topic = t;
    b.dataset.testid = `lab-${t}`;
    b.addEventListener("click", () => showLab(t));
    return b;
  }));
  currentLab = choices.lab_topics.includes(s.lab) ? s.lab : choices.lab_topics[0];
  await refresh();  // the bill first: the lab figures are asked for once it is drawn
  await showLab(currentLab);
}

init().catch(err => showError(err.message));
