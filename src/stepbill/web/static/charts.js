// stepbill's charts: small SVG figures, no dependencies. Each function clears `host` and draws into it.
"use strict";

const Charts = (() => {
  const NS = "http://www.w3.org/2000/svg";
  const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
                   "#9c755f", "#bab0ac", "#1f77b4", "#2ca02c"];
  const FIXED = {weights: "#4e79a7", grads: "#59a14f", optimizer: "#f28e2b", master: "#f1a35f",
                 "optimizer.m": "#f28e2b", "optimizer.v": "#d4731a", activations: "#e15759", transient: "#b07aa1",
                 cast: "#76b7b2", temporaries: "#b07aa1", compute: "#4e79a7", bubble: "#bab0ac",
                 "exposed comm": "#e15759", "comm spill": "#ff9da7", "activations.working_set": "#ff9da7",
                 "activations.outside": "#c44e52"};
  const assigned = new Map();

  function color(key) {
    if (FIXED[key]) return FIXED[key];
    if (key.startsWith("activations")) return FIXED.activations;
    if (!assigned.has(key)) assigned.set(key, PALETTE[(assigned.size + 4) % PALETTE.length]);
    return assigned.get(key);
  }

  function el(name, attrs = {}, text) {
    const node = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function svg(host, width, height, label) {
    host.replaceChildren();
    const root = el("svg", {viewBox: `0 0 ${width} ${height}`, width: "100%", role: "img", "aria-label": label});
    host.appendChild(root);
    return root;
  }

  function tip(node, text) { node.appendChild(el("title", {}, text)); return node; }

  function clickable(node, onclick, testid) {
    if (!onclick) return node;
    node.classList.add("clickable");
    node.addEventListener("click", onclick);
    if (testid) node.setAttribute("data-testid", testid);
    return node;
  }

  function niceTicks(max, count = 5) {
    if (!(max > 0)) return [0];
    const raw = max / count, mag = 10 ** Math.floor(Math.log10(raw));
    const step = [1, 2, 2.5, 5, 10].map(m => m * mag).find(s => s >= raw);
    const ticks = [];
    for (let t = 0; t <= max * 1.0001; t += step) ticks.push(t);
    return ticks;
  }

  // Horizontal stacked bars: rows [{label, segments:[{key, value, title, onclick}], marker:{value, label}}].
  function stackedBars(host, {rows, fmt, capacity, capacityLabel, label}) {
    const left = 150, right = rows.some(r => r.note) ? 120 : 20, rowH = 34, top = 10, axisH = 34;
    const width = 760, height = top + rows.length * rowH + axisH;
    const root = svg(host, width, height, label);
    const total = r => r.segments.reduce((s, x) => s + x.value, 0);
    const max = Math.max(1, capacity || 0, ...rows.map(r => Math.max(total(r), r.marker ? r.marker.value : 0)));
    const ticks = niceTicks(max);
    const xmax = Math.max(max, ticks[ticks.length - 1]);
    const x = v => left + (width - left - right) * v / xmax;
    for (const t of ticks) {
      root.appendChild(el("line", {x1: x(t), x2: x(t), y1: top, y2: height - axisH + 4, class: "grid"}));
      root.appendChild(el("text", {x: x(t), y: height - axisH + 18, class: "tick", "text-anchor": "middle"}, fmt(t)));
    }
    rows.forEach((r, i) => {
      const y = top + i * rowH;
      root.appendChild(el("text", {x: left - 8, y: y + rowH / 2 + 4, "text-anchor": "end", class: "label"}, r.label));
      let acc = 0;
      for (const s of r.segments) {
        if (!(s.value > 0)) continue;
        const rect = el("rect", {x: x(acc), y: y + 5, width: Math.max(0.5, x(acc + s.value) - x(acc)),
                                 height: rowH - 10, fill: color(s.key), "data-key": s.key});
        tip(rect, s.title || `${s.key}: ${fmt(s.value)}`);
        root.appendChild(clickable(rect, s.onclick, s.testid));
        acc += s.value;
      }
      if (r.marker) {
        const m = el("line", {x1: x(r.marker.value), x2: x(r.marker.value), y1: y + 1, y2: y + rowH - 1,
                              class: "marker"});
        root.appendChild(tip(m, r.marker.label));
      }
      if (r.note) {
        const end = Math.max(acc, r.marker ? r.marker.value : 0, capacity || 0);
        root.appendChild(el("text", {x: x(end) + 8, y: y + rowH / 2 + 4, class: "bar-note"}, r.note));
      }
    });
    if (capacity) {
      root.appendChild(el("line", {x1: x(capacity), x2: x(capacity), y1: top - 4, y2: height - axisH + 4,
                                   class: "capacity"}));
      root.appendChild(el("text", {x: x(capacity) - 4, y: height - 4, "text-anchor": "end", class: "capacity-label"},
                          capacityLabel || "capacity"));
    }
    return root;
  }

  // Stacked area of the step timeline: moments [{phase, moment, total, ...items}], keys in stacking order.
  function timeline(host, {moments, keys, fmt, peakIndex, peakText, onPeak, onMoment, capacity, label}) {
    const left = 70, right = 20, top = 28, bottom = 40, width = 760, height = 300;
    const root = svg(host, width, height, label);
    const n = moments.length;
    const max = Math.max(1, capacity || 0, ...moments.map(m => m.total));
    const ticks = niceTicks(max);
    const ymax = Math.max(max, ticks[ticks.length - 1]);
    const x = i => left + (width - left - right) * (n <= 1 ? 0.5 : i / (n - 1));
    const y = v => height - bottom - (height - top - bottom) * v / ymax;
    // phase bands
    let start = 0;
    for (let i = 1; i <= n; i++) {
      if (i === n || moments[i].phase !== moments[start].phase) {
        const x0 = x(start) - (start ? (x(start) - x(start - 1)) / 2 : 0);
        const x1 = i === n ? x(n - 1) : (x(i - 1) + x(i)) / 2;
        root.appendChild(el("rect", {x: x0, y: top, width: Math.max(1, x1 - x0), height: height - top - bottom,
                                     class: `phase phase-${moments[start].phase}`}));
        const mid = (x0 + x1) / 2, atEnd = mid > width - right - 30;
        root.appendChild(el("text", {x: atEnd ? width - right : mid, y: height - bottom + 30,
                                     "text-anchor": atEnd ? "end" : "middle", class: "tick"}, moments[start].phase));
        start = i;
      }
    }
    for (const t of ticks) {
      root.appendChild(el("line", {x1: left, x2: width - right, y1: y(t), y2: y(t), class: "grid"}));
      root.appendChild(el("text", {x: left - 6, y: y(t) + 4, "text-anchor": "end", class: "tick"}, fmt(t)));
    }
    const base = new Array(n).fill(0);
    for (const key of keys) {
      const upper = moments.map((m, i) => base[i] + (m[key] || 0));
      if (upper.every((v, i) => v === base[i])) continue;
      let d = `M${x(0)},${y(upper[0])}`;
      for (let i = 1; i < n; i++) d += `L${x(i)},${y(upper[i])}`;
      for (let i = n - 1; i >= 0; i--) d += `L${x(i)},${y(base[i])}`;
      root.appendChild(tip(el("path", {d: d + "Z", fill: color(key), class: "area", "data-key": key}), key));
      for (let i = 0; i < n; i++) base[i] = upper[i];
    }
    // hover targets: one thin column per moment
    moments.forEach((m, i) => {
      const w = n <= 1 ? 20 : (width - left - right) / (n - 1);
      const col = el("rect", {x: x(i) - w / 2, y: top, width: w, height: height - top - bottom, class: "hover"});
      const parts = keys.filter(k => m[k]).map(k => `${k} ${fmt(m[k])}`).join(", ");
      root.appendChild(clickable(tip(col, `${m.moment}: ${fmt(m.total)} (${parts})`), onMoment && (() => onMoment(m, i)),
                                 `moment-${i}`));
    });
    if (capacity) {
      root.appendChild(el("line", {x1: left, x2: width - right, y1: y(capacity), y2: y(capacity), class: "capacity"}));
    }
    if (peakIndex >= 0 && peakIndex < n) {
      const px = x(peakIndex), py = y(moments[peakIndex].total);
      root.appendChild(el("line", {x1: px, x2: px, y1: py, y2: height - bottom, class: "marker"}));
      const dot = clickable(el("circle", {cx: px, cy: py, r: 6, class: "peak"}), onPeak, "timeline-peak");
      root.appendChild(tip(dot, peakText));
      const anchor = px > width * 0.6 ? "end" : "start";
      root.appendChild(clickable(el("text", {x: px + (anchor === "end" ? -10 : 10), y: Math.max(top - 8, py - 10) + 4,
                                             "text-anchor": anchor, class: "peak-label"}, peakText), onPeak));
    }
    return root;
  }

  // Horizontal bars with an optional vertical cut line: rows [{label, value, cls, title, onclick}].
  function hbars(host, {rows, fmt, cut, cutLabel, log, label, left = 210}) {
    const right = 70, rowH = 20, top = 8, axisH = cut ? 44 : 30, width = 760;
    const height = top + rows.length * rowH + axisH;
    const root = svg(host, width, height, label);
    const values = rows.map(r => r.value).filter(v => v > 0);
    const hi = Math.max(cut || 0, ...values, 1e-12);
    const lo = log ? Math.min(cut || hi, ...values) / 2 : 0;
    const span = width - left - right;
    const x = v => left + span * (log ? (Math.log10(Math.max(v, lo)) - Math.log10(lo)) /
                                        Math.max(1e-9, Math.log10(hi * 1.05) - Math.log10(lo))
                                      : v / (hi * 1.05));
    if (log) {
      for (let e = Math.ceil(Math.log10(lo)); e <= Math.log10(hi * 1.05); e++) {
        root.appendChild(el("line", {x1: x(10 ** e), x2: x(10 ** e), y1: top, y2: height - axisH + 4, class: "grid"}));
        root.appendChild(el("text", {x: x(10 ** e), y: height - axisH + 18, "text-anchor": "middle", class: "tick"},
                            fmt(10 ** e)));
      }
    } else {
      for (const t of niceTicks(hi * 1.05)) {
        root.appendChild(el("line", {x1: x(t), x2: x(t), y1: top, y2: height - axisH + 4, class: "grid"}));
        root.appendChild(el("text", {x: x(t), y: height - axisH + 18, "text-anchor": "middle", class: "tick"}, fmt(t)));
      }
    }
    rows.forEach((r, i) => {
      const yy = top + i * rowH;
      root.appendChild(el("text", {x: left - 6, y: yy + rowH / 2 + 4, "text-anchor": "end", class: "label small"},
                          r.label));
      const x0 = x(lo), w = Math.max(1, x(r.value) - x0);
      const rect = el("rect", {x: x0, y: yy + 3, width: w, height: rowH - 6, class: `bar ${r.cls || ""}`});
      tip(rect, r.title || `${r.label}: ${fmt(r.value)}`);
      root.appendChild(clickable(rect, r.onclick, r.testid));
      root.appendChild(clickable(el("text", {x: x0 + w + 4, y: yy + rowH / 2 + 4, class: "tick"}, fmt(r.value)),
                                 r.onclick));
    });
    if (cut) {
      root.appendChild(el("line", {x1: x(cut), x2: x(cut), y1: 0, y2: height - axisH + 4, class: "cut"}));
      const nearRight = x(cut) > width - right - 120;
      root.appendChild(el("text", {x: x(cut) + (nearRight ? -4 : 4), y: height - 4, class: "cut-label",
                                   "text-anchor": nearRight ? "end" : "start"}, cutLabel || `cut ${fmt(cut)}`));
    }
    return root;
  }

  // Lines over a numeric or categorical x: series [{name, values}], x [..]. Log y when the data spans > 1e3.
  function lines(host, {x, series, label, xLabel, yLabel, logY}) {
    const left = 64, right = 200, top = 12, bottom = 40, width = 800, height = 240;
    const root = svg(host, width, height, label);
    const all = series.flatMap(s => s.values).filter(v => Number.isFinite(v));
    const positive = all.filter(v => v > 0);
    const useLog = logY ?? (positive.length === all.length && positive.length > 0 &&
                            Math.max(...positive) / Math.min(...positive) > 1e3);
    let lo = useLog ? Math.min(...positive) : Math.min(0, ...all);
    let hi = useLog ? Math.max(...positive) : Math.max(...all, 0);
    if (hi === lo) hi = lo + 1;
    const ty = v => useLog ? Math.log10(v) : v;
    const numericX = x.every(v => typeof v === "number");
    const n = x.length;
    const px = i => left + (width - left - right) * (n <= 1 ? 0.5 : i / (n - 1));
    const py = v => height - bottom - (height - top - bottom) * (ty(v) - ty(lo)) / (ty(hi) - ty(lo));
    if (useLog) {
      for (let e = Math.ceil(Math.log10(lo)); e <= Math.floor(Math.log10(hi)); e++) {
        root.appendChild(el("line", {x1: left, x2: width - right, y1: py(10 ** e), y2: py(10 ** e), class: "grid"}));
        root.appendChild(el("text", {x: left - 6, y: py(10 ** e) + 4, "text-anchor": "end", class: "tick"}, `1e${e}`));
      }
    } else {
      const ticks = niceTicks(hi - Math.min(lo, 0)).map(t => t + Math.min(lo, 0));
      for (const t of ticks) {
        root.appendChild(el("line", {x1: left, x2: width - right, y1: py(t), y2: py(t), class: "grid"}));
        root.appendChild(el("text", {x: left - 6, y: py(t) + 4, "text-anchor": "end", class: "tick"},
                            Number(t.toPrecision(3)).toLocaleString("en-US")));
      }
    }
    const every = Math.max(1, Math.ceil(n / 10));
    x.forEach((v, i) => {
      if (i % every) return;
      root.appendChild(el("text", {x: px(i), y: height - bottom + 16, "text-anchor": "middle", class: "tick"},
                          numericX ? Number(v).toLocaleString("en-US") : String(v).slice(0, 14)));
    });
    if (xLabel) root.appendChild(el("text", {x: (left + width - right) / 2, y: height - 4, "text-anchor": "middle",
                                             class: "axis-label"}, xLabel));
    if (yLabel) root.appendChild(el("text", {x: 12, y: top + 4, class: "axis-label"}, yLabel));
    series.forEach((s, k) => {
      const c = PALETTE[k % PALETTE.length];
      const pts = s.values.map((v, i) => [i, v]).filter(([, v]) => Number.isFinite(v) && (!useLog || v > 0));
      if (!pts.length) return;
      const d = pts.map(([i, v], j) => `${j ? "L" : "M"}${px(i)},${py(v)}`).join("");
      root.appendChild(tip(el("path", {d, stroke: c, fill: "none", class: "line"}), s.name));
      for (const [i, v] of pts) root.appendChild(tip(el("circle", {cx: px(i), cy: py(v), r: 3, fill: c}),
                                                     `${s.name} at ${x[i]}: ${v}`));
      root.appendChild(el("rect", {x: width - right + 10, y: top + k * 18, width: 10, height: 10, fill: c}));
      root.appendChild(el("text", {x: width - right + 24, y: top + k * 18 + 9, class: "tick"}, s.name.length > 30 ? `${s.name.slice(0, 29)}…` : s.name));
    });
    return root;
  }

  // A scatter of points [{x, y, front, title, onclick, testid}] on linear axes from 0; front points drawn larger,
  // joined in x order (a Pareto front); an optional horizontal line at `capacity` (the budget).
  function scatter(host, {points, fmtX, fmtY, xLabel, yLabel, capacity, capacityLabel, label}) {
    const left = 72, right = 20, top = 14, bottom = 44, width = 800, height = 300;
    const root = svg(host, width, height, label);
    const hiX = Math.max(...points.map(p => p.x), 0) * 1.05 || 1;
    const hiY = Math.max(...points.map(p => p.y), capacity || 0, 0) * 1.05 || 1;
    const px = v => left + (width - left - right) * v / hiX;
    const py = v => height - bottom - (height - top - bottom) * v / hiY;
    for (const t of niceTicks(hiY)) {
      root.appendChild(el("line", {x1: left, x2: width - right, y1: py(t), y2: py(t), class: "grid"}));
      root.appendChild(el("text", {x: left - 6, y: py(t) + 4, "text-anchor": "end", class: "tick"}, fmtY(t)));
    }
    for (const t of niceTicks(hiX)) {
      root.appendChild(el("text", {x: px(t), y: height - bottom + 16, "text-anchor": "middle", class: "tick"}, fmtX(t)));
    }
    root.appendChild(el("text", {x: (left + width - right) / 2, y: height - 6, "text-anchor": "middle",
                                 class: "axis-label"}, xLabel));
    root.appendChild(el("text", {x: 12, y: top + 4, class: "axis-label"}, yLabel));
    if (capacity) {
      root.appendChild(el("line", {x1: left, x2: width - right, y1: py(capacity), y2: py(capacity), class: "capacity"}));
      root.appendChild(el("text", {x: width - right - 4, y: py(capacity) - 4, "text-anchor": "end", class: "tick"},
                          capacityLabel || ""));
    }
    const front = points.filter(p => p.front).sort((a, b) => a.x - b.x);
    if (front.length > 1) {
      const d = front.map((p, j) => `${j ? "L" : "M"}${px(p.x)},${py(p.y)}`).join("");
      root.appendChild(el("path", {d, stroke: "#e15759", fill: "none", class: "line front"}));
    }
    for (const p of [...points.filter(q => !q.front), ...front]) {  // the front drawn last, on top
      const dot = el("circle", {cx: px(p.x), cy: py(p.y), r: p.front ? 5 : 3,
                                fill: p.front ? "#e15759" : "#4e79a7", "fill-opacity": p.front ? 1 : 0.45});
      root.appendChild(clickable(tip(dot, p.title), p.onclick, p.testid));
    }
    return root;
  }

  return {color, stackedBars, timeline, hbars, lines, scatter};
})();
