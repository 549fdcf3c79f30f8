"""KL numbers the mutation check (tools/mutation_check.py) found unasserted: the adaptive controller's
lower clip and its argument checks, the log-ratio clamp of k3 on both sides, rows without loss tokens."""

import math

import pytest
import torch
from torch.testing import assert_close

from rlxf.algos import AdaptiveKLController, AlgorithmConfig, apply_kl_to_rewards, kl_per_token


def test_adaptive_controller_shrinks_by_at_most_twenty_percent_per_horizon():
    ctl = AdaptiveKLController(init_kl_coef=0.1, target=6.0, horizon=100)
    ctl.update(current_kl=0.0, n_steps=50)  # error 0/6 - 1 = -1 -> clipped to -0.2
    assert ctl.value == pytest.approx(0.1 * (1 - 0.2 * 50 / 100))


@pytest.mark.parametrize(("coef", "target", "horizon"), [(0.1, 0.0, 10), (0.1, 6.0, 0), (0.0, 6.0, 10)])
def test_adaptive_controller_refuses_a_zero_argument(coef, target, horizon):
    with pytest.raises(ValueError, match="positive"):
        AdaptiveKLController(coef, target, horizon)


def test_k3_clamps_the_log_ratio_to_twenty_on_both_sides():
    policy = torch.tensor([[-31.0, -1.0]])
    reference = torch.tensor([[-1.0, -31.0]])  # ref - policy = +30 on token 0, -30 on token 1
    k3 = kl_per_token("k3", policy, reference)
    assert k3[0, 0].item() == pytest.approx(math.exp(20.0) - 20.0 - 1.0, rel=1e-6)
    assert k3[0, 1].item() == pytest.approx(math.exp(-20.0) + 20.0 - 1.0, rel=1e-6)


def test_kl_in_reward_sequence_mean_skips_rows_without_loss_tokens():
    mask = torch.tensor([[1, 1], [0, 0]])
    log_probs = torch.tensor([[0.5, 0.25], [3.0, 3.0]])
    cfg = AlgorithmConfig(kl_estimator="k1")
    new, mean_kl = apply_kl_to_rewards(cfg, torch.zeros(2, 2), log_probs, torch.zeros(2, 2), mask, kl_coef=2.0)
    assert mean_kl == pytest.approx(0.75)  # one row with loss tokens: its sum 0.75, not 0.75 / 2
    assert_close(new, torch.tensor([[-1.0, -0.5], [0.0, 0.0]]))


def test_adaptive_controller_accepts_small_positive_arguments():
    ctl = AdaptiveKLController(init_kl_coef=0.1, target=0.5, horizon=1)
    ctl.update(current_kl=0.55, n_steps=1)  # error 0.55 / 0.5 - 1 = 0.1, horizon 1
    assert ctl.value == pytest.approx(0.1 * 1.1)


def test_kl_in_reward_without_any_loss_token_is_zero_not_nan():
    _, mean_kl = apply_kl_to_rewards(AlgorithmConfig(kl_estimator="k1"), torch.zeros(2, 2), torch.ones(2, 2),
                                     torch.zeros(2, 2), torch.zeros(2, 2), kl_coef=1.0)
    assert mean_kl == 0.0
