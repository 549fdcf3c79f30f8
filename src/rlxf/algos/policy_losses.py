"""Per-token policy-gradient surrogates, registered in ``POLICY_LOSSES`` by config name.

Signature: ``(cfg, log_probs, old_log_probs, advantages, mask) -> (per_token_loss [B, R], stats)``
where ``stats`` maps names to [B, R] tensors whose masked mean is reported (e.g. ``clip_fraction``
from a 0/1 indicator). Reweighting, aggregation, KL and entropy are added by
:func:`rlxf.algos.policy_objective.policy_loss`. The ratio is ``exp(log_probs - old_log_probs)``,
its log clamped to [-20, 20].
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from rlxf.algos.masked import masked_mean
from rlxf.registry import Registry

PolicyLossFn = Callable[..., tuple[torch.Tensor, dict[str, torch.Tensor]]]
POLICY_LOSSES: Registry[PolicyLossFn] = Registry("policy loss")

_MAX_LOG_RATIO = 20.0


def clipped_surrogate(
    ratio: torch.Tensor, advantages: torch.Tensor, clip_low: float, clip_high: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``max(-A * ratio, -A * clip(ratio, 1 - clip_low, 1 + clip_high))`` and the 0/1 "clip active" mask."""
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    return torch.maximum(unclipped, clipped), (clipped > unclipped).float()


@POLICY_LOSSES.register("ppo_clip")
def ppo_clip_loss(cfg, log_probs, old_log_probs, advantages, mask):
    """PPO clipped surrogate (Schulman et al. 2017), per token, with asymmetric clip
    ``[1 - clip_low, 1 + clip_high]`` ("clip-higher", DAPO) and optional dual clip (Ye et al. 2020):
    for ``A < 0`` the loss is capped at ``-A * dual_clip``, so a huge ratio cannot blow up."""
    ratio = (log_probs - old_log_probs).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO).exp()
    loss, clipped = clipped_surrogate(ratio, advantages, cfg.clip_low, cfg.clip_high)
    stats = {"clip_fraction": clipped, "ratio": ratio.detach()}
    if cfg.dual_clip is not None:
        cap = -advantages * cfg.dual_clip
        dual = (advantages < 0) & (loss > cap)
        loss = torch.where(dual, cap, loss)
        stats["dual_clip_fraction"] = dual.float()
    return loss, stats


@POLICY_LOSSES.register("gspo")
def gspo_loss(cfg, log_probs, old_log_probs, advantages, mask):
    """GSPO (Zheng et al. 2025): clipped surrogate on the sequence ratio
    ``s_i = exp(mean_t (log_probs - old_log_probs))`` over the row's loss tokens.

    Written in the paper's GSPO-token form ``s_it = sg(s_i) * exp(log_probs_t - sg(log_probs_t))``:
    its value is ``s_i`` on every token and, with per-row advantages and ``seq_mean_token_mean``
    aggregation, its gradient is exactly the sequence-level GSPO gradient.
    """
    log_ratio = (log_probs - old_log_probs).detach()
    seq_log_ratio = masked_mean(log_ratio, mask, dim=1).unsqueeze(1)
    token_log_ratio = seq_log_ratio + log_probs - log_probs.detach()
    ratio = token_log_ratio.clamp(max=_MAX_LOG_RATIO).exp()
    loss, clipped = clipped_surrogate(ratio, advantages, cfg.clip_low, cfg.clip_high)
    return loss, {"clip_fraction": clipped, "ratio": ratio.detach()}


@POLICY_LOSSES.register("cispo")
def cispo_loss(cfg, log_probs, old_log_probs, advantages, mask):
    """CISPO (MiniMax-M1, 2025): ``-sg(clip(ratio, 1 - clip_low, 1 + clip_high)) * A * log_probs``.

    The IS weight is clipped and detached, never the token's gradient: every token keeps contributing.
    """
    ratio = (log_probs - old_log_probs).detach().clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO).exp()
    weight = ratio.clamp(1.0 - cfg.clip_low, 1.0 + cfg.clip_high)
    clipped = (weight != ratio).float()
    return -weight * advantages * log_probs, {"clip_fraction": clipped, "ratio": ratio}
