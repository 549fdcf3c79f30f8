"""Splitting a batch into mini- and micro-batches, and trimming padding nobody needs to compute."""

from __future__ import annotations

import torch

from rlxf.batch import TrajectoryBatch


def trim_padding(batch: TrajectoryBatch) -> TrajectoryBatch:
    """Drop prompt columns that are padding in every row (left) and response columns past the longest response."""
    prompt_start = int((batch.prompt_mask.sum(0) > 0).nonzero().min()) if batch.prompt_mask.any() else 0
    response_end = int(batch.response_mask.sum(1).max())
    trimmed = batch.select(torch.arange(len(batch)))
    trimmed.prompt_ids = batch.prompt_ids[:, prompt_start:]
    trimmed.prompt_mask = batch.prompt_mask[:, prompt_start:]
    for name in ("response_ids", "response_mask", "loss_mask", "rollout_log_probs", "policy_version",
                 "old_log_probs", "ref_log_probs", "values", "token_rewards", "advantages", "returns"):
        value = getattr(batch, name)
        if value is not None:
            setattr(trimmed, name, value[:, :response_end])
    return trimmed


def split_rows(indices: torch.Tensor, size: int) -> list[torch.Tensor]:
    return list(torch.split(indices, size))


def micro_batches(batch: TrajectoryBatch, size: int) -> list[TrajectoryBatch]:
    """Consecutive chunks of ``size`` rows, each trimmed of shared padding."""
    return [trim_padding(batch.select(rows)) for rows in split_rows(torch.arange(len(batch)), size)]
