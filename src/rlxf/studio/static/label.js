"use strict";
nav("/campaigns");
const page = document.getElementById("page");
const campaignId = Number(param("campaign"));
const KEYS = {a: "A", "1": "A", ArrowLeft: "A", b: "B", "2": "B", ArrowRight: "B", t: "tie", "3": "tie", x: "both_bad", "4": "both_bad", s: "skip", "0": "skip"};
let current = null, busy = false;

function labeller() { return localStorage.getItem("rlxf-labeller") || ""; }

function askName() {
  const input = el("input", {id: "labeller-name", placeholder: "your name", required: true, maxlength: 64, value: labeller()});
  page.replaceChildren(el("h1", {}, "Who is labelling?"), el("form", {class: "card filters", onsubmit: e => {
    e.preventDefault(); localStorage.setItem("rlxf-labeller", input.value.trim()); start();
  }}, el("label", {class: "field"}, "labeller name (stored with every label)", input), el("button", {class: "primary", type: "submit"}, "Start labelling")));
  input.focus();
}

function showProgress(p) {
  const bar = document.getElementById("bar");
  bar.style.width = `${Math.min(100, (100 * p.labels) / Math.max(1, p.needed))}%`;
  document.getElementById("progress").textContent = `${p.labels} of ${p.needed} labels (${p.pairs} pairs × ${p.overlap} labellers) · ${p.mine} by you`;
}

function showPair(data) {
  current = data.pair;
  showProgress(data.progress);
  const box = document.getElementById("pair-box");
  if (!current) {
    box.replaceChildren(el("div", {class: "card", id: "done"}, el("h2", {}, "No pair left for you in this campaign."),
      el("p", {}, el("a", {href: "/campaigns"}, "Back to the campaigns"), " · ", el("a", {href: `/agreement?campaign=${campaignId}`}, "AI agreement"))));
    return;
  }
  box.replaceChildren(
    el("div", {class: "card"}, el("h3", {}, `Prompt · pair ${current.position + 1}`), fencedText(current.prompt, {id: "prompt"})),
    el("div", {class: "pair"},
      el("div", {class: "card response"}, el("h3", {}, "A ", el("kbd", {}, "A"), " ", el("kbd", {}, "←")), fencedText(current.left, {id: "left"})),
      el("div", {class: "card response"}, el("h3", {}, "B ", el("kbd", {}, "B"), " ", el("kbd", {}, "→")), fencedText(current.right, {id: "right"}))));
  box.dataset.token = current.token;
  document.getElementById("reason").value = "";
  window.scrollTo(0, 0);  // a labeller who scrolled down a long response starts the next pair at its prompt
}

async function send(path, body) {
  if (busy) return;
  busy = true; setButtons(true);
  const status = document.getElementById("status");
  try { showPair(await api(path, body)); status.textContent = ""; }
  catch (err) { status.replaceChildren(el("span", {class: "error"}, err.message)); }
  finally { busy = false; setButtons(false); }
}

function verdict(v) {
  if (!current) return;
  send("/api/labels", {token: current.token, labeller: labeller(), verdict: v, reason: document.getElementById("reason").value});
}

function undo() { send(`/api/campaigns/${campaignId}/undo`, {labeller: labeller()}); }

function setButtons(disabled) { document.querySelectorAll(".actions button").forEach(b => { b.disabled = disabled; }); }

async function start() {
  if (!labeller()) return askName();
  const info = await api(`/api/campaigns/${campaignId}?labeller=${encodeURIComponent(labeller())}`).catch(err => { showError(page, err); });
  if (!info) return;
  const button = (text, key, v, fn) => el("button", {"data-verdict": v, onclick: fn || (() => verdict(v))}, text, " ", el("kbd", {}, key));
  page.replaceChildren(
    el("h1", {}, info.name, " ", el("span", {class: "muted"}, `· labelling as ${labeller()} `),
      el("button", {class: "small", onclick: () => { localStorage.removeItem("rlxf-labeller"); askName(); }}, "change name")),
    el("div", {class: "progress"}, el("div", {id: "bar"})), el("p", {class: "muted", id: "progress"}),
    el("div", {id: "pair-box"}),
    el("div", {class: "actions"}, button("A is better", "A", "A"), button("B is better", "B", "B"), button("Tie", "T", "tie"),
      button("Both bad", "X", "both_bad"), button("Skip", "S", "skip"), button("Undo last", "U", "undo", undo)),
    el("label", {class: "field"}, "reason (optional, saved with the label)", el("textarea", {id: "reason", rows: 2, cols: 80, maxlength: 2000})),
    el("p", {id: "status"}),
    el("p", {class: "muted"}, "Keys: A or 1 or ← = A better · B or 2 or → = B better · T or 3 = tie · X or 4 = both bad · S or 0 = skip · U = undo the last label. Left/right order is random per pair; every label is saved before the next pair shows."));
  showPair(await api(`/api/campaigns/${campaignId}/next?labeller=${encodeURIComponent(labeller())}`));
}

document.addEventListener("keydown", e => {
  if (e.target.matches("input, textarea") || e.ctrlKey || e.metaKey || e.altKey) return;
  const key = e.key.length === 1 ? e.key.toLowerCase() : e.key;
  if (key === "u") { e.preventDefault(); undo(); }
  else if (KEYS[key] && document.getElementById("pair-box")) { e.preventDefault(); verdict(KEYS[key]); }
});
start();
