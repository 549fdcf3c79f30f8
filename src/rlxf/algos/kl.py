"""KL(policy || reference) per token, its place (reward or loss), and its coefficient.

Estimators follow Schulman, "Approximating KL divergence" (2020). With ``log_ratio = log p - log q``
(p = policy, q = reference), per token:

* ``k1`` — ``log_ratio``; unbiased, can be negative, high variance.
* ``k2`` — ``0.5 * log_ratio**2``; biased, always >= 0, low variance.
* ``k3`` — ``exp(-log_ratio) + log_ratio - 1`` = ``exp(ref - logp) - (ref - logp) - 1``; unbiased,
  always >= 0, low variance (GRPO's choice for the KL in the loss).

The log-ratio is clamped to [-20, 20] before ``exp`` so a single extreme token cannot overflow.

**Cap** (``AlgorithmConfig.kl_cap``, 10 by default; None = off): every estimate is clamped to
``[-kl_cap, kl_cap]`` per token, as veRL clamps its ``low_var_kl`` (k3). Without it one token with
``|log p/q|`` near 20 gives a k3 of ~4.9e8 (and a gradient as large) that swamps the whole batch's loss.
Beyond the cap a token's KL term is constant: it adds ``kl_coef * kl_cap`` and no gradient.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch

from rlxf.algos.masked import masked_fill_zero, masked_sum
from rlxf.registry import Registry


class KLKnobs(Protocol):
    """The ``AlgorithmConfig`` fields read here. A protocol, not the class: ``algos/config.py`` imports
    ``KL_ESTIMATORS`` to check its names, so this module must not import the config back."""

    kl_estimator: str
    kl_cap: float | None
    kl_coef: float
    kl_target: float | None
    kl_horizon: int


KLEstimator = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
KL_ESTIMATORS: Registry[KLEstimator] = Registry("KL estimator")

_MAX_LOG_RATIO = 20.0


@KL_ESTIMATORS.register("k1")
def kl_k1(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    """``log p - log q`` per token."""
    return log_probs - ref_log_probs


@KL_ESTIMATORS.register("k2")
def kl_k2(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    """``0.5 * (log p - log q)**2`` per token."""
    return 0.5 * (log_probs - ref_log_probs).square()


@KL_ESTIMATORS.register("k3")
def kl_k3(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    """``exp(log q - log p) - (log q - log p) - 1`` per token."""
    ref_minus_policy = (ref_log_probs - log_probs).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    return ref_minus_policy.exp() - ref_minus_policy - 1.0


def kl_per_token(
    estimator: str, log_probs: torch.Tensor, ref_log_probs: torch.Tensor, cap: float | None = None
) -> torch.Tensor:
    """[B, R] the per-token KL estimate named ``estimator`` (a ``KL_ESTIMATORS`` name), clamped to
    ``[-cap, cap]`` when ``cap`` is given (``AlgorithmConfig.kl_cap``)."""
    kl = KL_ESTIMATORS.get(estimator)(log_probs, ref_log_probs)
    return kl if cap is None else kl.clamp(-cap, cap)


def apply_kl_to_rewards(
    cfg: KLKnobs,
    token_rewards: torch.Tensor,
    log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    mask: torch.Tensor,
    kl_coef: float,
) -> tuple[torch.Tensor, float]:
    """KL in the reward: ``token_rewards - kl_coef * kl_t`` on loss tokens (untouched elsewhere).

    ``kl_coef`` is passed explicitly (the adaptive controller's current value, or ``cfg.kl_coef``).
    Returns the new token rewards and the mean over rows (with at least one loss token) of each row's
    summed KL — the sequence-level KL an :class:`AdaptiveKLController` targets.
    """
    with torch.no_grad():
        kl = masked_fill_zero(kl_per_token(cfg.kl_estimator, log_probs, ref_log_probs, cfg.kl_cap), mask)
        per_row = masked_sum(kl, mask, dim=1)
        rows = (mask.sum(dim=1) > 0).sum().clamp(min=1)
        mean_kl = float(per_row.sum() / rows)
    return token_rewards - kl_coef * kl, mean_kl


class FixedKLController:
    """A constant coefficient; ``update`` does nothing."""

    def __init__(self, kl_coef: float) -> None:
        self.value = kl_coef

    def update(self, current_kl: float, n_steps: int) -> None:
        del current_kl, n_steps


class AdaptiveKLController:
    """Adaptive coefficient of Ziegler et al., "Fine-Tuning LMs from Human Preferences" (2019).

    ``error = clip(current_kl / target - 1, -0.2, 0.2)``;
    ``value *= 1 + error * n_steps / horizon`` — the coefficient grows when the KL overshoots the
    target and shrinks when it undershoots, by at most 20% per ``horizon`` samples.
    ``n_steps`` is the number of samples (rows) seen since the last update.
    """

    def __init__(self, init_kl_coef: float, target: float, horizon: int) -> None:
        if init_kl_coef <= 0 or target <= 0 or horizon <= 0:
            raise ValueError(
                f"adaptive KL needs positive init_kl_coef, target and horizon; got "
                f"{init_kl_coef}, {target}, {horizon}"
            )
        self.value = init_kl_coef
        self.target = target
        self.horizon = horizon

    def update(self, current_kl: float, n_steps: int) -> None:
        error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon


def kl_controller_from_config(cfg: KLKnobs) -> FixedKLController | AdaptiveKLController:
    """Adaptive when ``cfg.kl_target`` is set (starting from ``cfg.kl_coef``), else fixed."""
    if cfg.kl_target is None:
        return FixedKLController(cfg.kl_coef)
    return AdaptiveKLController(cfg.kl_coef, cfg.kl_target, cfg.kl_horizon)
