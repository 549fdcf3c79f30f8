"""Acceptance runs for environments and rewards (make test-slow): the tool-use recipe, the reasoning-gym
recipe and the arithmetic-chain recipe (credit per turn) each raise their reward on the tiny model."""

import json
from pathlib import Path

import pytest

from rlxf.checked_config import load_config
from rlxf.loops.rl import train_rl

RECIPES = Path(__file__).parents[1] / "src" / "rlxf" / "recipes"


def run_recipe(tmp_path, name):
    config = load_config(RECIPES / f"{name}.yaml", [f"run_dir={tmp_path / name}", "logging.progress_bar=false", "threads=2"])
    summary = train_rl(config, write=print)
    rows = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
    rewards = [r["reward/mean"] for r in rows if "reward/mean" in r]
    return summary, rewards


@pytest.mark.slow
def test_tool_use_recipe_learns_to_call_the_calculator(tmp_path):
    summary, rewards = run_recipe(tmp_path, "tool_use")
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    print({"first5_reward": first, "last5_reward": last, **summary})
    assert last >= first + 0.2, (first, last, summary)
    assert summary["final_eval_accuracy"] >= summary["initial_eval_accuracy"] + 0.15, summary


@pytest.mark.slow
def test_reasoning_gym_recipe_raises_reward(tmp_path):
    pytest.importorskip("reasoning_gym", reason="reasoning-gym is an optional extra (pip install 'rlxf[reasoning]')")
    summary, rewards = run_recipe(tmp_path, "reasoning_gym")
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    print({"first5_reward": first, "last5_reward": last, **summary})
    assert last >= first + 0.1, (first, last, summary)
    assert summary["final_eval_accuracy"] > summary["initial_eval_accuracy"], summary


@pytest.mark.slow
def test_openai_agent_recipe_trains_an_agent_written_against_the_openai_client(tmp_path):
    pytest.importorskip("openai", reason="the openai client is in the dev extra")
    summary, rewards = run_recipe(tmp_path, "openai_agent")
    rows = [json.loads(line) for line in (tmp_path / "openai_agent" / "metrics.jsonl").read_text().splitlines()]
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    print({"first5_reward": first, "last5_reward": last, **summary})
    assert last >= first + 0.2, (first, last, summary)
    assert summary["final_eval_accuracy"] >= summary["initial_eval_accuracy"] + 0.15, summary
    trained = [r for r in rows if "policy/rollout_log_prob_diff_max" in r]
    assert max(r["policy/rollout_log_prob_diff_max"] for r in trained) < 1e-3  # trained on what was sampled
    assert all(r["reward/agent_error"] == 0 and r["reward/history_mismatch"] == 0 for r in trained)


@pytest.mark.slow
def test_arithmetic_chain_recipe_raises_the_steps_solved(tmp_path):
    # docs/environments.md: eval/reward (steps right of 4) +0.13 after 30 steps from the 200-step SFT start, +1.72 after 60 from 400 (this run: 200 + 60, not measured)
    summary, rewards = run_recipe(tmp_path, "arithmetic_chain")
    rows = [json.loads(line) for line in (tmp_path / "arithmetic_chain" / "metrics.jsonl").read_text().splitlines()]
    evals = [r["eval/reward"] for r in rows if "eval/reward" in r]
    print({"eval_reward": evals, **summary})
    assert evals[-1] >= evals[0] + 0.1, (evals, summary)
