"""Judge training from preference labels: pairs become pairwise judge rows whose label is the preferred letter."""

import json

import pytest

from rlxf.checked_config import load_config
from rlxf.data.files import DatasetError
from rlxf.data.judge_preferences import preference_judge_task
from rlxf.loops.rl import train_rl
from rlxf.rewards.judge_agreement import JudgeAgreementReward, position_report
from tests.conftest import small_overrides

PAIRS = [{"prompt": f"{a}+1=", "chosen": str(a + 1), "rejected": str(a + 2)} for a in range(8)]
CHAT = {"chosen": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
        "rejected": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "go away"}]}


@pytest.fixture
def pairs_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("pairs") / "prefs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [*PAIRS, CHAT]))
    return path


def test_training_rows_show_each_pair_once_with_the_chosen_response_on_either_side(pairs_file):
    splits = preference_judge_task(seed=0, eval_size=3, path=str(pairs_file), template="{prompt} A:{first} B:{second}\n")
    assert len(splits.train) == 6
    for row, pair in zip(splits.train, PAIRS):
        letter = row["label"]
        shown = {"A": pair["chosen"], "B": pair["rejected"]} if letter == "A" else {"A": pair["rejected"], "B": pair["chosen"]}
        assert row["prompt"] == f"{pair['prompt']} A:{shown['A']} B:{shown['B']}\n" and row["form"] == "pairwise"
    assert {r["label"] for r in splits.train} == {"A", "B"}  # the coin puts the chosen one on both sides


def test_held_out_rows_hold_every_pair_in_both_orders(pairs_file):
    splits = preference_judge_task(seed=0, eval_size=3, path=str(pairs_file), template="{prompt} A:{first} B:{second}\n")
    assert [(r["pair"], r["order"], r["label"]) for r in splits.eval] == [
        ("eval-0", 0, "A"), ("eval-0", 1, "B"), ("eval-1", 0, "A"), ("eval-1", 1, "B"), ("eval-2", 0, "A"), ("eval-2", 1, "B")]
    assert splits.eval[0]["prompt"] == "6+1= A:7 B:8\n" and splits.eval[1]["prompt"] == "6+1= A:8 B:7\n"
    assert splits.eval[4]["prompt"] == "user: hi A:hello B:go away\n"  # a chat prompt, as role lines
    always_a = ["[[A]]"] * len(splits.eval)
    out = JudgeAgreementReward().score([""] * 6, always_a, splits.eval)
    assert out.scores == [1.0, 0.0] * 3
    assert position_report(["A"] * 6, splits.eval) == {"position_bias": 0.5, "position_consistency": 0.0}


def test_solve_first_shows_the_responses_only_in_the_second_turn(pairs_file):
    row = preference_judge_task(seed=0, eval_size=3, path=str(pairs_file), protocol="solve_first").eval[0]
    assert row["prompt"] == row["turns"][0]["user"] == "Answer this prompt yourself first, briefly:\n6+1=\n"
    assert "Response A: 7\nResponse B: 8\n" in row["turns"][1]["user"] and "7" not in row["prompt"]


def test_bad_rows_and_protocols_are_named(tmp_path, pairs_file):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(PAIRS[0]) + "\n" + json.dumps({"prompt": "x", "chosen": "y"}) + "\n")
    with pytest.raises(DatasetError, match="bad.jsonl:2"):
        preference_judge_task(seed=0, eval_size=1, path=str(bad))
    with pytest.raises(ValueError, match="unknown protocol 'vibes'"):
        preference_judge_task(seed=0, eval_size=1, path=str(pairs_file), protocol="vibes")


def test_a_judge_trains_on_preference_labels(tmp_path, tiny_model_dir, pairs_file):
    overrides = [*small_overrides(tmp_path, tiny_model_dir, steps=2), "data.task=preference_judge",
                 f"data.path={pairs_file}", "data.eval_size=3", "sft.steps=0", "reward.function=judge_agreement",
                 "data.task_args={template: '{prompt} A:{first} B:{second}\\n'}", "rollout.max_new_tokens=8"]
    summary = train_rl(load_config(None, overrides), write=lambda _: None)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if "reward/correct" in r]
    assert summary["steps"] == 2 and len(trained) == 2
    assert all(r["reward/mean"] == pytest.approx(r["reward/correct"] - 0.5 * r["reward/malformed"]) for r in trained)
