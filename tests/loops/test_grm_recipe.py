"""The grm recipe (a solve-first judge trained with GRPO): its wiring on a few steps, the trained judge serving as
the `judge` reward with the same two turns, and (slow) the acceptance run: held-out verdict accuracy >= 0.90 and
>= SFT start + 0.15."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlxf.checked_config import load_config
from rlxf.config import DEFAULT_RECIPE
from rlxf.data.judge_task import JUDGE_RUBRICS
from rlxf.loops.rl import train_rl
from rlxf.rewards.judge import JudgeReward
from tests.conftest import small_overrides

GRM_RECIPE = DEFAULT_RECIPE.parent / "grm.yaml"
BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.mark.parametrize("protocol", ["solve_first", "one_turn"])
@pytest.mark.parametrize("form", ["pointwise", "pairwise"])
def test_grm_recipe_trains_a_judge_that_serves_as_a_reward(tmp_path, tiny_model_dir, form, protocol):
    overrides = [*small_overrides(tmp_path, tiny_model_dir, steps=2), "rollout.max_new_tokens=12",
                 f"data.task_args.form={form}", "data.task_args.digits=2", f"data.task_args.protocol={protocol}"]
    if protocol == "one_turn":  # the judge reads question and claim at once: no environment
        overrides += ["env.name=null", "reward.function=judge_agreement", "reward.kwargs={format_penalty: 0.5}"]
    config = load_config(GRM_RECIPE, overrides)
    assert config.data.task_args["protocol"] == protocol
    summary = train_rl(config, write=lambda _: None)
    assert summary["steps"] == 2 and 0.0 <= summary["final_eval_accuracy"] <= 1.0
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if "reward/malformed" in r]
    assert len(trained) == 2 and all(-0.5 <= r["reward/mean"] <= 1.0 for r in trained)
    assert all(r["reward/mean"] == pytest.approx(r["reward/correct"] - 0.5 * r["reward/malformed"]) for r in trained)
    evals = [r for r in rows if "eval/accuracy" in r]  # held-out: accuracy is the verdicts' agreement; pairwise bias
    assert evals and all(r["eval/accuracy"] == pytest.approx(r["eval/reward/correct"]) for r in evals)
    assert all(-1 <= r["eval/reward/first_bias"] <= 1 if form == "pairwise" else r["eval/reward/first_bias"] == 0
               for r in evals)
    if form == "pointwise":  # the checkpoint is a judge for the `judge` reward, shown what it was trained on
        judge = JudgeReward(backend="engine", rubric=JUDGE_RUBRICS[protocol], min_score=0, max_score=1,
                            default_score=0.5, backend_kwargs={"chat_template": False, "max_new_tokens": 12,
                                                               "path": str(tmp_path / "checkpoints" / "step_000002" / "policy")})
        first = {"solve_first": "check 12+3=\n", "one_turn": "check 12+3=15\n"}[protocol]
        assert judge.judge_prompt("12+3=", "15", {}) == first
        out = judge.score(["12+3=", "12+3="], ["15", "16"], [{}, {}])
        assert len(out.scores) == 2 and all(s in (0.0, 0.5, 1.0) for s in out.scores)


@pytest.fixture(scope="module")
def recipe_judge(tmp_path_factory):
    """The grm recipe as shipped, trained once for the slow tests."""
    run_dir = tmp_path_factory.mktemp("grm")
    summary = train_rl(load_config(GRM_RECIPE, [f"run_dir={run_dir}", "logging.progress_bar=false"]), write=print)
    return summary, run_dir / "checkpoints" / f"step_{summary['steps']:06d}" / "policy"


@pytest.mark.slow
@pytest.mark.timeout(3600)  # the judge's SFT and GRPO: ~20 min on one CPU thread
def test_grm_recipe_reaches_its_targets(recipe_judge):  # measured: 0.65 after SFT -> 0.96 at 120 (docs/rewards.md)
    summary, _ = recipe_judge
    assert summary["final_eval_accuracy"] >= 0.90, summary
    assert summary["final_eval_accuracy"] - summary["initial_eval_accuracy"] >= 0.15, summary


@pytest.mark.slow
@pytest.mark.timeout(3600)  # the policy's SFT start and two 40-step runs: ~20 min on one CPU thread
def test_a_policy_rl_trained_against_the_judge_keeps_up_with_the_verifier(recipe_judge, tmp_path):
    """The hacking comparison's (a) and (c) from the default recipe's SFT start (measured: 0.885 and 0.865)."""
    _, judge = recipe_judge
    start = train_rl(load_config(DEFAULT_RECIPE, [f"run_dir={tmp_path / 'start'}", "train.steps=0",
                                                   "logging.progress_bar=false"]), write=print)
    assert start["steps"] == 0
    command = [sys.executable, str(BENCHMARKS / "reward_hacking_comparison.py"), "--steps", "40",
               "--start", str(tmp_path / "start" / "checkpoints" / "step_000000" / "policy"), "--judge", str(judge),
               "--sources", "verifier,trained_judge", "--out", str(tmp_path / "hacking")]
    result = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
    verifier, judged = result["verifier"]["final_accuracy"], result["trained_judge"]["final_accuracy"]
    assert judged >= verifier - 0.05 and judged >= result["trained_judge"]["initial_accuracy"] + 0.15, result
