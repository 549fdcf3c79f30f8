"""Offline losses (DPO, cDPO, IPO, SimPO, Bradley-Terry) against hand-computed numbers."""

import math

import pytest
import torch
from pydantic import ValidationError

from rlxf.algos import PREFERENCE_LOSSES, PreferenceLossConfig, bradley_terry_loss, preference_loss


def softplus(x):
    return math.log(1.0 + math.exp(x))  # -log sigmoid(-x)


# pair 1: log-ratios chosen +0.5, rejected -0.5; pair 2: chosen -0.5, rejected 0.0
PC, PR = torch.tensor([-1.0, -2.5]), torch.tensor([-2.0, -2.0])
RC, RR = torch.tensor([-1.5, -2.0]), torch.tensor([-1.5, -2.0])
BETA = 0.5  # implicit rewards: chosen [0.25, -0.25], rejected [-0.25, 0.0]; logits [0.5, -0.25]


def test_dpo():
    loss, m = preference_loss(PreferenceLossConfig(name="dpo", beta=BETA), PC, PR, RC, RR)
    assert loss.item() == pytest.approx((softplus(-0.5) + softplus(0.25)) / 2)
    assert m["reward_margin"] == pytest.approx((0.5 + -0.25) / 2)
    assert m["reward_accuracy"] == pytest.approx(0.5)
    assert m["reward_chosen"] == pytest.approx(0.0)


def test_cdpo_label_smoothing():
    cfg = PreferenceLossConfig(name="cdpo", beta=BETA, label_smoothing=0.1)
    loss, _ = preference_loss(cfg, PC, PR, RC, RR)
    pair1 = 0.9 * softplus(-0.5) + 0.1 * softplus(0.5)
    pair2 = 0.9 * softplus(0.25) + 0.1 * softplus(-0.25)
    assert loss.item() == pytest.approx((pair1 + pair2) / 2)


def test_ipo():
    # h = log-ratio difference: pair 1: 0.5 - (-0.5) = 1; pair 2: -0.5 - 0 = -0.5; target 1/(2*0.5) = 1
    loss, _ = preference_loss(PreferenceLossConfig(name="ipo", beta=BETA), PC, PR, RC, RR)
    assert loss.item() == pytest.approx(((1.0 - 1.0) ** 2 + (-0.5 - 1.0) ** 2) / 2)  # 1.125


def test_simpo_needs_no_reference():
    avg_chosen, avg_rejected = torch.tensor([-0.5, -1.0]), torch.tensor([-1.0, -0.8])
    cfg = PreferenceLossConfig(name="simpo", beta=2.0, simpo_gamma=0.5)
    loss, m = preference_loss(cfg, avg_chosen, avg_rejected)
    # logits: 2 * (-0.5 + 1.0) - 0.5 = 0.5; 2 * (-1.0 + 0.8) - 0.5 = -0.9
    assert loss.item() == pytest.approx((softplus(-0.5) + softplus(0.9)) / 2)
    assert m["reward_margin"] == pytest.approx((1.0 + -0.4) / 2)
    assert m["reward_accuracy"] == pytest.approx(0.5)
    assert not cfg.uses_reference


def test_reference_losses_need_reference():
    with pytest.raises(ValueError, match="reference"):
        preference_loss(PreferenceLossConfig(name="dpo"), PC, PR)


def test_config_validation():
    with pytest.raises(ValidationError, match="only used by the 'cdpo'"):
        PreferenceLossConfig(name="dpo", label_smoothing=0.1)
    with pytest.raises(ValidationError, match="known: cdpo, dpo, ipo, simpo"):
        PreferenceLossConfig(name="kto")
    assert set(PREFERENCE_LOSSES.names()) == {"dpo", "cdpo", "ipo", "simpo"}


def test_bradley_terry():
    loss, accuracy = bradley_terry_loss(torch.tensor([2.0, 0.0]), torch.tensor([1.0, 1.0]))
    assert loss.item() == pytest.approx((softplus(-1.0) + softplus(1.0)) / 2)
    assert accuracy == pytest.approx(0.5)


def test_rpo_adds_the_weighted_chosen_nll():
    nll = torch.tensor([0.4, 1.2])  # token-mean NLL of the two chosen responses
    cfg = PreferenceLossConfig(name="dpo", beta=BETA, nll_weight=0.5)
    loss, m = preference_loss(cfg, PC, PR, RC, RR, nll)
    assert loss.item() == pytest.approx((softplus(-0.5) + softplus(0.25)) / 2 + 0.5 * 0.8)
    assert m["chosen_nll"] == pytest.approx(0.8)
    with pytest.raises(ValueError, match="nll_weight"):
        preference_loss(cfg, PC, PR, RC, RR)
