"""Offline preference losses (pairs of chosen / rejected responses) and the reward-model loss.

Inputs are [B] sequence log-probs: SUMMED over response tokens for DPO / IPO / cDPO, AVERAGED over
response tokens for SimPO (length-normalised; it uses no reference model, pass None). Each loss in
``PREFERENCE_LOSSES`` has the signature ``(policy_chosen, policy_rejected, ref_chosen, ref_rejected,
cfg: PreferenceLossConfig) -> (loss, metrics)``; the loss is the mean over the B pairs.

Implicit rewards: ``r = beta * (policy - ref)`` (SimPO: ``r = beta * policy``). Metrics:
``reward_chosen``, ``reward_rejected``, ``reward_margin`` (mean of r_chosen - r_rejected) and
``reward_accuracy`` (fraction of pairs with r_chosen > r_rejected).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlxf.registry import Registry


class PreferenceLossConfig(BaseModel):
    """Which preference loss, and its knobs."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field("dpo", description="a PREFERENCE_LOSSES name: dpo, ipo, cdpo, simpo")
    beta: float = Field(0.1, gt=0, description="inverse temperature of the implicit reward")
    label_smoothing: float = Field(0.0, ge=0, lt=0.5, description="cDPO: assumed label-flip probability")
    simpo_gamma: float = Field(0.5, description="SimPO: target reward margin gamma")
    nll_weight: float = Field(0.0, ge=0, description="RPO (Pang et al. 2024): add this weight times the "
                              "chosen responses' token-mean negative log-likelihood")

    @model_validator(mode="after")
    def _check(self) -> PreferenceLossConfig:
        if self.name not in PREFERENCE_LOSSES:
            raise ValueError(f"unknown preference loss {self.name!r}; known: {', '.join(PREFERENCE_LOSSES.names())}")
        if self.label_smoothing and self.name != "cdpo":
            raise ValueError("label_smoothing is only used by the 'cdpo' loss")
        return self

    @property
    def uses_reference(self) -> bool:
        return self.name != "simpo"


PreferenceLoss = Callable[..., tuple[torch.Tensor, dict[str, float]]]
PREFERENCE_LOSSES: Registry[PreferenceLoss] = Registry("preference loss")


def _metrics(reward_chosen: torch.Tensor, reward_rejected: torch.Tensor) -> dict[str, float]:
    margin = (reward_chosen - reward_rejected).detach()
    return {
        "reward_chosen": float(reward_chosen.detach().mean()),
        "reward_rejected": float(reward_rejected.detach().mean()),
        "reward_margin": float(margin.mean()),
        "reward_accuracy": float((margin > 0).float().mean()),
    }


def _reference_rewards(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    if ref_chosen is None or ref_rejected is None:
        raise ValueError("this preference loss needs reference log-probs (only 'simpo' runs without)")
    return beta * (policy_chosen - ref_chosen), beta * (policy_rejected - ref_rejected)


def _smoothed_sigmoid_loss(logits: torch.Tensor, label_smoothing: float) -> torch.Tensor:
    """``-(1 - eps) * log sigmoid(logits) - eps * log sigmoid(-logits)``, mean over pairs."""
    return (-(1 - label_smoothing) * F.logsigmoid(logits) - label_smoothing * F.logsigmoid(-logits)).mean()


@PREFERENCE_LOSSES.register("dpo")
def dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, cfg: PreferenceLossConfig):
    """DPO (Rafailov et al. 2023): ``-log sigmoid(r_chosen - r_rejected)``."""
    chosen, rejected = _reference_rewards(policy_chosen, policy_rejected, ref_chosen, ref_rejected, cfg.beta)
    return _smoothed_sigmoid_loss(chosen - rejected, 0.0), _metrics(chosen, rejected)


@PREFERENCE_LOSSES.register("cdpo")
def cdpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, cfg: PreferenceLossConfig):
    """Conservative DPO (Mitchell 2023): DPO with labels flipped with probability ``label_smoothing``."""
    chosen, rejected = _reference_rewards(policy_chosen, policy_rejected, ref_chosen, ref_rejected, cfg.beta)
    return _smoothed_sigmoid_loss(chosen - rejected, cfg.label_smoothing), _metrics(chosen, rejected)


@PREFERENCE_LOSSES.register("ipo")
def ipo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, cfg: PreferenceLossConfig):
    """IPO (Azar et al. 2023): ``(h - 1 / (2 beta))**2`` with ``h`` the log-ratio difference
    ``(policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)``."""
    chosen, rejected = _reference_rewards(policy_chosen, policy_rejected, ref_chosen, ref_rejected, cfg.beta)
    h = (chosen - rejected) / cfg.beta
    return (h - 1.0 / (2.0 * cfg.beta)).square().mean(), _metrics(chosen, rejected)


@PREFERENCE_LOSSES.register("simpo")
def simpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, cfg: PreferenceLossConfig):
    """SimPO (Meng et al. 2024): ``-log sigmoid(beta * avg_chosen - beta * avg_rejected - gamma)``.

    ``policy_*`` are AVERAGED token log-probs; reference log-probs are ignored.
    """
    chosen, rejected = cfg.beta * policy_chosen, cfg.beta * policy_rejected
    return _smoothed_sigmoid_loss(chosen - rejected - cfg.simpo_gamma, 0.0), _metrics(chosen, rejected)


def preference_loss(
    cfg: PreferenceLossConfig,
    policy_chosen: torch.Tensor,
    policy_rejected: torch.Tensor,
    ref_chosen: torch.Tensor | None = None,
    ref_rejected: torch.Tensor | None = None,
    chosen_nll: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Dispatch to ``PREFERENCE_LOSSES[cfg.name]``; with ``cfg.nll_weight`` > 0 add the RPO term, the
    weight times the mean over pairs of ``chosen_nll`` ([B] token-mean NLL of each chosen response)."""
    loss, metrics = PREFERENCE_LOSSES.get(cfg.name)(policy_chosen, policy_rejected, ref_chosen, ref_rejected, cfg)
    if cfg.nll_weight:
        if chosen_nll is None:
            raise ValueError("preference.loss.nll_weight > 0 needs the chosen responses' NLL")
        loss = loss + cfg.nll_weight * chosen_nll.mean()
        metrics["chosen_nll"] = float(chosen_nll.detach().mean())
    return loss, metrics


def bradley_terry_loss(chosen_scores: torch.Tensor, rejected_scores: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Reward-model loss (Bradley–Terry): mean of ``-log sigmoid(chosen - rejected)`` over pairs, and
    the accuracy = fraction of pairs with chosen > rejected."""
    margin = chosen_scores - rejected_scores
    return -F.logsigmoid(margin).mean(), float((margin.detach() > 0).float().mean())
