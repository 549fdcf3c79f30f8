"""DAPO's length handling in the loop: soft overlong reward shaping and the over-length filter.

* shaping (``algorithm.overlong_buffer_len > 0``) adds :func:`rlxf.algos.overlong_shaping_penalty`
  to each sequence score right after the reward, with the generation budget
  ``rollout.max_new_tokens`` as the maximum length;
* filtering (``algorithm.filter_overlong``) zeroes the loss mask of truncated responses after the
  advantages are computed (their rewards still count in their group's baseline; they are not trained on).
"""

from __future__ import annotations

from rlxf.algos import AlgorithmConfig, drop_truncated, overlong_shaping_penalty
from rlxf.batch import TrajectoryBatch


def shape_overlong_rewards(algo: AlgorithmConfig, batch: TrajectoryBatch, max_new_tokens: int) -> dict[str, float]:
    """Add the overlong penalty to ``batch.rewards`` in place; returns its mean and the shaped mean (or nothing)."""
    if algo.overlong_buffer_len <= 0:
        return {}
    penalty = overlong_shaping_penalty(
        batch.response_lengths, max_new_tokens, algo.overlong_buffer_len, algo.overlong_penalty
    )
    batch.rewards = batch.rewards + penalty.to(batch.rewards.device)
    return {"reward/overlong_penalty": float(penalty.mean()), "reward/shaped_mean": float(batch.rewards.mean())}


def filter_overlong(algo: AlgorithmConfig, batch: TrajectoryBatch) -> dict[str, float]:
    """Zero the loss mask of truncated rows in place; returns the filtered fraction (or nothing)."""
    if not algo.filter_overlong:
        return {}
    batch.loss_mask = drop_truncated(batch.loss_mask, batch.truncated.to(batch.loss_mask.device))
    return {"response/filtered_overlong_fraction": float(batch.truncated.float().mean())}
