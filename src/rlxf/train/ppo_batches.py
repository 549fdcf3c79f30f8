"""PPO's schedule: ``epochs`` passes over the rollout batch, each shuffled into mini-batches."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial

import torch

from rlxf.batch import TrajectoryBatch
from rlxf.train.data_parallel import WHOLE, DataShard
from rlxf.train.micro_batches import group_order, micro_batches


def ppo_mini_batches(
    batch: TrajectoryBatch, mini_batch_size: int, epochs: int, generator: torch.Generator
) -> Iterator[TrajectoryBatch]:
    for _ in range(epochs):
        order = torch.randperm(len(batch), generator=generator)
        for rows in torch.split(order, mini_batch_size):
            yield batch.select(rows)


def ppo_update(
    engine, batch: TrajectoryBatch, mini_batch_size: int, micro_batch_size: int, epochs: int,
    generator: torch.Generator, loss_of: Callable[..., tuple[torch.Tensor, dict[str, float]]],
    shard: DataShard = WHOLE, micro_batch_tokens: int | None = None, max_response_len: int | None = None,
) -> list[dict[str, float]]:
    """PPO epochs over shuffled mini-batches: one optimizer step of ``engine`` per mini-batch.

    ``loss_of(micro, normaliser=...)`` returns a micro-batch's share of the mini-batch loss; the
    normaliser is built once per mini-batch (algos.LossNormaliser). One metrics dict per step.
    ``micro_batch_tokens`` sizes micro-batches by padded tokens instead of rows (single process).
    Data-parallel ranks pass their ``shard``: every rank draws the same global mini-batches and
    trains on its slice of each, normalised by the global counts (train/data_parallel.py).
    ``max_response_len`` is the generation budget (``rollout.max_new_tokens``, or the environment's
    ``env.max_total_tokens``): the constant of ``seq_mean_token_sum_norm`` (Dr. GRPO). The engines pad
    only to the batch's longest response, so that width would change the step size from batch to
    batch; None falls back to it (callers without a budget, e.g. a hand-built batch).
    """
    constant_len = max_response_len if max_response_len is not None else batch.response_ids.shape[1]
    history = []
    for mini in ppo_mini_batches(batch, mini_batch_size, epochs, generator):
        # Whole groups together, groups by their longest response (micro_batches.group_order): each
        # micro-batch computes its groups' prompts once and pads little; ordered before sharding, so
        # the ranks' micro-batches are the single process's micro-batches.
        mini = mini.select(group_order(mini))
        local = shard.rows(mini, micro_batch_size)
        normaliser = shard.normaliser(local.loss_mask, max_response_len=constant_len)
        # Every rank holds the same number of rows, so each runs the same number of micro-batches; a
        # token budget would give ranks different counts, so data-parallel ranks split by rows.
        micros = micro_batches(local, micro_batch_size, micro_batch_tokens if shard.world_size == 1 else None)
        history.append(engine.optimizer_step(micros, partial(loss_of, normaliser=normaliser)))
    return history


def needs_old_log_probs(rollout_batch_size: int, mini_batch_size: int, epochs: int) -> bool:
    """Only the first optimizer step of a step sees the sampling policy's weights unchanged.

    With one epoch over one mini-batch the policy before the update *is* the current policy, so the
    old log-probs are the current ones detached and need no separate forward pass.
    """
    return epochs > 1 or rollout_batch_size > mini_batch_size


__all__ = ["micro_batches", "needs_old_log_probs", "ppo_mini_batches"]
