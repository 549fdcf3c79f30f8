"""How far the rollout engine's log-probs are from the trainer's, logged every step (``policy/...``).

Over the loss tokens, with ``d_t = old_t - rollout_t`` (``old`` = the trainer's log-prob of the sampled
token, ``rollout`` = the engine's; ``r_t = exp(d_t) = pi_train / pi_rollout``):

* ``rollout_log_prob_diff`` / ``_max`` — mean and max of ``|d_t|``;
* ``rollout_kl_k1`` — ``mean(-d_t)``: KL(pi_rollout || pi_train) by k1 (the tokens were sampled from
  pi_rollout); unbiased, can be negative;
* ``rollout_kl_k3`` — ``mean(r_t - 1 - d_t)``: the same KL by k3; >= 0, low variance (veRL's ``k3_kl``);
* ``rollout_masked_fraction`` — the fraction of loss tokens a rollout mask dropped (0 without one);
* ``rollout_truncated_fraction`` — the fraction whose TIS weight was capped (0 without TIS).

Means are over this micro-batch's loss tokens; the step's value averages them (``_max``: the largest).
"""

from __future__ import annotations

import torch

from rlxf.algos.masked import masked_fill_zero, masked_mean

_MAX_LOG_RATIO = 20.0  # exp(20) ~ 4.9e8: one wild token must not overflow the k3 mean


def mismatch_metrics(
    old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, mask: torch.Tensor,
    keep: torch.Tensor | None = None, truncated: torch.Tensor | None = None,
) -> dict[str, float]:
    """The metrics above as python floats. ``keep``: [B, R] 1 where a rollout mask kept a token;
    ``truncated``: [B, R] True where TIS capped a token's weight."""
    with torch.no_grad():
        diff = masked_fill_zero(old_log_probs.float() - rollout_log_probs.float(), mask)
        log_ratio = diff.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
        bool_mask = mask.bool()
        dropped = torch.zeros_like(diff) if keep is None else (1.0 - keep.float())
        capped = torch.zeros_like(diff) if truncated is None else truncated.float()
        return {
            "rollout_log_prob_diff": float(masked_mean(diff.abs(), mask)),
            "rollout_log_prob_diff_max": float(diff.abs()[bool_mask].max()) if bool_mask.any() else 0.0,
            "rollout_kl_k1": float(masked_mean(-diff, mask)),
            "rollout_kl_k3": float(masked_mean(log_ratio.exp() - 1.0 - log_ratio, mask)),
            "rollout_masked_fraction": float(masked_mean(dropped, mask)),
            "rollout_truncated_fraction": float(masked_mean(capped, mask)),
        }
