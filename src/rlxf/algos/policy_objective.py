"""The full policy objective the trainer back-propagates for one micro-batch.

``loss = agg(w * surrogate) + kl_coef * agg(kl) - entropy_coef * agg(entropy)``

* ``surrogate`` — the per-token loss of ``cfg.policy_loss`` (``POLICY_LOSSES``);
* ``w``         — when rollout log-probs are given: truncated importance-sampling weights
  (``cfg.tis_level``) times the keep-mask and weights of ``cfg.rollout_mask`` (``rollout_masks.py``:
  a masked token's ``w`` is 0, so it adds nothing to the loss or the gradient); 1 otherwise;
* ``kl``        — ``cfg.kl_estimator`` of policy vs reference, capped per token at ``cfg.kl_cap``; only
  when ``ref_log_probs`` is given and the KL is not already in the reward (``kl_in_reward=False``);
* ``entropy``   — the policy's per-token entropy, when given;
* ``agg``       — :func:`aggregate_loss` with ``cfg.loss_aggregation`` and the mini-batch normaliser,
  so the returned value is this micro-batch's share of the mini-batch loss.

Inputs are zeroed outside ``mask`` before anything is computed, so NaN or inf on padding reaches
neither the loss nor the gradient. Metrics are python floats: plain means over THIS micro-batch's loss tokens (not shares), for logging.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from rlxf.algos.aggregation import LossNormaliser, aggregate_loss
from rlxf.algos.importance_sampling import truncated_by_tis, truncated_is_weights
from rlxf.algos.kl import kl_per_token
from rlxf.algos.masked import masked_fill_zero, masked_mean
from rlxf.algos.mismatch_metrics import mismatch_metrics
from rlxf.algos.policy_losses import POLICY_LOSSES
from rlxf.algos.rollout_masks import rollout_mask_weights

if TYPE_CHECKING:
    from rlxf.algos.config import AlgorithmConfig


def policy_loss(
    cfg: AlgorithmConfig,
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    normaliser: LossNormaliser,
    rollout_log_probs: torch.Tensor | None = None,
    ref_log_probs: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    *,
    kl_coef: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """(scalar loss share, metrics). ``kl_coef`` overrides ``cfg.kl_coef`` (adaptive controller)."""
    agg = cfg.loss_aggregation
    # zero every input outside the mask first, so NaN/inf on padding reaches neither value nor gradient
    log_probs, old_log_probs, advantages, rollout_log_probs, ref_log_probs, entropy = (
        None if x is None else masked_fill_zero(x, mask)
        for x in (log_probs, old_log_probs, advantages, rollout_log_probs, ref_log_probs, entropy)
    )
    per_token, stats = POLICY_LOSSES.get(cfg.policy_loss)(cfg, log_probs, old_log_probs, advantages, mask)
    metrics: dict[str, float] = {}
    if rollout_log_probs is not None:
        per_token = per_token * _rollout_correction(cfg, old_log_probs, rollout_log_probs, mask, metrics)
    pg_loss = aggregate_loss(per_token, mask, agg, normaliser)
    loss = pg_loss
    metrics["pg_loss"] = float(pg_loss.detach())

    coef = cfg.kl_coef if kl_coef is None else kl_coef
    if ref_log_probs is not None and not cfg.kl_in_reward:
        kl = kl_per_token(cfg.kl_estimator, log_probs, ref_log_probs, cfg.kl_cap)
        kl_loss = aggregate_loss(kl, mask, agg, normaliser)
        loss = loss + coef * kl_loss
        metrics["kl"] = float(masked_mean(kl.detach(), mask))
        metrics["kl_loss"] = float(kl_loss.detach())
    if entropy is not None:
        entropy_loss = aggregate_loss(entropy, mask, agg, normaliser)
        loss = loss - cfg.entropy_coef * entropy_loss
        metrics["entropy"] = float(masked_mean(entropy.detach(), mask))

    with torch.no_grad():
        ratio = stats.pop("ratio")
        keep = mask.bool()
        if keep.any():
            metrics["ratio_max"] = float(ratio[keep].max())
            metrics["ratio_min"] = float(ratio[keep].min())
        for name, indicator in stats.items():
            metrics[name] = float(masked_mean(indicator, mask))
        metrics["approx_kl"] = float(masked_mean(kl_per_token("k3", log_probs.detach(), old_log_probs), mask))
    return loss, metrics


def _rollout_correction(
    cfg: AlgorithmConfig, old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, mask: torch.Tensor,
    metrics: dict[str, float],
) -> torch.Tensor | float:
    """The detached per-token factor for the rollout/trainer mismatch (TIS weights, rollout mask); the
    mismatch metrics go into ``metrics``."""
    factor: torch.Tensor | float = 1.0
    weights = truncated_is_weights(old_log_probs, rollout_log_probs, mask, cfg.tis_level, cfg.tis_cap)
    if weights is not None:
        factor = weights
        metrics["tis_weight_mean"] = float(masked_mean(weights, mask))
        metrics["tis_weight_max"] = float(masked_fill_zero(weights, mask).max())
    masked = rollout_mask_weights(
        old_log_probs, rollout_log_probs, mask, cfg.rollout_mask, cfg.rollout_mask_low, cfg.rollout_mask_high
    )
    if masked is not None:
        factor = factor * (masked.keep if masked.weights is None else masked.weights)
        if masked.weights is not None:
            metrics["rollout_mask_weight_mean"] = float(masked_mean(masked.weights, masked.keep))
    truncated = truncated_by_tis(old_log_probs, rollout_log_probs, mask, cfg.tis_level, cfg.tis_cap)
    metrics.update(mismatch_metrics(
        old_log_probs, rollout_log_probs, mask, None if masked is None else masked.keep, truncated
    ))
    return factor
