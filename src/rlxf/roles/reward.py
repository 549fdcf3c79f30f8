"""Reward role: scores a batch with the configured reward; a failing or hanging reward is named."""

from __future__ import annotations

import torch

from rlxf.batch import TrajectoryBatch
from rlxf.rewards.guarded import GuardedReward, RewardError

__all__ = ["RewardError", "RewardRole"]


class RewardRole(GuardedReward):
    """The training reward as a role: :class:`GuardedReward` plus filling a batch's rewards."""

    def score_batch(self, batch: TrajectoryBatch, prompts: list[str], responses: list[str]) -> dict[str, float]:
        """Fill ``batch.rewards`` and each row's reward components; return mean reward metrics."""
        for row, length in zip(batch.metadata, batch.response_lengths.tolist()):
            row["response_tokens"] = int(length)
        out = self.score(prompts, responses, batch.metadata)
        batch.rewards = torch.tensor(out.scores, dtype=torch.float32)
        metrics = {"reward/mean": float(batch.rewards.mean())}
        for name, values in out.components.items():
            for row, value in zip(batch.metadata, values):
                row.setdefault("reward_components", {})[name] = value
            metrics[f"reward/{name}"] = sum(values) / len(values)
        return metrics
