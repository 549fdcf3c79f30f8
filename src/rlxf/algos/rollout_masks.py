"""Masking against the rollout engine's log-probs: tokens or sequences whose trainer/rollout ratio
leaves a band are dropped from the policy-gradient term (weight 0), not clipped as TIS clips them.

With ``log r_t = old_t - rollout_t`` (``old`` = the trainer's log-prob of the sampled token, ``rollout``
= the engine's) over a row's loss tokens, each mode compares one statistic ``s`` with
``[log low, log high]`` (``AlgorithmConfig.rollout_mask_low/high``; None = the mode's band below):

* ``mis_token``    — ``s = log r_t``; kept tokens weighted by ``r_t``; band [0.5, 2.0]
  (veRL: token IS + ``token_k1`` rejection, "Token-MIS");
* ``mis_sequence`` — ``s = sum_t log r_t`` of the row; kept rows weighted by ``prod_t r_t``; band
  [0.5, 2.0] (veRL "Seq-MIS": sequence IS + ``seq_sum_k1``, its preset band ``0.5_2.0``);
* ``icepop``       — ``s = log r_t``; kept tokens weighted by ``r_t``; band [alpha, beta] = [0.5, 5.0]
  (IcePop, Ring-1T: ``M(k) = k`` for ``k`` in [alpha, beta], 0 outside);
* ``geometric``    — ``s = mean_t log r_t`` of the row (the log of the geometric mean ratio); kept rows
  unweighted; band [0.999, 1.001] (veRL "Geo-RS": ``seq_mean_k1``, its preset band).

A mode that weights (``weighted``) carries its own importance weight, so it excludes ``tis_level``
(the config refuses both); ``geometric`` only masks and goes with any ``tis_level``.

The band is on ``pi_train / pi_rollout``. veRL's ``*_k1`` rejection compares ``-log r`` (the inverse
ratio) with ``[log low, log high]``; for a symmetric band (``low = 1/high``, as veRL's defaults above) the two
agree; for an asymmetric one veRL's ``"low_high"`` keeps ``r`` in ``[1/high, 1/low]``.

Masked tokens keep their place in the loss's normaliser (``LossNormaliser``): a masked token is a token
of weight 0, as in IcePop's objective (``1/|y_i| sum_t M(k_t) ...``). veRL instead removes rejected
tokens from its ``response_mask`` before the update, so its ``token_mean`` divides by the kept tokens.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from rlxf.algos.masked import masked_fill_zero, masked_mean, masked_sum
from rlxf.registry import Registry

_SAFETY = 20.0  # log-ratios are clamped to [-20, 20] before exp (as veRL): exp(20) ~ 4.9e8

Statistic = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class RolloutMask:
    """One masking mode: the per-token statistic (log space), whether kept tokens are weighted by its
    exp, and the band used when the config gives none."""

    statistic: Statistic  # (log_ratio zeroed off the mask, mask) -> [B, R]
    weighted: bool
    default_band: tuple[float, float]


ROLLOUT_MASKS: Registry[RolloutMask | None] = Registry("rollout mask")


def _token(log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return log_ratio


def _sequence_sum(log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return masked_sum(log_ratio, mask, dim=1).unsqueeze(1).expand(mask.shape)


def _sequence_mean(log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return masked_mean(log_ratio, mask, dim=1).unsqueeze(1).expand(mask.shape)


ROLLOUT_MASKS.register("none")(None)
ROLLOUT_MASKS.register("mis_token")(RolloutMask(_token, weighted=True, default_band=(0.5, 2.0)))
ROLLOUT_MASKS.register("mis_sequence")(RolloutMask(_sequence_sum, weighted=True, default_band=(0.5, 2.0)))
ROLLOUT_MASKS.register("icepop")(RolloutMask(_token, weighted=True, default_band=(0.5, 5.0)))
ROLLOUT_MASKS.register("geometric")(RolloutMask(_sequence_mean, weighted=False, default_band=(0.999, 1.001)))


def rollout_mask_band(mode: str, low: float | None, high: float | None) -> tuple[float, float]:
    """The band a mode uses: the config's bounds, each None replaced by the mode's default."""
    spec = ROLLOUT_MASKS.get(mode)
    if spec is None:
        raise ValueError(f"rollout_mask {mode!r} has no band")
    return (spec.default_band[0] if low is None else low, spec.default_band[1] if high is None else high)


@dataclass
class MaskedWeights:
    """``keep``: [B, R] 1 where a loss token stays in the policy-gradient term, 0 where masked (and off
    the loss mask). ``weights``: [B, R] the kept tokens' importance weights (0 elsewhere), or None for an
    unweighted mode."""

    keep: torch.Tensor
    weights: torch.Tensor | None


def rollout_mask_weights(
    old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, mask: torch.Tensor, mode: str,
    low: float | None = None, high: float | None = None,
) -> MaskedWeights | None:
    """The mode's keep-mask and weights (detached), or None for mode ``none``."""
    spec = ROLLOUT_MASKS.get(mode)
    if spec is None:
        return None
    low, high = rollout_mask_band(mode, low, high)
    with torch.no_grad():
        log_ratio = masked_fill_zero(old_log_probs.float() - rollout_log_probs.float(), mask)
        stat = spec.statistic(log_ratio, mask).clamp(-_SAFETY, _SAFETY)
        inside = (stat >= math.log(low)) & (stat <= math.log(high)) & mask.bool()
        keep = inside.float()
        # exp of an out-of-band statistic is never used: where() keeps its inf/0 out of the weights
        weights = torch.where(inside, stat.exp(), torch.zeros_like(stat)) if spec.weighted else None
    return MaskedWeights(keep, weights)
