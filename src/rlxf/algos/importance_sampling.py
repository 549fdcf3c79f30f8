"""Truncated importance sampling (TIS) against the rollout engine's log-probs.

The rollout engine (vLLM, the built-in engine, an older policy in asynchronous training) samples with
``pi_rollout``; the trainer's ``old_log_probs`` come from ``pi_old`` (the proximal policy of decoupled
PPO). Their mismatch biases the gradient; TIS (Yao et al., "Your efficient RL framework secretly
brings you off-policy RL training", 2025) reweights each token's loss by a capped, detached ratio:

* ``token``    — ``w_t = min(exp(old_t - rollout_t), cap)``
* ``sequence`` — ``w_i = min(exp(sum_t (old_t - rollout_t)), cap)`` over the row's loss tokens,
  the same weight on each of its tokens.
* ``none``     — no reweighting.
"""

from __future__ import annotations

import math

import torch

from rlxf.algos.masked import masked_fill_zero, masked_sum

TIS_LEVELS = ("none", "token", "sequence")


def truncated_is_weights(
    old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, mask: torch.Tensor, level: str, cap: float
) -> torch.Tensor | None:
    """[B, R] detached weights (0 outside the mask), or None for level ``none``."""
    if level not in TIS_LEVELS:
        raise ValueError(f"unknown tis_level {level!r}; known: {', '.join(TIS_LEVELS)}")
    if level == "none":
        return None
    with torch.no_grad():
        log_ratio = _level_log_ratio(old_log_probs, rollout_log_probs, mask, level)
        weights = log_ratio.clamp(max=math.log(cap)).exp()
        return masked_fill_zero(weights, mask)


def truncated_by_tis(
    old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, mask: torch.Tensor, level: str, cap: float
) -> torch.Tensor | None:
    """[B, R] bool: the loss tokens whose TIS weight is capped (ratio above ``cap``); None for ``none``."""
    if level == "none":
        return None
    with torch.no_grad():
        log_ratio = _level_log_ratio(old_log_probs, rollout_log_probs, mask, level)
        return (log_ratio > math.log(cap)) & mask.bool()


def _level_log_ratio(
    old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, mask: torch.Tensor, level: str
) -> torch.Tensor:
    log_ratio = masked_fill_zero(old_log_probs.float() - rollout_log_probs.float(), mask)
    if level == "sequence":
        log_ratio = masked_sum(log_ratio, mask, dim=1).unsqueeze(1).expand(mask.shape)
    return log_ratio
