"""Each offline loop (sft, dpo, reward_model) runs 2 steps end to end and writes the RL loop's run
files; the trained reward model then serves as the reward of an RL run."""

import json
import math

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

from rlxf.checked_config import load_config
from rlxf.loops import get_loop
from rlxf.rewards.registry import build_reward
from tests.conftest import small_overrides

PAIRS = ["data.task=arithmetic_preferences", "data.task_args={digits: 2, b_digits: 1}",
         "preference.steps=2", "preference.batch_size=8", "preference.micro_batch_size=4"]
LOOPS = {
    "sft": (["sft.steps=2"], "policy", AutoModelForCausalLM, "eval/accuracy"),
    "dpo": ([*PAIRS, "sft.steps=2"], "policy", AutoModelForCausalLM, "eval/preference_accuracy"),
    "reward_model": ([*PAIRS, "sft.steps=2"], "reward_model", AutoModelForSequenceClassification, "eval/accuracy"),
}


def run_loop(loop, run_dir, model_dir, extra=()):
    overrides, *_ = LOOPS[loop]
    config = load_config(None, [*small_overrides(run_dir, model_dir), f"loop={loop}", *overrides, *extra])
    return get_loop(loop)(config, write=lambda _: None)


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_offline_loop_writes_a_complete_run(tmp_path, tiny_model_dir, loop):
    _, model_name, auto_class, eval_key = LOOPS[loop]
    run_dir = tmp_path / loop
    summary = run_loop(loop, run_dir, tiny_model_dir)
    assert summary["steps"] == 2 and json.loads((run_dir / "summary.json").read_text()) == summary
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    # the summary's evaluations are the logged ones, held-out numbers in range
    assert summary["initial_eval"][eval_key] == rows[0][eval_key] and summary["final_eval"][eval_key] == rows[2][eval_key]
    assert all(0.0 <= r[eval_key] <= 1.0 for r in (rows[0], rows[2]))
    for row in rows[1:]:
        assert row["train/loss"] > 0 and row["train/grad_norm"] > 0
    if loop == "dpo":  # step 1's policy is its reference: every margin is 0, the loss -log sigmoid(0)
        assert rows[1]["train/loss"] == pytest.approx(math.log(2), abs=1e-5)
        assert rows[2]["train/loss"] != pytest.approx(math.log(2), abs=1e-5)
        # held out: the start is its own reference (margin 0, loss ln 2); two steps move both
        assert rows[0]["eval/reward_margin"] == pytest.approx(0.0, abs=1e-6) and rows[0]["eval/preference_loss"] == pytest.approx(math.log(2))
        assert abs(rows[2]["eval/reward_margin"]) > 1e-4
        assert rows[2]["eval/preference_loss"] != pytest.approx(rows[0]["eval/preference_loss"], abs=1e-5)
    if loop == "reward_model":  # the held-out pair loss and margin move with two steps of training
        assert rows[2]["eval/loss"] != rows[0]["eval/loss"] and rows[2]["eval/margin"] != rows[0]["eval/margin"]
    assert load_config(run_dir / "config.yaml").loop == loop
    # the saved model is the trained one: step 2's weights are not step 1's
    first, last = (auto_class.from_pretrained(run_dir / "checkpoints" / f"step_00000{s}" / model_name).state_dict()
                   for s in (1, 2))
    assert first.keys() == last.keys() and any(not torch.equal(first[k], last[k]) for k in first)


def test_dpo_resume_continues_exactly(tmp_path, tiny_model_dir):
    from safetensors.torch import load_file

    run_loop("dpo", tmp_path / "whole", tiny_model_dir)
    run_loop("dpo", tmp_path / "split", tiny_model_dir, ["preference.steps=1"])
    config = load_config(tmp_path / "split" / "config.yaml", ["preference.steps=2"])
    get_loop("dpo")(config, resume=True, write=lambda _: None)
    final = "checkpoints/step_000002/policy/model.safetensors"
    a, b = load_file(tmp_path / "whole" / final), load_file(tmp_path / "split" / final)
    assert all((a[k] == b[k]).all() for k in a)


def test_a_trained_reward_model_is_an_rl_reward(tmp_path, tiny_model_dir):
    run_loop("reward_model", tmp_path / "rm", tiny_model_dir)
    rm_path = tmp_path / "rm" / "checkpoints" / "step_000002" / "reward_model"
    config = load_config(None, [*small_overrides(tmp_path / "rl", tiny_model_dir, steps=1), "sft.steps=0",
                                "reward.function=reward_model", f"reward.kwargs={{path: {rm_path}}}",
                                "eval.reward={function: arithmetic}", "logging.samples_every=1",
                                "logging.samples_per_step=16"])
    get_loop("rl")(config, write=lambda _: None)
    row = [json.loads(line) for line in (tmp_path / "rl" / "metrics.jsonl").read_text().splitlines()][1]
    # every trajectory's reward is the trained reward model's score of its prompt and response
    samples = [json.loads(line) for line in (tmp_path / "rl" / "samples.jsonl").read_text().splitlines()]
    scorer = build_reward("reward_model", {"path": str(rm_path)})
    # the log shows special tokens (tracking/rollout_rows.py); the reward read the text without them
    specials = AutoTokenizer.from_pretrained(tiny_model_dir).all_special_tokens

    def words(text: str) -> str:
        for token in specials:
            text = text.replace(token, "")
        return text

    scores = scorer.score([words(s["prompt"]) for s in samples], [words(s["response"]) for s in samples],
                          [{}] * len(samples)).scores
    assert len(samples) == 16 and [s["reward"] for s in samples] == pytest.approx(scores, abs=1e-4)
    assert row["reward/mean"] == pytest.approx(sum(scores) / 16, abs=1e-4) == row["reward/reward_model"]
    assert len({round(x, 4) for x in scores}) > 1  # the responses get different scores
    assert 0.0 <= row["eval/accuracy"] <= 1.0


def test_ipo_and_cdpo_through_the_dpo_loop(tmp_path, tiny_model_dir):
    """Step 1's policy is its reference (every log-ratio difference h is 0), so each loss and the size of
    its gradient follow from DPO's by hand: d/dh of -log sigmoid(beta h) is -beta/2; cDPO's smoothed loss
    (eps = 0.25) has (1 - 2 eps) of that gradient; IPO's (h - 1/(2 beta))^2 has -1/beta, 2/beta^2 times DPO's."""
    beta, eps = 0.1, 0.25
    first = {}
    for name, extra in {"dpo": [], "cdpo": [f"preference.loss.label_smoothing={eps}"], "ipo": []}.items():
        run_loop("dpo", tmp_path / name, tiny_model_dir, ["sft.steps=0", "preference.steps=1", "data.eval_size=4",
                                                           f"preference.loss.name={name}", *extra])
        first[name] = json.loads((tmp_path / name / "metrics.jsonl").read_text().splitlines()[1])
    assert first["dpo"]["train/loss"] == pytest.approx(math.log(2), abs=1e-6)
    assert first["cdpo"]["train/loss"] == pytest.approx(math.log(2), abs=1e-6)
    assert first["ipo"]["train/loss"] == pytest.approx((1 / (2 * beta)) ** 2, rel=1e-5)
    dpo_norm = first["dpo"]["train/grad_norm"]
    assert dpo_norm > 0
    assert first["cdpo"]["train/grad_norm"] == pytest.approx((1 - 2 * eps) * dpo_norm, rel=1e-4)
    assert first["ipo"]["train/grad_norm"] == pytest.approx(2 / beta**2 * dpo_norm, rel=1e-4)
