"""The policy objective's logged metrics: cases the mutation check (tools/mutation_check.py) found
unasserted (the loss itself is pinned by test_policy_loss.py)."""

import math

import pytest
import torch

from rlxf.algos import AlgorithmConfig, LossNormaliser, policy_loss

NAN = float("nan")


def test_rollout_mismatch_and_weight_metrics():
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    old = torch.tensor([[-1.0, -1.0, NAN]])
    rollout = old - torch.tensor([[math.log(3.0), -math.log(2.0), 0.0]])  # weights 3 -> capped 2, and 0.5
    advantages = torch.tensor([[1.0, 1.0, 0.0]])
    cfg = AlgorithmConfig(name="dapo", tis_level="token", tis_cap=2.0)
    loss, m = policy_loss(cfg, old.clone(), old, advantages, mask, LossNormaliser.from_mask(mask),
                          rollout_log_probs=rollout)
    assert m["tis_weight_max"] == pytest.approx(2.0)
    assert m["tis_weight_mean"] == pytest.approx(1.25)
    assert m["rollout_log_prob_diff"] == pytest.approx((math.log(3.0) + math.log(2.0)) / 2)  # mean |old - rollout|
    assert m["pg_loss"] == pytest.approx(-(2.0 + 0.5) / 2) == loss.item()  # ratio 1: -A * w per token


def test_pg_loss_excludes_the_kl_and_entropy_terms():
    mask = torch.ones(1, 2)
    log_probs = torch.tensor([[-1.0, -2.0]])
    cfg = AlgorithmConfig(name="dapo", kl_coef=0.5, kl_estimator="k1", entropy_coef=0.1)
    loss, m = policy_loss(cfg, log_probs, log_probs, torch.tensor([[2.0, 2.0]]), mask, LossNormaliser.from_mask(mask),
                          ref_log_probs=log_probs - 1.0, entropy=torch.tensor([[1.0, 3.0]]))
    assert m["pg_loss"] == pytest.approx(-2.0)
    assert m["kl_loss"] == pytest.approx(1.0) and m["kl"] == pytest.approx(1.0)
    assert loss.item() == pytest.approx(-2.0 + 0.5 * 1.0 - 0.1 * 2.0)
    assert (m["ratio_max"], m["ratio_min"], m["clip_fraction"], m["approx_kl"]) == (1.0, 1.0, 0.0, 0.0)


def test_no_ratio_extremes_without_loss_tokens():
    mask = torch.zeros(1, 2)
    _, m = policy_loss(AlgorithmConfig(), torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 2), mask,
                       LossNormaliser.from_mask(mask))
    assert "ratio_max" not in m and "ratio_min" not in m and m["clip_fraction"] == 0.0
