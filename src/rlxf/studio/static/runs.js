"use strict";
nav("/");
const page = document.getElementById("page");
const chosen = new Set();  // kept across refreshes

async function render() {
  try {
    const runs = await api("/api/runs");
    const compare = el("button", {class: "primary", disabled: chosen.size !== 2, onclick: () => {
      const [a, b] = [...chosen];
      location.href = `/compare?a=${encodeURIComponent(a)}&b=${encodeURIComponent(b)}`;
    }}, "Compare the two selected");
    const table = el("table", {id: "runs"}, el("tr", {}, ["", "run", "status", "steps", "reward", "held-out accuracy", "KL", "loss", "alarms"].map(h => el("th", {}, h))));
    for (const run of runs) {
      const box = el("input", {type: "checkbox", checked: chosen.has(run.name), "aria-label": `select ${run.name}`, onchange: e => {
        e.target.checked ? chosen.add(run.name) : chosen.delete(run.name);
        compare.disabled = chosen.size !== 2;
      }});
      table.append(el("tr", {},
        el("td", {}, box), el("td", {}, el("a", {href: `/run?name=${encodeURIComponent(run.name)}`}, run.name)),
        el("td", {}, el("span", {class: `badge ${run.status}`}, run.status)), el("td", {class: "num"}, fmt(run.steps)),
        el("td", {class: "num"}, fmt(run.latest["reward/mean"])), el("td", {class: "num"}, fmt(run.latest["eval/accuracy"])),
        el("td", {class: "num"}, fmt(run.latest["policy/kl"] ?? run.latest["policy/approx_kl"], 4)), el("td", {class: "num"}, fmt(run.latest["train/loss"])),
        el("td", {}, run.alarms.length ? el("span", {class: "badge alarm"}, `${run.alarms.length} alarm steps`) : "")));
    }
    page.replaceChildren(el("h1", {}, "Runs"),
      runs.length ? table : el("p", {class: "muted"}, "No runs here yet: a folder with metrics.jsonl appears as soon as `rlxf train` starts."),
      el("p", {}, compare, " ", el("span", {class: "muted"}, "Tick two runs to see them side by side.")));
  } catch (err) { showError(page, err); }
  setTimeout(render, 5000);  // new runs (one started from a campaign, say) appear by themselves
}
render();
