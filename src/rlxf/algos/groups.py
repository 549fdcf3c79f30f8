"""Per-group statistics of sequence scores; a group is the rows sharing a ``group_ids`` value
(the responses to one prompt)."""

from __future__ import annotations

import torch


def group_stats(scores: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For every row: (sum, mean, unbiased std) of the scores of its group, and the group size.

    Returns ``(group_sum, group_mean, group_std, group_size)``, each [B]. A group of one row has std 0
    (not NaN).
    """
    _, inverse = torch.unique(group_ids, return_inverse=True)
    num_groups = int(inverse.max()) + 1 if inverse.numel() else 0
    scores = scores.float()
    sums = torch.zeros(num_groups, dtype=scores.dtype, device=scores.device).index_add_(0, inverse, scores)
    sizes = torch.zeros_like(sums).index_add_(0, inverse, torch.ones_like(scores))
    means = sums / sizes
    squares = torch.zeros_like(sums).index_add_(0, inverse, (scores - means[inverse]).square())
    stds = (squares / (sizes - 1).clamp(min=1)).sqrt()
    return sums[inverse], means[inverse], stds[inverse], sizes[inverse]


def groups_with_signal(scores: torch.Tensor, group_ids: torch.Tensor, atol: float = 1e-8) -> torch.Tensor:
    """[B] bool: True for rows whose group's scores are not all equal (DAPO dynamic sampling keeps these).

    A group whose rows all scored the same has zero group-relative advantage everywhere, so it only
    dilutes the batch. Groups of one row are dropped too (no spread).
    """
    _, _, std, _ = group_stats(scores, group_ids)
    return std > atol
