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


# |log p/q| = 20 on the first token: k3 = exp(20) - 20 - 1 ~ 4.85e8 uncapped
FAR_POLICY, FAR_REF = torch.tensor([[-21.0, -1.0]]), torch.tensor([[-1.0, -1.0]])


def test_kl_cap_is_on_by_default_at_ten():
    assert AlgorithmConfig().kl_cap == 10.0
    assert AlgorithmConfig(name="ppo").kl_cap == 10.0  # not a preset's choice: every preset has it


@pytest.mark.parametrize(("name", "uncapped"), [("k1", -20.0), ("k2", 200.0), ("k3", math.exp(20.0) - 21.0)])
def test_kl_cap_clamps_each_token_estimate(name, uncapped):
    assert kl_per_token(name, FAR_POLICY, FAR_REF)[0, 0].item() == pytest.approx(uncapped, rel=1e-5)
    capped = kl_per_token(name, FAR_POLICY, FAR_REF, cap=10.0)
    assert capped[0, 0].item() == (-10.0 if uncapped < 0 else 10.0)
    assert capped[0, 1].item() == 0.0  # an equal token is untouched


def test_kl_cap_bounds_the_loss_and_its_gradient():
    """k3 in the loss with |log ratio| = 20: the default cap keeps loss and gradient finite and small."""
    from rlxf.algos import LossNormaliser, policy_loss

    mask = torch.ones(1, 2)
    results = {}
    for cap in (10.0, None):
        cfg = AlgorithmConfig(name="grpo", kl_coef=1.0, kl_cap=cap)
        log_probs = FAR_POLICY.clone().requires_grad_(True)
        loss, metrics = policy_loss(cfg, log_probs, FAR_POLICY, torch.zeros(1, 2), mask,
                                    LossNormaliser.from_mask(mask), ref_log_probs=FAR_REF)
        loss.backward()
        results[cap] = (metrics["kl_loss"], log_probs.grad[0, 0].abs().item())
    # seq_mean_token_mean of [10, 0] = 5; the capped token gets no KL gradient (constant beyond the cap)
    assert results[10.0] == (5.0, 0.0)
    assert results[None][0] > 2e8 and results[None][1] > 2e8  # what the cap prevents: ~4.85e8 / 2


def test_kl_cap_in_the_reward():
    cfg = AlgorithmConfig(name="ppo", kl_coef=0.1, kl_estimator="k3")
    rewards, seq_kl = apply_kl_to_rewards(cfg, torch.zeros(1, 2), FAR_POLICY, FAR_REF, torch.ones(1, 2), 0.1)
    assert_close(rewards, torch.tensor([[-1.0, 0.0]]))  # -0.1 * 10 on the far token
    assert seq_kl == 10.0
