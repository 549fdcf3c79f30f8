"use strict";
nav("/compare");
const page = document.getElementById("page");

async function render() {
  try {
    const runs = await api("/api/runs");
    const pick = (id, value) => el("select", {id}, runs.map(r => el("option", {value: r.name, selected: r.name === value}, r.name)));
    const a = pick("run-a", param("a") || runs[0]?.name), b = pick("run-b", param("b") || runs[1]?.name);
    const form = el("form", {class: "filters", onsubmit: e => {
      e.preventDefault(); location.search = `?a=${encodeURIComponent(a.value)}&b=${encodeURIComponent(b.value)}`;
    }}, el("label", {class: "field"}, "run A", a), el("label", {class: "field"}, "run B", b), el("button", {class: "primary", type: "submit"}, "Compare"));
    page.replaceChildren(el("h1", {}, "Two runs side by side"), el("div", {class: "card"}, form));
    if (!param("a") || !param("b")) return;
    const [da, db] = await Promise.all([param("a"), param("b")].map(n => api(`/api/runs/detail?name=${encodeURIComponent(n)}`)));
    const runsData = [{name: da.name, rows: da.rows, alarms: da.alarms}, {name: db.name, rows: db.rows, alarms: db.alarms}];
    page.append(el("div", {class: "grid", id: "curves"}, curvePanels(runsData)));
    const stages = el("div", {class: "two"}, stageBars(da.stage_seconds), stageBars(db.stage_seconds));
    stages.querySelectorAll("h3").forEach((h, i) => h.prepend(`${[da.name, db.name][i]}: `));
    page.append(el("h2", {}, "Stage times"), stages);
    const [sa, sb] = await Promise.all([da.name, db.name].map(n => api(`/api/runs/samples?name=${encodeURIComponent(n)}&limit=500`)));
    const common = sa.steps.filter(s => sb.steps.includes(s));
    const step = common.length ? common[common.length - 1] : null;
    const at = (data) => data.rows.filter(r => step === null || r.step === step).slice(0, 8);
    page.append(el("h2", {}, step === null ? "Logged rollouts (no step logged by both)" : `Logged rollouts at step ${step}`),
      el("div", {class: "two"}, el("div", {}, el("h3", {}, da.name), sampleTable(at(sa))), el("div", {}, el("h3", {}, db.name), sampleTable(at(sb)))));
  } catch (err) { showError(page, err); }
}
render();
