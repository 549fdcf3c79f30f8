"""Advantage numbers the mutation check (tools/mutation_check.py) found unasserted: a reward on
position 0, and the std's epsilon at a size where it shows."""

import math

import torch
from torch.testing import assert_close

from rlxf.algos import AlgorithmConfig, compute_advantages, token_rewards_from_scores


def t(rows):
    return torch.tensor(rows, dtype=torch.float32)


def test_a_row_whose_only_loss_token_is_the_first_gets_its_reward_there():
    mask = t([[1, 0, 0], [0, 1, 1]])
    assert_close(token_rewards_from_scores(t([2.0, 3.0]), mask), t([[2.0, 0, 0], [0, 0, 3.0]]))


def test_grpo_adds_adv_eps_to_the_group_std():
    # scores [0, 2]: mean 1, unbiased std sqrt(2); with adv_eps 1 the advantage is +-1 / (sqrt(2) + 1)
    mask = t([[1], [1]])
    adv, _ = compute_advantages(AlgorithmConfig(name="grpo", adv_eps=1.0), t([[0.0], [2.0]]), mask, torch.tensor([0, 0]))
    a = 1 / (math.sqrt(2) + 1)
    assert_close(adv, t([[-a], [a]]))


def test_rloo_group_of_two_uses_the_other_row_alone():
    # scores [3, 1]: each row's baseline is the other row's score (divided by 1, not by a clamped 2)
    mask = t([[1, 1], [1, 0]])
    adv, _ = compute_advantages(AlgorithmConfig(name="rloo"), token_rewards_from_scores(t([3.0, 1.0]), mask), mask,
                                torch.tensor([7, 7]))
    assert_close(adv, t([[2.0, 2.0], [-2.0, 0.0]]))
