"""Advantage estimators against hand-computed numbers."""

import math

import pytest
import torch
from torch.testing import assert_close

from rlxf.algos import ADVANTAGE_ESTIMATORS, AlgorithmConfig, compute_advantages, token_rewards_from_scores
from rlxf.algos.advantages import CRITIC_ESTIMATORS


def cfg(name="grpo", **overrides):
    return AlgorithmConfig(name=name, **overrides)


def t(rows):
    return torch.tensor(rows, dtype=torch.float32)


def test_token_rewards_land_on_last_loss_token():
    mask = t([[1, 1, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0]])  # padding; env token gap; no loss token
    rewards = token_rewards_from_scores(t([1.5, -2.0, 7.0]), mask)
    assert_close(rewards, t([[0, 1.5, 0, 0], [0, 0, -2.0, 0], [0, 0, 0, 0]]))


def test_grpo_two_groups_with_padding():
    # rewards [1, 0 | 1, 1]; group 0: mean 0.5, unbiased std sqrt((0.25 + 0.25) / 1) = sqrt(0.5)
    mask = t([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0]])
    scores = t([1, 0, 1, 1])
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    adv, ret = compute_advantages(cfg("grpo"), token_rewards_from_scores(scores, mask), mask, torch.tensor([0, 0, 1, 1]))
    assert_close(adv, t([[a, a, 0], [-a, 0, 0], [0, 0, 0], [0, 0, 0]]))
    assert_close(ret, adv)


def test_grpo_group_of_three_uses_unbiased_std():
    # scores [1, 0, 0]: mean 1/3; unbiased var ((2/3)^2 + 2 * (1/3)^2) / 2 = 1/3
    mask = t([[1], [1], [1]])
    std = math.sqrt(1 / 3)
    adv, _ = compute_advantages(cfg("grpo", adv_eps=1e-12), t([[1], [0], [0]]), mask, torch.tensor([4, 4, 4]))
    assert_close(adv, t([[(2 / 3) / std], [(-1 / 3) / std], [(-1 / 3) / std]]))


def test_dr_grpo_has_no_std_division():
    mask = t([[1, 1, 0], [1, 0, 0]])
    adv, _ = compute_advantages(cfg("dr_grpo"), t([[0, 1, 0], [0, 0, 0]]), mask, torch.tensor([0, 0]))
    assert_close(adv, t([[0.5, 0.5, 0], [-0.5, 0, 0]]))


def test_rloo_leave_one_out_and_singleton():
    # group 0 scores [1, 0, 0]: 1 - (0 + 0)/2 = 1; 0 - (1 + 0)/2 = -0.5 (twice); group 1 alone -> 0
    mask = t([[1, 1], [1, 0], [1, 1], [1, 1]])
    scores = t([1, 0, 0, 3])
    adv, _ = compute_advantages(cfg("rloo"), token_rewards_from_scores(scores, mask), mask, torch.tensor([0, 0, 0, 1]))
    assert_close(adv, t([[1, 1], [-0.5, 0], [-0.5, -0.5], [0, 0]]))


def test_gae_three_tokens_by_hand():
    gamma, lam = 0.9, 0.8
    values = t([[0.5, 0.6, 0.7]])
    rewards = t([[0.0, 0.0, 1.0]])
    a2 = 1.0 + gamma * 0.0 - 0.7  # 0.3
    a1 = (0.0 + gamma * 0.7 - 0.6) + gamma * lam * a2  # 0.03 + 0.216 = 0.246
    a0 = (0.0 + gamma * 0.6 - 0.5) + gamma * lam * a1  # 0.04 + 0.17712 = 0.21712
    mean = (a0 + a1 + a2) / 3
    c = cfg("ppo", gamma=gamma, lam=lam, norm_adv_by_std=False)
    adv, ret = compute_advantages(c, rewards, torch.ones(1, 3), torch.tensor([0]), values=values)
    assert_close(ret, t([[a0 + 0.5, a1 + 0.6, a2 + 0.7]]))  # 0.71712, 0.846, 1.0
    assert_close(adv, t([[a0 - mean, a1 - mean, a2 - mean]]))
    std = math.sqrt(((a0 - mean) ** 2 + (a1 - mean) ** 2 + (a2 - mean) ** 2) / 2)
    adv_std, _ = compute_advantages(cfg("ppo", gamma=gamma, lam=lam), rewards, torch.ones(1, 3), torch.tensor([0]), values=values)
    assert_close(adv_std, t([[a0 - mean, a1 - mean, a2 - mean]]) / (std + 1e-6))


