"""Supervised fine-tuning loss."""

from __future__ import annotations

import torch

from rlxf.algos.aggregation import LossNormaliser, aggregate_loss


def masked_token_nll(
    log_probs: torch.Tensor, mask: torch.Tensor, normaliser: LossNormaliser, mode: str = "token_mean"
) -> torch.Tensor:
    """Negative log-likelihood of the target tokens: ``-log_probs`` [B, R] aggregated over ``mask``.

    With the default ``token_mean`` this micro-batch's share is ``-sum(log_probs on mask) /
    normaliser.num_tokens`` (tokens of the whole mini-batch), so gradient accumulation over
    micro-batches gives the mini-batch's mean token NLL.
    """
    return aggregate_loss(-log_probs, mask, mode, normaliser)
