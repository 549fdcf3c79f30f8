"""A campaign sampled from a checkpoint with rlxf's engine, the `rlxf studio --export` command, and the
train action running `rlxf train` (reward model) on an export."""

from __future__ import annotations

import json
import time

import pytest
import yaml

from rlxf.cli import main
from rlxf.data.preferences import read_preference_rows
from rlxf.rollout.sampling import SamplingParams
from rlxf.studio.campaigns import create_campaign, get_campaign, parse_pairs_jsonl
from rlxf.studio.export import export_campaign, preference_rows
from rlxf.studio.labelling import next_pair, submit_label
from rlxf.studio.limits import InputError
from rlxf.studio.sampling import sample_campaign_pairs
from rlxf.studio.store import Store
from rlxf.studio.train_action import campaign_overrides, start_training
from tests.studio.helpers import pair_rows, pairs_jsonl, write_jsonl


def test_sampled_pairs_are_distinct_reproducible_and_recorded(tmp_path, tiny_model_dir):
    prompts = write_jsonl(tmp_path / "prompts.jsonl", [{"prompt": f"{a}+{a % 7}=", "answer": str(a + a % 7)}
                                                       for a in range(10, 16)])
    params = SamplingParams(n=4, temperature=1.0, max_new_tokens=5)
    pairs, sampling = sample_campaign_pairs(tiny_model_dir, str(prompts), params, limit=5, seed=3)
    again, _ = sample_campaign_pairs(tiny_model_dir, str(prompts), params, limit=5, seed=3)
    assert [(p["prompt"], a, b) for p, a, b in pairs] == [(p["prompt"], a, b) for p, a, b in again]
    assert 1 <= len(pairs) <= 5 and all(a != b for _, a, b in pairs)  # one pair per prompt at most
    assert {p["prompt"] for p, _, _ in pairs} <= {f"{a}+{a % 7}=" for a in range(10, 15)}  # limit=5 prompts
    assert sampling == {"n": 4, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_new_tokens": 5, "seed": 3,
                        "prompts": str(prompts), "chat_template": True}  # the tiny tokenizer has a template
    store = Store(tmp_path / "s.sqlite")
    cid = create_campaign(store, "sampled", pairs, "sampled", checkpoint=tiny_model_dir, sampling=sampling)
    shown = next_pair(store, cid, "ann")
    submit_label(store, shown["token"], "ann", "A")
    row = preference_rows(store, cid)[0][0]
    assert row["studio"]["checkpoint"] == tiny_model_dir and row["studio"]["sampling"]["seed"] == 3
    assert row["answer"] == str(sum(int(x) for x in row["prompt"].rstrip("=").split("+")))
    assert campaign_overrides(get_campaign(store, cid), [row]) == [f"model.path={tiny_model_dir}", "sft.steps=0"]
    with pytest.raises(InputError, match="n >= 2"):
        sample_campaign_pairs(tiny_model_dir, str(prompts), SamplingParams(n=1), limit=2)


def label_all_with_truth(store: Store, cid: int) -> None:
    while (shown := next_pair(store, cid, "ann")) is not None:
        a, b = (int(x) for x in shown["prompt"].rstrip("=").split("+"))
        submit_label(store, shown["token"], "ann", "A" if shown["left"] == str(a + b) else "B")


def test_rlxf_studio_export_command(tmp_path, capsys):
    store = Store(tmp_path / "runs" / "studio.sqlite")
    cid = create_campaign(store, "adds", parse_pairs_jsonl(pairs_jsonl(pair_rows()), "p"), "import")
    label_all_with_truth(store, cid)
    out = tmp_path / "prefs.jsonl"
    assert main(["studio", str(tmp_path / "runs"), "--export", str(cid), str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["exported"] == 8
    assert [r["chosen"] for r in read_preference_rows(str(out))] == [r["chosen"] for r in pair_rows()]
    assert main(["studio", str(tmp_path / "runs"), "--export", "7", str(out)]) == 2
    assert "no campaign with id 7" in capsys.readouterr().err


@pytest.mark.parametrize(("kind", "saved"), [("reward_model", "reward_model"), ("dpo", "policy")])
def test_train_action_runs_the_recipe_on_the_export(tmp_path, tiny_model_dir, kind, saved):
    store = Store(tmp_path / "runs" / "studio.sqlite")
    cid = create_campaign(store, "adds", parse_pairs_jsonl(pairs_jsonl(pair_rows()), "p"), "import")
    label_all_with_truth(store, cid)
    exported = export_campaign(store, cid, tmp_path / "prefs.jsonl")
    started = start_training(kind, exported["path"], tmp_path / "runs", "adds", [
        f"model.path={tiny_model_dir}", "sft.steps=0", "preference.steps=2", "preference.batch_size=4",
        "preference.micro_batch_size=4", "data.eval_size=2", "eval.every=0", "checkpoint.every=2",
        "logging.sinks=[jsonl]", "logging.plot=false"])
    deadline = time.monotonic() + 240
    summary = tmp_path / "runs" / started["run_dir"].split("/")[-1] / "summary.json"
    while not summary.exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert summary.exists(), open(started["log"]).read()[-2000:]
    result = json.loads(summary.read_text())
    assert 0.0 <= result["final_eval"]["eval/accuracy"] <= 1.0
    metrics = [json.loads(line) for line in open(summary.parent / "metrics.jsonl")]
    assert [m["step"] for m in metrics if "train/loss" in m] == [1, 2]
    assert (summary.parent / "checkpoints" / "step_000002" / saved).is_dir()
    config = yaml.safe_load((summary.parent / "config.yaml").read_text())
    assert config["loop"] == kind and config["data"]["path"] == exported["path"]
