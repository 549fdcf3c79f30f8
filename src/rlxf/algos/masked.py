"""Masked reductions over [B, R] per-token tensors.

``mask`` is the loss mask: 1 where the policy produced the token. Positions where it is 0 never
contribute, even when they hold NaN or inf (``torch.where`` is used rather than multiplication).
"""

from __future__ import annotations

import torch


def masked_fill_zero(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``values`` where ``mask`` is 1, exactly 0 elsewhere."""
    return torch.where(mask.bool(), values, torch.zeros_like(values))


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of ``values`` over masked positions (all of them, or along ``dim``)."""
    kept = masked_fill_zero(values, mask)
    return kept.sum() if dim is None else kept.sum(dim=dim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum over masked positions divided by their count (count clamped to >= 1, so empty -> 0)."""
    count = mask.sum() if dim is None else mask.sum(dim=dim)
    return masked_sum(values, mask, dim) / count.clamp(min=1)


def masked_whiten(
    values: torch.Tensor, mask: torch.Tensor, eps: float, divide_by_std: bool = True
) -> torch.Tensor:
    """``(values - mean) / (std + eps)`` with mean and (unbiased) std over all masked positions.

    With ``divide_by_std=False`` only the mean is subtracted. Zero outside the mask. A single masked
    position has no spread: its std is taken as 0.
    """
    mean = masked_mean(values, mask)
    centred = values - mean
    if divide_by_std:
        count = mask.sum()
        variance = masked_sum(centred.square(), mask) / (count - 1).clamp(min=1)
        centred = centred / (variance.sqrt() + eps)
    return masked_fill_zero(centred, mask)


def last_token_index(mask: torch.Tensor) -> torch.Tensor:
    """[B] index of the last position where ``mask`` is 1; -1 for rows without any."""
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    return torch.where(mask.bool(), positions, torch.full_like(positions, -1)).max(dim=1).values
