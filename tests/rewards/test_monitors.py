"""Reward-hacking monitors: the numbers they log, and the alarm firing on a reward that pays for length."""

import json

import pytest
import torch

from rlxf.batch import TrajectoryBatch
from rlxf.rewards.base import as_reward
from rlxf.rewards.monitors import RewardHackingMonitor, repetition_rate, slope
from rlxf.roles.reward import RewardRole
from tests.conftest import small_overrides


def test_slope_and_repetition():
    assert slope([1.0, 2.0, 3.0]) == 1.0 and slope([3.0, 1.0]) == -2.0 and slope([5.0]) == 0.0
    assert repetition_rate([1, 2, 3, 4]) == 0.0
    assert repetition_rate([7, 7, 7, 7, 7, 7]) == pytest.approx(0.75)  # 4 trigrams, 1 distinct


def _batch(lengths, rewards):
    width = max(lengths)
    mask = torch.tensor([[1] * n + [0] * (width - n) for n in lengths])
    return TrajectoryBatch(
        prompt_ids=torch.ones(len(lengths), 1, dtype=torch.long), prompt_mask=torch.ones(len(lengths), 1, dtype=torch.long),
        response_ids=mask * 5, response_mask=mask, loss_mask=mask, group_ids=torch.arange(len(lengths)),
        truncated=torch.tensor([n == width for n in lengths]), rewards=torch.tensor(rewards),
        metadata=[{"answer": "1"} for _ in lengths],
    )


def test_alarm_when_reward_rises_and_verifier_falls():
    verdicts = iter([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    verifier = RewardRole(as_reward(lambda p, r, m: next(verdicts)), "verifier")
    monitor = RewardHackingMonitor(lambda b: (["p"] * len(b), ["r"] * len(b)), verifier, window=3)
    alarms = []
    for step, reward in enumerate([0.1, 0.5, 0.9, 1.0]):
        out = monitor.observe(_batch([2 + step, 4], [reward, reward]), {"reward/mean": reward, "policy/kl": 0.01})
        alarms.append(out["monitor/alarm"])
    assert alarms == [0.0, 0.0, 1.0, 1.0]  # not before the window is full
    assert out["monitor/verifier"] == 0.0 and out["monitor/gap"] == 1.0 and out["monitor/kl"] == 0.01
    assert out["monitor/length"] == 4.5 and out["monitor/length_slope"] == pytest.approx(0.5)
    assert out["monitor/truncated_fraction"] == 0.5 and out["monitor/repetition"] == pytest.approx((2 / 3 + 0.5) / 2)


def test_no_alarm_when_both_rise():
    verifier = RewardRole(as_reward(lambda p, r, m: [0.5]), "verifier")
    monitor = RewardHackingMonitor(lambda b: (["p"], ["r"]), verifier, window=2)
    outs = [monitor.observe(_batch([3], [x]), {"reward/mean": x}) for x in (0.1, 0.2, 0.3)]
    assert [o["monitor/alarm"] for o in outs] == [0.0, 0.0, 0.0]


def test_monitors_fire_on_a_length_paying_reward(tmp_path, tiny_model_dir):
    """SFT teaches 'a number, then stop'; RL on a reward that pays for length makes the policy ramble,
    the held-out verifier (the arithmetic rule) falls, and the alarm goes off in the metrics and the console."""
    from rlxf.checked_config import load_config
    from rlxf.loops.rl import train_rl

    lines = []
    config = load_config(None, [
        *small_overrides(tmp_path / "run", tiny_model_dir, steps=8), "threads=1", "sft.steps=40",
        "sft.optim.lr=3e-3", "reward.function=length", "reward.kwargs={cap: 12}", "rollout.max_new_tokens=12",
        "train.optim.lr=3e-3", "monitor.verifier=arithmetic", "monitor.window=4", "monitor.min_slope=0.01", "checkpoint.every=0",
        "logging.sinks=[jsonl, console]",
    ])
    train_rl(config, write=lines.append)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()][1:]
    assert rows[-1]["monitor/reward"] > rows[0]["monitor/reward"]
    assert rows[-1]["monitor/verifier"] < rows[0]["monitor/verifier"]
    assert any(r["monitor/alarm"] for r in rows)
    assert any("ALARM" in line for line in lines)
    assert {"monitor/length_slope", "monitor/repetition", "monitor/truncated_fraction"} <= rows[-1].keys()


def test_restore_refills_the_trend_windows():
    monitor = RewardHackingMonitor(lambda b: ([], []), None, window=3)
    monitor.restore([{"step": 1, "monitor/reward": 0.0, "monitor/length": 2.0}, {"step": 2, "monitor/reward": 1.0}])
    out = monitor.observe(_batch([4], [2.0]), {"reward/mean": 2.0})
    assert out["monitor/reward_slope"] == 1.0 and out["monitor/length_slope"] == 2.0
