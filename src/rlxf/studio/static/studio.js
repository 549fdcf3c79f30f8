// Shared helpers. Every piece of run or model text reaches the page through textContent (el() below):
// nothing untrusted is ever parsed as HTML.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const COLORS = ["#2f6fde", "#e07b24", "#1d8a4e", "#9b4dca", "#c6373a", "#0f9fb5", "#8c6d1f", "#555"];

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (value !== undefined && value !== null && value !== false) node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

async function api(path, body) {
  const options = body === undefined ? {} : {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)};
  const response = await fetch(path, options);
  const data = await response.json().catch(() => ({error: response.statusText}));
  if (!response.ok) throw new Error(data.error || data.detail || response.statusText);
  return data;
}

function param(name) { return new URLSearchParams(location.search).get(name); }

function fmt(value, digits = 3) {
  if (value === null || value === undefined) return "–";
  if (typeof value !== "number") return String(value);
  return Number.isInteger(value) ? String(value) : value.toFixed(digits);
}

function nav(here) {
  const links = [["/", "Runs"], ["/compare", "Compare"], ["/campaigns", "Labelling"]];
  document.body.prepend(el("header", {},
    el("span", {class: "brand"}, "rlxf studio"),
    el("nav", {}, links.map(([href, text]) => el("a", {href, class: href === here ? "here" : ""}, text)))));
}

function showError(target, err) {
  target.replaceChildren(el("p", {class: "error"}, err.message || String(err)));
}

// Model text with each fenced code block (a ``` line ... a bare ``` line, as in CommonMark) in a box of its
// own. Prose wraps, however long a word; code keeps its lines and indentation (they carry the meaning) and
// scrolls sideways inside its box, so neither can widen the page. Only text nodes are made, fences included:
// the element's textContent is exactly `text`, and nothing in it is ever parsed as HTML.
const OPEN_FENCE = /^ {0,3}```/, CLOSE_FENCE = /^ {0,3}```\s*$/;

function fencedText(text, attrs = {}) {
  const box = el("div", {...attrs, class: `text ${attrs.class || ""}`.trim()});
  let prose = "", code = null;
  const addProse = () => { if (prose) box.append(el("span", {class: "prose"}, prose)); prose = ""; };
  const addCode = () => {
    box.append(el("pre", {class: "code"}, code.map((line, i) =>
      i === 0 || (i === code.length - 1 && CLOSE_FENCE.test(line)) ? el("span", {class: "fence"}, line) : line)));
    code = null;
  };
  for (const line of text.split(/(?<=\n)/)) {  // lines with their own newline: nothing added or lost
    if (code === null && OPEN_FENCE.test(line)) { addProse(); code = [line]; }
    else if (code !== null) { code.push(line); if (CLOSE_FENCE.test(line)) addCode(); }
    else prose += line;
  }
  if (code !== null) addCode();  // a block the model never closed (it ran out of tokens) runs to the end
  addProse();
  return box;
}

// The curve panels a practitioner reads first (the same set as `rlxf plot`).
const PANELS = [
  {title: "Reward (train samples)", keys: ["reward/mean"], prefix: "reward/"},
  {title: "Held-out accuracy", keys: ["eval/accuracy"]},
  {title: "KL", keys: ["policy/kl", "policy/approx_kl"], firstOnly: true},
  {title: "Entropy", keys: ["policy/entropy"]},
  {title: "Response length", keys: ["response/length_mean"]},
  {title: "Clip fraction", keys: ["policy/clip_fraction"]},
  {title: "Loss", keys: ["train/loss"]},
];

function panelKeys(panel, rows) {
  const logged = [...new Set(rows.flatMap(Object.keys))];
  let keys = panel.keys.filter(k => logged.includes(k));
  if (panel.firstOnly) return keys.slice(0, 1);
  if (panel.prefix) keys = keys.concat(logged.filter(k => k.startsWith(panel.prefix) && !keys.includes(k)));
  return keys;
}

function points(rows, key) {
  return rows.filter(r => typeof r[key] === "number" && isFinite(r[key])).map(r => [r.step, r[key]]);
}

