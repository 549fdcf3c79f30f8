"""Reward-hacking monitors, logged every RL step (``monitor/*`` metrics).

* ``monitor/reward``          the training reward (mean over the step's samples);
* ``monitor/verifier``        a held-out verifier's mean score on the *same* samples (``monitor.verifier``);
* ``monitor/gap``             reward minus verifier;
* ``monitor/length``          mean response length (tokens), ``monitor/length_slope`` its trend per step;
* ``monitor/repetition``      mean fraction of repeated token n-grams in the policy's own tokens;
* ``monitor/kl``              KL to the reference, when the run has one;
* ``monitor/truncated_fraction`` responses that hit the length budget;
* ``monitor/reward_slope``, ``monitor/verifier_slope``  least-squares slopes over the last ``window`` steps;
* ``monitor/alarm``           1 when the reward rises while the verifier falls (slopes beyond
  ``±min_slope``) — the console line then says ALARM.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path

from rlxf.batch import TrajectoryBatch
from rlxf.rewards.guarded import GuardedReward


def slope(values: Sequence[float]) -> float:
    """Least-squares slope of ``values`` against 0, 1, 2, ... (0 for fewer than two values)."""
    n = len(values)
    if n < 2:
        return 0.0
    x_mean, y_mean = (n - 1) / 2, sum(values) / n
    num = sum((i - x_mean) * (y - y_mean) for i, y in enumerate(values))
    return num / sum((i - x_mean) ** 2 for i in range(n))


def repetition_rate(tokens: Sequence[int], n: int = 3) -> float:
    """Fraction of the sequence's n-grams that repeat an earlier one (0 for fewer than n+1 tokens)."""
    grams = [tuple(tokens[i: i + n]) for i in range(len(tokens) - n + 1)]
    return 1.0 - len(set(grams)) / len(grams) if len(grams) > 1 else 0.0


class RewardHackingMonitor:
    def __init__(
        self, decode: Callable[[TrajectoryBatch], tuple[list[str], list[str]]], verifier: GuardedReward | None = None,
        window: int = 8, min_slope: float = 0.0,
    ) -> None:
        self.decode = decode
        self.verifier = verifier
        self.min_slope = min_slope
        self.history: dict[str, deque] = {k: deque(maxlen=window) for k in ("reward", "verifier", "length")}

    def observe(self, batch: TrajectoryBatch, metrics: dict[str, float]) -> dict[str, float]:
        out = {"monitor/reward": float(metrics.get("reward/mean", float(batch.rewards.float().mean())))}
        if self.verifier is not None:
            prompts, responses = self.decode(batch)
            scores = self.verifier.score(prompts, responses, batch.metadata).scores
            out["monitor/verifier"] = sum(scores) / len(scores)
            out["monitor/gap"] = out["monitor/reward"] - out["monitor/verifier"]
        out["monitor/length"] = float(batch.response_lengths.float().mean())
        own_tokens = [row[mask.bool()].tolist() for row, mask in zip(batch.response_ids.cpu(), batch.loss_mask.cpu())]
        out["monitor/repetition"] = sum(map(repetition_rate, own_tokens)) / len(own_tokens)
        if batch.truncated is not None:
            out["monitor/truncated_fraction"] = float(batch.truncated.float().mean())
        if "policy/kl" in metrics:
            out["monitor/kl"] = metrics["policy/kl"]
        for key in self.history:
            if f"monitor/{key}" in out:
                self.history[key].append(out[f"monitor/{key}"])
                out[f"monitor/{key}_slope"] = slope(self.history[key])
        full = len(self.history["reward"]) == self.history["reward"].maxlen
        out["monitor/alarm"] = float(
            full and self.verifier is not None
            and out["monitor/reward_slope"] > self.min_slope and out["monitor/verifier_slope"] < -self.min_slope
        )
        return out


    def restore(self, logged: list[dict]) -> None:
        """Refill the trend windows from logged metrics (a resumed run then logs what the whole run would)."""
        for row in logged:
            for key, values in self.history.items():
                if f"monitor/{key}" in row and row[f"monitor/{key}"] is not None:
                    values.append(row[f"monitor/{key}"])


def build_monitor(config, rollout, resume_step: int | None = None) -> RewardHackingMonitor:
    """From ``config.monitor``; ``rollout`` decodes the samples for the verifier. On resume the trend
    windows are refilled from the run's ``metrics.jsonl`` up to ``resume_step``."""
    from rlxf.rewards.registry import build_reward

    m = config.monitor
    verifier = (GuardedReward(build_reward(m.verifier, m.verifier_kwargs), f"monitor.verifier {m.verifier}",
                              config.reward.timeout_seconds) if m.verifier else None)
    monitor = RewardHackingMonitor(
        lambda batch: (rollout.decode_prompts(batch), rollout.decode_responses(batch)), verifier, m.window, m.min_slope,
    )
    path = Path(config.run_dir) / "metrics.jsonl"
    if resume_step is not None and path.exists():
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        monitor.restore([r for r in rows if 0 < r["step"] <= resume_step])
    return monitor
