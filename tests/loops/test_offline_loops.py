"""Each offline loop (sft, dpo, reward_model) runs 2 steps end to end and writes the RL loop's run
files; the trained reward model then serves as the reward of an RL run."""

import json

import pytest
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

from rlxf.config import load_config
from rlxf.loops import get_loop
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
    assert eval_key in summary["initial_eval"] and eval_key in summary["final_eval"]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert "train/loss" in rows[1] and "train/grad_norm" in rows[1] and eval_key in rows[2]
    assert load_config(run_dir / "config.yaml").loop == loop
    model = auto_class.from_pretrained(run_dir / "checkpoints" / "step_000002" / model_name)
    assert sum(p.numel() for p in model.parameters()) > 0


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
                                "eval.reward={function: arithmetic}"])
    get_loop("rl")(config, write=lambda _: None)
    row = [json.loads(line) for line in (tmp_path / "rl" / "metrics.jsonl").read_text().splitlines()][1]
    assert "reward/reward_model" in row and "eval/accuracy" in row
