"""The RL loop end to end on the tiny model: run directory, metrics, checkpoints, summary, resume."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from rlxf.checked_config import load_config
from rlxf.loops.rl import train_rl
from tests.conftest import assert_trains, small_overrides
from tests.core import helpers


def read_metrics(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_loop_writes_a_complete_run(tmp_path, sft_model_dir, algorithm):
    run_dir = tmp_path / algorithm
    config = load_config(None, [*small_overrides(run_dir, sft_model_dir, steps=2), f"algorithm.name={algorithm}"])
    summary = train_rl(config, write=lambda _: None)
    assert set(summary) >= {"initial_eval_accuracy", "final_eval_accuracy", "steps", "wall_seconds", "peak_rss_mb"}
    assert summary["peak_rss_mb"] > 100  # torch and a model are resident
    assert summary["steps"] == 2 and 0.0 <= summary["final_eval_accuracy"] <= 1.0
    assert json.loads((run_dir / "summary.json").read_text()) == summary
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert_trains(rows)
    for key in ("reward/mean", "policy/entropy", "response/length_mean", "time/step", "time/generation", "time/train"):
        assert key in rows[1], key
    if algorithm == "ppo":
        assert rows[1]["critic/loss"] > 0 and rows[1]["critic/grad_norm"] > 0 and "time/values" in rows[1]
    assert "eval/accuracy" in rows[2]
    saved = load_config(run_dir / "config.yaml")
    assert saved.algorithm.name == algorithm
    # A checkpointed policy loads with plain transformers.
    model = AutoModelForCausalLM.from_pretrained(run_dir / "checkpoints" / "step_000002" / "policy")
    assert sum(p.numel() for p in model.parameters()) > 0


def test_kl_to_reference_is_logged_when_used(tmp_path, sft_model_dir):
    """Step 1 samples from the starting policy, which is the reference: KL 0. Step 1's update moves the
    policy, so step 2's KL to the (frozen) reference is positive; a reference that shared the policy's
    weights would still read 0 there."""
    run_dir = tmp_path / "kl"
    config = load_config(None, [*small_overrides(run_dir, sft_model_dir, steps=2), "algorithm.kl_coef=0.01",
                                "train.optim.lr=1e-3"])
    train_rl(config, write=lambda _: None)
    rows = read_metrics(run_dir)
    assert_trains(rows)
    assert rows[1]["policy/kl"] == pytest.approx(0.0, abs=1e-6)
    assert rows[2]["policy/kl"] > 1e-4
    assert (run_dir / "reference" / "config.json").exists()


def test_failing_reward_keeps_the_run(tmp_path, tiny_model_dir):
    from rlxf.roles.reward import RewardError

    run_dir = tmp_path / "fail"
    config = load_config(None, [*small_overrides(run_dir, tiny_model_dir, steps=3),
                                "reward.function=tests.core.helpers:length_reward"])
    # length_reward works; switch to one that fails on the second call
    helpers.CALLS["n"] = 0
    config.reward.function = "tests.core.helpers:fails_on_the_third_call"
    with pytest.raises(RewardError, match="fails_on_the_third_call"):
        train_rl(config, write=lambda _: None)
    # step 1 finished and was checkpointed; step 2 failed before any training
    assert (run_dir / "checkpoints" / "step_000001" / "state.json").exists()
    assert [r["step"] for r in read_metrics(run_dir)] == [0, 1]


def test_resume_after_sigkill_matches_an_uninterrupted_run(tmp_path, sft_model_dir):
    steps = 6
    whole_dir, killed_dir = tmp_path / "whole", tmp_path / "killed"
    # Prepend, not replace: the runs must import the rlxf under test (a worktree's or the mutation check's copy)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([os.getcwd(), *sys.path])}
    base = [sys.executable, "-m", "rlxf.cli", "train", "threads=1"]

    subprocess.run([*base, *small_overrides(whole_dir, sft_model_dir, steps)], check=True, env=env,
                   capture_output=True)

    proc = subprocess.Popen([*base, *small_overrides(killed_dir, sft_model_dir, steps)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    target = killed_dir / "checkpoints" / "step_000003"
    while not target.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert target.exists(), "the run never reached step 3"
    assert not (killed_dir / "summary.json").exists(), "the run finished before it could be killed"

    subprocess.run([*base, "--resume", str(killed_dir)], check=True, env=env, capture_output=True)

    final = "checkpoints/step_000006/policy/model.safetensors"
    a, b = load_file(whole_dir / final), load_file(killed_dir / final)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    drop = ("time/", "samples")
    clean = [
        [{k: v for k, v in row.items() if not k.startswith(drop)} for row in read_metrics(d)]
        for d in (whole_dir, killed_dir)
    ]
    for x, y in zip(*clean):
        assert x == y, {k: (x.get(k), y.get(k)) for k in set(x) | set(y) if x.get(k) != y.get(k)}
    assert len(clean[0]) == len(clean[1])
    assert_trains(read_metrics(whole_dir))  # the runs compared did learn: equal runs, not equal zeros
    whole_summary = json.loads((whole_dir / "summary.json").read_text())
    killed_summary = json.loads((killed_dir / "summary.json").read_text())
    assert whole_summary["final_eval_accuracy"] == killed_summary["final_eval_accuracy"] > 0


def test_a_kill_between_checkpoint_and_metrics_line_loses_no_metrics(tmp_path, sft_model_dir):
    run_dir = tmp_path / "run"
    config = load_config(None, small_overrides(run_dir, sft_model_dir, steps=2))
    train_rl(config, write=lambda _: None)
    rows = read_metrics(run_dir)
    assert_trains(rows)
    # The process died right after step 2's checkpoint: its metrics line never reached the file.
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:-1]))
    train_rl(config, resume=True, write=lambda _: None)
    restored = read_metrics(run_dir)
    assert [r["step"] for r in restored] == [0, 1, 2]
    untimed = [{k: v for k, v in r.items() if not k.startswith("time/")} for r in (rows[-1], restored[-1])]
    assert untimed[0] == untimed[1] and "monitor/length" in untimed[1]
    assert restored[-1]["time/train"] == rows[-1]["time/train"]  # timings up to the save are kept
