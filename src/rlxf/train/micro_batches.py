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
                 "old_log_probs", "ref_log_probs", "teacher_log_probs", "values", "token_rewards", "advantages",
                 "returns"):
        value = getattr(batch, name)
        if value is not None:
            setattr(trimmed, name, value[:, :response_end])
    return trimmed


def group_order(batch: TrajectoryBatch) -> torch.Tensor:
    """An order of ``batch``'s rows that keeps each group (``group_ids``: the samples of one prompt)
    together, groups by their longest response, rows within a group by their own length.

    Consecutive micro-batches then hold whole groups, so the training pass computes each group's
    prompt once (train/log_probs.py's shared-prompt forward) and pads responses only to their
    group's longest. Sorting rows by length alone scatters a group over every micro-batch: on
    SmolLM2-135M at 4 groups of 8 and micro-batches of 8, 15.0 s of CPU per update against 13.3 s
    whole groups (fp32; docs/benchmarks.md). Row order does not change the update (each micro-batch
    adds its share of the mini-batch loss), only the float rounding of the sum."""
    lengths = batch.response_lengths
    if len(batch) == 0:
        return torch.arange(0)
    _, group = torch.unique(batch.group_ids, return_inverse=True)
    groups, position = int(group.max()) + 1, torch.arange(len(batch))
    longest = torch.zeros(groups, dtype=lengths.dtype).scatter_reduce(0, group, lengths, "amax", include_self=False)
    # groups of equal longest response keep the order they first appear in (the shuffled mini-batch's)
    first = torch.zeros(groups, dtype=torch.long).scatter_reduce(0, group, position, "amin", include_self=False)
    order = torch.argsort(lengths, stable=True)  # the least significant key first
    for key in (first[group], longest[group]):
        order = order[torch.argsort(key[order], stable=True)]
    return order


def split_rows(indices: torch.Tensor, size: int) -> list[torch.Tensor]:
    return list(torch.split(indices, size))


def token_budget_rows(prompt_lengths: list[int], response_lengths: list[int], max_tokens: int) -> list[list[int]]:
    """Consecutive rows, as many per chunk as fit ``max_tokens`` once padded to the chunk's longest
    prompt and response (a row longer than the budget gets a chunk of its own)."""
    chunks: list[list[int]] = []
    current: list[int] = []
    prompt_width = response_width = 0
    for row, (p, r) in enumerate(zip(prompt_lengths, response_lengths)):
        wider_p, wider_r = max(prompt_width, p), max(response_width, r)
        if current and (len(current) + 1) * (wider_p + wider_r) > max_tokens:
            chunks.append(current)
            current, wider_p, wider_r = [], p, r
        current.append(row)
        prompt_width, response_width = wider_p, wider_r
    return chunks + ([current] if current else [])


def micro_batches(batch: TrajectoryBatch, size: int, max_tokens: int | None = None) -> list[TrajectoryBatch]:
    """Consecutive chunks of ``size`` rows, each trimmed of shared padding. With ``max_tokens``
    (``train.micro_batch_tokens``) chunks hold as many rows as fit that many padded tokens instead: on
    a length-sorted batch, many short rows share one pass and the few long ones another, so fewer
    passes compute less padding."""
    if max_tokens is None:
        chunks = split_rows(torch.arange(len(batch)), size)
    else:
        rows = token_budget_rows(batch.prompt_mask.sum(1).tolist(), batch.response_lengths.tolist(), max_tokens)
        chunks = [torch.tensor(r) for r in rows]
    return [trim_padding(batch.select(rows)) for rows in chunks]
