"use strict";
nav("");
const page = document.getElementById("page");
const name = param("name");
let rows = [], lastStep = -1, timer = null;

function filterForm(onApply) {
  const field = (label, input) => el("label", {class: "field"}, label, input);
  const inputs = {
    step_min: el("input", {type: "number", name: "step_min"}), step_max: el("input", {type: "number", name: "step_max"}),
    reward_min: el("input", {type: "number", step: "any", name: "reward_min"}), reward_max: el("input", {type: "number", step: "any", name: "reward_max"}),
    alarm: el("input", {type: "checkbox", name: "alarm"}), truncated: el("input", {type: "checkbox", name: "truncated"}),
  };
  const form = el("form", {class: "filters", id: "sample-filters", onsubmit: e => { e.preventDefault(); onApply(inputs); }},
    field("step ≥", inputs.step_min), field("step ≤", inputs.step_max), field("reward ≥", inputs.reward_min),
    field("reward ≤", inputs.reward_max), field("alarm steps only", inputs.alarm), field("truncated only", inputs.truncated),
    el("button", {class: "primary", type: "submit"}, "Filter"));
  return form;
}

async function loadSamples(target, inputs) {
  const query = new URLSearchParams({name, limit: 100});
  for (const key of ["step_min", "step_max", "reward_min", "reward_max"]) if (inputs[key].value !== "") query.set(key, inputs[key].value);
  if (inputs.alarm.checked) query.set("alarm", "true");
  if (inputs.truncated.checked) query.set("truncated", "true");
  try {
    const data = await api(`/api/runs/samples?${query}`);
    target.replaceChildren(el("p", {class: "muted", id: "sample-count"}, `${data.total} logged responses match (steps ${data.steps.join(", ") || "–"}); showing ${data.rows.length}.`),
      sampleTable(data.rows));
  } catch (err) { showError(target, err); }
}

async function refresh(first) {
  try {
    const detail = await api(`/api/runs/detail?name=${encodeURIComponent(name)}&since=${lastStep}`);
    rows = rows.concat(detail.rows);
    if (rows.length) lastStep = rows[rows.length - 1].step;
    const head = el("div", {},
      el("h1", {}, name, " ", el("span", {class: `badge ${detail.status}`, id: "status"}, detail.status)),
      el("p", {class: "muted"}, `${detail.steps} steps logged`,
        detail.alarms.length ? ` · monitor alarms at steps ${detail.alarms.join(", ")}` : " · no monitor alarm",
        detail.status === "running" ? " · refreshing every 2 s" : "",
        // the run folder's footprint, from summary.json (checkpoints are most of it: rlxf prune lists what can go)
        detail.summary && detail.summary.disk_bytes != null
          ? el("span", {id: "footprint"}, ` · ${(detail.summary.disk_bytes / 1e6).toFixed(1)} MB on disk`) : ""));
    document.getElementById("head").replaceChildren(head);
    document.getElementById("curves").replaceChildren(...curvePanels([{name, rows, alarms: detail.alarms}]), stageBars(detail.stage_seconds));
    if (first) {
      const samples = el("div", {id: "samples"});
      const form = filterForm(inputs => loadSamples(samples, inputs));
      document.getElementById("browser").replaceChildren(el("h2", {}, "Logged rollouts (samples.jsonl)"), el("div", {class: "card"}, form), samples);
      form.requestSubmit();
    }
    clearTimeout(timer);
    if (detail.status === "running") timer = setTimeout(() => refresh(false), 2000);
  } catch (err) { showError(page, err); }
}

page.replaceChildren(el("div", {id: "head"}), el("div", {class: "grid", id: "curves"}), el("div", {id: "browser"}));
refresh(true);
