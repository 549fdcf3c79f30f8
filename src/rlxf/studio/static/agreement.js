"use strict";
nav("/campaigns");
const page = document.getElementById("page");
const campaignId = Number(param("campaign"));
const SAY = {first: "first better", second: "second better", tie: "tie", both_bad: "both bad"};

function judgeForm(done) {
  const recipe = el("input", {name: "recipe", size: 36, placeholder: "recipe.yaml with a `reward` section (judge, ...)"});
  const overrides = el("input", {name: "overrides", size: 36, placeholder: "reward.kwargs.backend=openai ..."});
  const rm = el("input", {name: "reward_model", size: 36, placeholder: "or a reward model folder"});
  const status = el("span", {class: "muted"});
  return el("form", {class: "filters", onsubmit: async e => {
    e.preventDefault(); status.textContent = "judging every pair…";
    try {
      const out = await api(`/api/campaigns/${campaignId}/ai-labels`, {recipe: recipe.value || null,
        overrides: overrides.value.split(/\s+/).filter(Boolean), reward_model: rm.value || null});
      status.textContent = `${out.pairs} pairs judged by ${out.judge}`; done(out.judge);
    } catch (err) { status.replaceChildren(el("span", {class: "error"}, err.message)); }
  }}, el("label", {class: "field"}, "recipe", recipe), el("label", {class: "field"}, "overrides", overrides),
     el("label", {class: "field"}, "reward model", rm), el("button", {class: "primary", type: "submit"}, "Judge the pairs"), status);
}

function stat(label, value, id) { return el("span", {class: "stat"}, el("b", {id}, value), label); }

async function render(judge) {
  try {
    const info = await api(`/api/campaigns/${campaignId}`);
    judge = judge || param("judge") || info.judges[0];
    const pick = el("select", {id: "judge", onchange: e => render(e.target.value)}, info.judges.map(j => el("option", {value: j, selected: j === judge}, j)));
    page.replaceChildren(el("h1", {}, `Human–AI agreement · ${info.name}`),
      el("div", {class: "card"}, judgeForm(render)), info.judges.length ? el("p", {}, "judge: ", pick) : el("p", {class: "muted"}, "No AI labels yet: judge the pairs above."));
    if (!judge) return;
    const a = await api(`/api/campaigns/${campaignId}/agreement?judge=${encodeURIComponent(judge)}`);
    page.append(el("div", {class: "card"}, stat("pairs compared", fmt(a.overall.n), "agree-n"), stat("accuracy (same verdict)", fmt(a.overall.accuracy), "agree-accuracy"),
      stat("Cohen's kappa", fmt(a.overall.kappa), "agree-kappa"),
      el("p", {class: "muted"}, "Tie and both-bad count as 'no preference'. Kappa corrects for chance agreement: 1 perfect, 0 chance.")));
    const per = el("table", {id: "per-labeller"}, el("tr", {}, ["labeller", "pairs", "accuracy", "kappa"].map(h => el("th", {}, h))));
    for (const [who, s] of Object.entries(a.labellers)) per.append(el("tr", {}, el("td", {}, who), el("td", {class: "num"}, s.n), el("td", {class: "num"}, fmt(s.accuracy)), el("td", {class: "num"}, fmt(s.kappa))));
    const dis = el("table", {id: "disagreements"}, el("tr", {}, ["prompt", "first response", "second response", "human", "AI (scores)", "reason"].map(h => el("th", {}, h))));
    const SHOWN = 200;
    for (const d of a.disagreements.slice(0, SHOWN)) dis.append(el("tr", {}, el("td", {}, el("pre", {class: "text"}, d.prompt)), el("td", {}, el("pre", {class: "text"}, d.first)),
      el("td", {}, el("pre", {class: "text"}, d.second)), el("td", {}, `${d.labeller}: ${SAY[d.human] || d.human}`),
      el("td", {}, `${SAY[d.ai] || d.ai} (${fmt(d.score_first)} / ${fmt(d.score_second)})`), el("td", {}, d.reason)));
    // DOM append writes a null as the text "null": the note goes in only when the list is cut
    page.append(el("h2", {}, "Per labeller"), per, el("h2", {}, `Pairs where human and AI disagree (${a.disagreements.length}) — where a reward model gets gamed`));
    if (a.disagreements.length > SHOWN) page.append(el("p", {class: "muted"}, `the first ${SHOWN} shown`));
    page.append(dis);
  } catch (err) { showError(page, err); }
}
render();
