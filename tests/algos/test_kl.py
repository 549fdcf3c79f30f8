"""KL estimators, KL in the reward, and the KL coefficient controllers."""

import math

import pytest
import torch
from torch.testing import assert_close

from rlxf.algos import (
    KL_ESTIMATORS,
    AdaptiveKLController,
    AlgorithmConfig,
    FixedKLController,
    apply_kl_to_rewards,
    kl_controller_from_config,
    kl_per_token,
)

P, Q = torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])  # log p - log q = log 2


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("k1", math.log(2.0)),  # 0.6931
        ("k2", 0.5 * math.log(2.0) ** 2),  # 0.2402
        ("k3", 0.25 / 0.5 - math.log(0.25 / 0.5) - 1.0),  # 0.5 + 0.6931 - 1 = 0.1931
    ],
)
def test_estimators_by_hand(name, expected):
    assert kl_per_token(name, P, Q).item() == pytest.approx(expected)


def test_all_estimators_tested_and_zero_at_equality():
    assert set(KL_ESTIMATORS.names()) == {"k1", "k2", "k3"}
    for name in KL_ESTIMATORS.names():
        assert kl_per_token(name, P, P).item() == 0.0


def test_kl_in_reward_only_on_loss_tokens():
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    ref = torch.zeros(2, 3)
    log_probs = torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.5, 9.0]])  # 9.0 sits on padding
    cfg = AlgorithmConfig(kl_estimator="k1")
    new, mean_kl = apply_kl_to_rewards(cfg, rewards, log_probs, ref, mask, kl_coef=0.5)
    assert_close(new, torch.tensor([[-0.05, -0.1, 0.85], [-0.2, 0.75, 0.0]]))
    assert mean_kl == pytest.approx(((0.1 + 0.2 + 0.3) + (0.4 + 0.5)) / 2)  # mean of per-row sums


def test_adaptive_controller_by_hand():
    ctl = AdaptiveKLController(init_kl_coef=0.1, target=6.0, horizon=10000)
    ctl.update(current_kl=9.0, n_steps=1000)  # error 9/6 - 1 = 0.5 -> clipped 0.2
    assert ctl.value == pytest.approx(0.1 * (1 + 0.2 * 1000 / 10000))  # 0.102
    ctl.update(current_kl=5.4, n_steps=1000)  # error 5.4/6 - 1 = -0.1
    assert ctl.value == pytest.approx(0.102 * (1 - 0.1 * 0.1))
    with pytest.raises(ValueError):
        AdaptiveKLController(0.0, 6.0, 10)


def test_controller_from_config():
    fixed = kl_controller_from_config(AlgorithmConfig(kl_coef=0.05))
    assert isinstance(fixed, FixedKLController)
    fixed.update(100.0, 10)
    assert fixed.value == 0.05
    adaptive = kl_controller_from_config(AlgorithmConfig(kl_coef=0.05, kl_target=6.0, kl_horizon=100))
    assert isinstance(adaptive, AdaptiveKLController) and adaptive.value == 0.05
