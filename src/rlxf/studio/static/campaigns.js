"use strict";
nav("/campaigns");
const page = document.getElementById("page");

function importForm(done) {
  const name = el("input", {name: "name", placeholder: "campaign name", required: true});
  const overlap = el("input", {type: "number", name: "overlap", value: 1, min: 1, max: 100});
  const file = el("input", {type: "file", name: "file", accept: ".jsonl,.json,.txt", required: true});
  const status = el("span", {class: "muted"});
  return el("form", {class: "filters", id: "import-form", onsubmit: async e => {
    e.preventDefault();
    try {
      const text = await file.files[0].text();
      const made = await api("/api/campaigns/import", {name: name.value, overlap: Number(overlap.value), jsonl: text, source: file.files[0].name});
      status.textContent = `imported ${made.pairs} pairs`; done();
    } catch (err) { status.replaceChildren(el("span", {class: "error"}, err.message)); }
  }}, el("label", {class: "field"}, "name", name), el("label", {class: "field"}, "labellers per pair", overlap),
     el("label", {class: "field"}, "JSONL of pairs ({prompt, chosen, rejected} or {prompt, responses})", file),
     el("button", {class: "primary", type: "submit"}, "Import"), status);
}

function sampleForm(done) {
  const input = (name, attrs) => el("input", {name, ...attrs});
  const fields = {name: input("name", {placeholder: "campaign name"}), checkpoint: input("checkpoint", {placeholder: "runs/x/checkpoints/step_000040/policy", size: 40}),
    prompts: input("prompts", {placeholder: "prompts.jsonl", size: 24}), n: input("n", {type: "number", value: 2, min: 2}),
    temperature: input("temperature", {type: "number", value: 1.0, step: "any"}), max_new_tokens: input("max_new_tokens", {type: "number", value: 32}),
    limit: input("limit", {type: "number", value: 100}), overlap: input("overlap", {type: "number", value: 1, min: 1}),
    // auto: an instruct checkpoint gets its chat template; "no" for a checkpoint trained on raw prompts
    chat_template: el("select", {name: "chat_template"}, el("option", {value: "auto"}, "auto (when the checkpoint has one)"),
      el("option", {value: "yes"}, "yes"), el("option", {value: "no"}, "no (raw prompt)"))};
  const status = el("span", {class: "muted"});
  const CHOICE = {auto: null, yes: true, no: false};
  return el("form", {class: "filters", id: "sample-form", onsubmit: async e => {
    e.preventDefault(); status.textContent = "sampling…";
    const body = {};
    for (const [key, node] of Object.entries(fields)) body[key] = node.type === "number" ? Number(node.value) : node.value;
    body.chat_template = CHOICE[body.chat_template];
    try { const made = await api("/api/campaigns/sample", body); status.textContent = `sampled ${made.pairs} pairs`; done(); }
    catch (err) { status.replaceChildren(el("span", {class: "error"}, err.message)); }
  }}, Object.entries(fields).map(([key, node]) => el("label", {class: "field"}, key.replace("_", " "), node)),
     el("button", {class: "primary", type: "submit"}, "Sample"), status);
}

async function act(path, body, status) {
  status.textContent = "working…";
  try {
    const out = await api(path, body);
    status.textContent = out.run_dir ? `training started: run ${out.run_dir.split("/").pop()} (${out.export.exported} pairs)`
      : `${out.exported} pairs exported (${out.no_majority} without a majority, ${out.unlabelled} unlabelled) → ${out.path}`;
  } catch (err) { status.replaceChildren(el("span", {class: "error"}, err.message)); }
}

async function render() {
  try {
    const campaigns = await api("/api/campaigns");
    const table = el("table", {id: "campaigns"}, el("tr", {}, ["campaign", "source", "pairs", "labelled pairs", "labels", "labellers", "overlap", ""].map(h => el("th", {}, h))));
    for (const c of campaigns) {
      const status = el("div", {class: "muted"});
      table.append(el("tr", {},
        el("td", {}, el("a", {href: `/label?campaign=${c.id}`}, c.name)), el("td", {}, c.checkpoint || c.source),
        el("td", {class: "num"}, c.pairs), el("td", {class: "num"}, c.labelled_pairs), el("td", {class: "num"}, c.labels),
        el("td", {class: "num"}, c.labellers), el("td", {class: "num"}, c.overlap),
        el("td", {}, el("a", {href: `/label?campaign=${c.id}`}, "Label"), " · ", el("a", {href: `/agreement?campaign=${c.id}`}, "AI agreement"), " · ",
          el("a", {href: `/api/campaigns/${c.id}/preferences.jsonl`, download: `${c.name}.jsonl`}, "download JSONL"), " ",
          el("button", {onclick: () => act(`/api/campaigns/${c.id}/export`, {}, status)}, "Export"), " ",
          el("button", {onclick: () => act(`/api/campaigns/${c.id}/train`, {kind: "reward_model"}, status)}, "Train reward model"), " ",
          el("button", {onclick: () => act(`/api/campaigns/${c.id}/train`, {kind: "dpo"}, status)}, "Train DPO"), status)));
    }
    page.replaceChildren(el("h1", {}, "Preference labelling"),
      campaigns.length ? table : el("p", {class: "muted"}, "No campaign yet: import pairs or sample them from a checkpoint below."),
      el("h2", {}, "Import pairs"), el("div", {class: "card"}, importForm(render)),
      el("h2", {}, "Sample pairs from a checkpoint"), el("div", {class: "card"}, sampleForm(render)));
  } catch (err) { showError(page, err); }
}
render();
