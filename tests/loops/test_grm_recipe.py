"""The grm recipe (a judge trained with GRPO): its wiring on a few steps, the trained judge serving as the
`judge` reward, and (slow) the acceptance run: held-out verdict accuracy >= 0.90 and >= SFT start + 0.15."""

import json

import pytest

from rlxf.config import DEFAULT_RECIPE, load_config
from rlxf.data.judge_task import POINTWISE_RUBRIC
from rlxf.loops.rl import train_rl
from rlxf.rewards.judge import JudgeReward
from tests.conftest import small_overrides

GRM_RECIPE = DEFAULT_RECIPE.parent / "grm.yaml"


@pytest.mark.parametrize("form", ["pointwise", "pairwise"])
def test_grm_recipe_trains_a_judge_that_serves_as_a_reward(tmp_path, tiny_model_dir, form):
    overrides = [*small_overrides(tmp_path, tiny_model_dir, steps=2), "rollout.max_new_tokens=12",
                 f"data.task_args.form={form}", "data.task_args.digits=2"]
    summary = train_rl(load_config(GRM_RECIPE, overrides), write=lambda _: None)
    assert summary["steps"] == 2 and 0.0 <= summary["final_eval_accuracy"] <= 1.0
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if "reward/malformed" in r]
    assert len(trained) == 2 and all(-0.5 <= r["reward/mean"] <= 1.0 for r in trained)
    assert all(r["reward/mean"] == pytest.approx(r["reward/correct"] - 0.5 * r["reward/malformed"]) for r in trained)
    if form == "pointwise":  # the checkpoint is a judge for the `judge` reward, with the task's own prompt
        judge = JudgeReward(backend="engine", rubric=POINTWISE_RUBRIC, min_score=0, max_score=1, default_score=0.5,
                            backend_kwargs={"path": str(tmp_path / "checkpoints" / "step_000002" / "policy"),
                                            "chat_template": False, "max_new_tokens": 12})
        assert judge.judge_prompt("12+3=", "15", {}) == "check 12+3=15\n"
        out = judge.score(["12+3=", "12+3="], ["15", "16"], [{}, {}])
        assert len(out.scores) == 2 and all(s in (0.0, 0.5, 1.0) for s in out.scores)


@pytest.mark.slow
def test_grm_recipe_reaches_its_targets(tmp_path):  # measured: 0.65 after SFT -> 0.90 at 250 (docs/rewards.md)
    summary = train_rl(load_config(GRM_RECIPE, [f"run_dir={tmp_path}", "logging.progress_bar=false"]), write=print)
    assert summary["final_eval_accuracy"] >= 0.90, summary
    assert summary["final_eval_accuracy"] - summary["initial_eval_accuracy"] >= 0.15, summary
