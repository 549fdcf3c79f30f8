"""The critic's (value model's) loss for PPO."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from rlxf.algos.aggregation import LossNormaliser, aggregate_loss
from rlxf.algos.masked import masked_fill_zero, masked_mean

if TYPE_CHECKING:
    from rlxf.algos.config import AlgorithmConfig


def value_loss(
    cfg: AlgorithmConfig,
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    normaliser: LossNormaliser,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped value loss (PPO2 baselines): per token
    ``0.5 * max((V - R)**2, (V_old + clip(V - V_old, -value_clip, value_clip) - R)**2)``,
    or ``0.5 * (V - R)**2`` when ``cfg.value_clip`` is None; aggregated with ``cfg.loss_aggregation``
    and the mini-batch normaliser (this micro-batch's share, see :mod:`rlxf.algos.aggregation`).
    Inputs are zeroed outside ``mask`` first (NaN on padding reaches neither loss nor gradient).
    ``cfg.value_coef`` is NOT applied here (the critic has its own optimizer).
    """
    values, old_values, returns = (masked_fill_zero(x, mask) for x in (values, old_values, returns))
    unclipped = (values - returns).square()
    metrics: dict[str, float] = {}
    if cfg.value_clip is None:
        per_token = 0.5 * unclipped
    else:
        clipped_values = old_values + (values - old_values).clamp(-cfg.value_clip, cfg.value_clip)
        clipped = (clipped_values - returns).square()
        per_token = 0.5 * torch.maximum(unclipped, clipped)
        metrics["value_clip_fraction"] = float(masked_mean((clipped > unclipped).float(), mask))
    loss = aggregate_loss(per_token, mask, cfg.loss_aggregation, normaliser)
    metrics["value_loss"] = float(loss.detach())
    metrics["value_mean"] = float(masked_mean(values.detach(), mask))
    metrics["value_error"] = float(masked_mean((values.detach() - returns).abs(), mask))
    return loss, metrics
