"""PPO's schedule: ``epochs`` passes over the rollout batch, each shuffled into mini-batches."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from rlxf.batch import TrajectoryBatch
from rlxf.train.micro_batches import micro_batches


def ppo_mini_batches(
    batch: TrajectoryBatch, mini_batch_size: int, epochs: int, generator: torch.Generator
) -> Iterator[TrajectoryBatch]:
    for _ in range(epochs):
        order = torch.randperm(len(batch), generator=generator)
        for rows in torch.split(order, mini_batch_size):
            yield batch.select(rows)


def needs_old_log_probs(rollout_batch_size: int, mini_batch_size: int, epochs: int) -> bool:
    """Only the first optimizer step of a step sees the sampling policy's weights unchanged.

    With one epoch over one mini-batch the policy before the update *is* the current policy, so the
    old log-probs are the current ones detached and need no separate forward pass.
    """
    return epochs > 1 or rollout_batch_size > mini_batch_size


__all__ = ["micro_batches", "needs_old_log_probs", "ppo_mini_batches"]