def test_gae_skips_environment_tokens_and_padding():
    # mask [1, 0, 1, 0]: position 1 is a tool token (value 99 must be ignored), position 3 padding
    gamma, lam = 0.9, 0.8
    values = t([[0.5, 99.0, 0.7, 5.0]])
    rewards = t([[0.0, 0.0, 1.0, 0.0]])
    mask = t([[1, 0, 1, 0]])
    a2 = 1.0 - 0.7  # 0.3
    a0 = (gamma * 0.7 - 0.5) + gamma * lam * a2  # 0.13 + 0.216 = 0.346
    c = cfg("ppo", gamma=gamma, lam=lam, norm_adv_by_std=False)
    adv, ret = compute_advantages(c, rewards, mask, torch.tensor([0]), values=values)
    assert_close(ret, t([[a0 + 0.5, 0, 1.0, 0]]))
    mean = (a0 + a2) / 2
    assert_close(adv, t([[a0 - mean, 0, a2 - mean, 0]]))


def test_gae_needs_values():
    with pytest.raises(ValueError, match="critic values"):
        compute_advantages(cfg("ppo"), t([[1.0]]), t([[1]]), torch.tensor([0]))


def test_reinforce_pp_discounts_then_whitens_over_batch():
    # gamma 0.5: row 0 rewards [0, 0, 1] -> returns [0.25, 0.5, 1]; row 1 [0, 2, pad] -> [1, 2, 0]
    mask = t([[1, 1, 1], [1, 1, 0]])
    rewards = t([[0, 0, 1], [0, 2, 0]])
    adv, ret = compute_advantages(cfg("reinforce_pp", gamma=0.5), rewards, mask, torch.tensor([0, 1]))
    assert_close(ret, t([[0.25, 0.5, 1], [1, 2, 0]]))
    mean = (0.25 + 0.5 + 1 + 1 + 2) / 5  # 0.95
    std = math.sqrt((0.7**2 + 0.45**2 + 0.05**2 + 0.05**2 + 1.05**2) / 4)  # sqrt(1.8 / 4)
    expected = (t([[0.25, 0.5, 1], [1, 2, 0]]) - mean) / (std + 1e-6) * mask
    assert_close(adv, expected)


def test_reinforce_pp_baseline_subtracts_group_mean_first():
    # scores 1 and 2 in one group, mean 1.5 -> centred returns row 0 [-0.5] * 3, row 1 [0.5] * 2
    mask = t([[1, 1, 1], [1, 1, 0]])
    rewards = t([[0, 0, 1], [0, 2, 0]])
    adv, ret = compute_advantages(cfg("reinforce_pp_baseline"), rewards, mask, torch.tensor([0, 0]))
    assert_close(ret, t([[-0.5, -0.5, -0.5], [0.5, 0.5, 0]]))
    # batch mean (-1.5 + 1.0) / 5 = -0.1 -> deviations -0.4 (x3) and 0.6 (x2)
    std = math.sqrt((3 * 0.4**2 + 2 * 0.6**2) / 4)  # sqrt(0.3)
    assert_close(adv, t([[-0.4, -0.4, -0.4], [0.6, 0.6, 0]]) / (std + 1e-6))


def test_remax_subtracts_greedy_baseline():
    mask = t([[1, 1, 1], [1, 1, 0]])
    rewards = t([[0, 0, 1], [0, 2, 0]])
    adv, ret = compute_advantages(cfg("remax"), rewards, mask, torch.tensor([0, 1]), baseline_rewards=t([0.25, 3.0]))
    assert_close(ret, t([[1, 1, 1], [2, 2, 0]]))
    assert_close(adv, t([[0.75, 0.75, 0.75], [-1, -1, 0]]))
    with pytest.raises(ValueError, match="baseline_rewards"):
        compute_advantages(cfg("remax"), rewards, mask, torch.tensor([0, 1]))


@pytest.mark.parametrize("estimator", ADVANTAGE_ESTIMATORS.names())
def test_every_estimator_finite_zero_outside_mask_and_singletons(estimator):
    torch.manual_seed(0)
    mask = t([[1, 1, 0, 0], [1, 0, 1, 1], [1, 1, 1, 0]])
    rewards = token_rewards_from_scores(t([1.0, 0.0, 0.5]), mask)
    c = cfg("ppo" if estimator in CRITIC_ESTIMATORS else "grpo", advantage_estimator=estimator)
    adv, ret = compute_advantages(
        c, rewards, mask, torch.tensor([0, 1, 2]),  # three groups of one
        values=torch.rand(3, 4), baseline_rewards=t([0.0, 0.0, 0.0]),
        log_probs=-torch.rand(3, 4), teacher_log_probs=-torch.rand(3, 4),
    )
    assert torch.isfinite(adv).all() and torch.isfinite(ret).all()
    assert (adv[mask == 0] == 0).all() and (ret[mask == 0] == 0).all()
    if estimator in ("grpo", "rloo", "turn_grpo", "gigpo"):
        assert (adv == 0).all()  # a group of one has no baseline