// A line chart: series = [{label, color, dash, points: [[x, y], ...]}]; alarms = steps marked in red.
function lineChart(title, series, alarms = []) {
  const W = 420, H = 200, L = 48, R = 10, T = 8, B = 24;
  const all = series.flatMap(s => s.points);
  const box = el("div", {class: "card chart"}, el("h3", {}, title));
  if (!all.length) { box.append(el("p", {class: "muted"}, "not logged")); return box; }
  let [x0, x1] = [Math.min(...all.map(p => p[0])), Math.max(...all.map(p => p[0]))];
  let [y0, y1] = [Math.min(...all.map(p => p[1])), Math.max(...all.map(p => p[1]))];
  if (x0 === x1) x1 = x0 + 1;
  if (y0 === y1) { y0 -= 0.5; y1 += 0.5; }
  const sx = x => L + (x - x0) / (x1 - x0) * (W - L - R);
  const sy = y => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
  const chart = svg("svg", {viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title});
  chart.append(svg("rect", {x: L, y: T, width: W - L - R, height: H - T - B, fill: "#fbfcfd", stroke: "#d9dee7"}));
  for (const step of alarms) {
    if (step >= x0 && step <= x1) chart.append(svg("line", {x1: sx(step), x2: sx(step), y1: T, y2: H - B, stroke: "#c6373a", "stroke-opacity": 0.35, "stroke-width": 1.5}));
  }
  for (const frac of [0, 0.5, 1]) {
    const y = y0 + frac * (y1 - y0);
    chart.append(svg("text", {x: L - 4, y: sy(y) + 4, "text-anchor": "end", "font-size": 10, fill: "#667085"}, fmt(y, 2)));
    const x = x0 + frac * (x1 - x0);
    chart.append(svg("text", {x: sx(x), y: H - 8, "text-anchor": "middle", "font-size": 10, fill: "#667085"}, fmt(Math.round(x))));
  }
  for (const s of series) {
    if (!s.points.length) continue;
    const d = s.points.map((p, i) => `${i ? "L" : "M"}${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join("");
    chart.append(svg("path", {d, fill: "none", stroke: s.color, "stroke-width": 1.8, "stroke-dasharray": s.dash || ""}));
    if (s.points.length === 1) chart.append(svg("circle", {cx: sx(s.points[0][0]), cy: sy(s.points[0][1]), r: 3, fill: s.color}));
  }
  box.append(chart, el("div", {class: "legend"}, series.map(s =>
    el("span", {}, el("i", {class: "swatch", "data-color": s.color}), s.label))));
  box.querySelectorAll("i.swatch").forEach(i => { i.style.background = i.dataset.color; });
  return box;
}

// Curves of one or more runs: runs = [{name, rows, alarms}]; colour = run when several, else = metric.
function curvePanels(runs) {
  const dashes = ["", "5 3", "2 3", "8 3 2 3"];
  return PANELS.map(panel => {
    const series = [];
    runs.forEach((run, r) => panelKeys(panel, run.rows).forEach((key, k) => series.push({
      label: runs.length > 1 ? `${run.name}: ${key}` : key,
      color: runs.length > 1 ? COLORS[r % COLORS.length] : COLORS[k % COLORS.length],
      dash: runs.length > 1 ? dashes[k % dashes.length] : "", points: points(run.rows, key)})));
    return series.some(s => s.points.length) ? lineChart(panel.title, series, runs.flatMap(r => r.alarms)) : null;
  }).filter(Boolean);  // a metric the runs never logged gets no empty panel
}

function stageBars(stageSeconds) {
  const entries = Object.entries(stageSeconds || {}).sort((a, b) => b[1] - a[1]);
  const box = el("div", {class: "card chart"}, el("h3", {}, "Where a step's time goes (mean seconds per step)"));
  if (!entries.length) { box.append(el("p", {class: "muted"}, "no time/* metrics")); return box; }
  const max = Math.max(...entries.map(e => e[1]));
  const H = 22 * entries.length + 6, W = 420;
  const chart = svg("svg", {viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "stage times"});
  chart.style.height = `${H}px`;
  entries.forEach(([stage, seconds], i) => {
    const y = 4 + i * 22;
    chart.append(svg("text", {x: 130, y: y + 13, "text-anchor": "end", "font-size": 11, fill: "#1d2433"}, stage));
    chart.append(svg("rect", {x: 136, y, height: 16, width: Math.max(1, (seconds / max) * (W - 210)), fill: COLORS[i % COLORS.length]}));
    chart.append(svg("text", {x: 140 + (seconds / max) * (W - 210), y: y + 13, "font-size": 11, fill: "#667085"}, `${fmt(seconds, 3)} s`));
  });
  box.append(chart);
  return box;
}

function sampleTable(rows) {
  const table = el("table", {class: "samples"}, el("tr", {}, ["step", "group", "reward", "advantage", "length", "truncated", "prompt", "response", "answer"].map(h => el("th", {}, h))));
  for (const r of rows) {
    table.append(el("tr", {},
      el("td", {class: "num"}, fmt(r.step)), el("td", {class: "num"}, fmt(r.group)), el("td", {class: "num"}, fmt(r.reward)),
      el("td", {class: "num"}, fmt(r.advantage)), el("td", {class: "num"}, fmt(r.length)), el("td", {}, r.truncated ? "yes" : ""),
      el("td", {}, el("pre", {class: "text"}, r.prompt ?? "")), el("td", {}, el("pre", {class: "text response-text"}, r.response ?? "")),
      el("td", {}, el("pre", {class: "text"}, r.answer ?? ""))));
  }
  return table;
}
