"""Masked reductions at their edges (empty rows, one position, a large eps): cases the mutation check
(tools/mutation_check.py) found unasserted."""

import torch
from torch.testing import assert_close

from rlxf.algos.masked import last_token_index, masked_mean, masked_sum, masked_whiten

NAN = float("nan")


def test_masked_mean_of_nothing_is_zero_and_per_row():
    values = torch.tensor([[1.0, 3.0, NAN], [NAN, NAN, NAN]])
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]])
    assert masked_mean(values, mask).item() == 2.0
    assert_close(masked_mean(values, mask, dim=1), torch.tensor([2.0, 0.0]))
    assert_close(masked_sum(values, mask, dim=1), torch.tensor([4.0, 0.0]))


def test_whiten_by_hand_with_a_large_eps():
    values = torch.tensor([[1.0, 2.0], [3.0, NAN]])
    mask = torch.tensor([[1, 1], [1, 0]])
    # mean 2, centred [-1, 0, 1], unbiased variance (1 + 0 + 1) / 2 = 1: divided by 1 + eps 1
    assert_close(masked_whiten(values, mask, eps=1.0), torch.tensor([[-0.5, 0.0], [0.5, 0.0]]))
    assert_close(masked_whiten(values, mask, eps=1.0, divide_by_std=False), torch.tensor([[-1.0, 0.0], [1.0, 0.0]]))


def test_whiten_of_one_position_is_zero_not_nan():
    assert_close(masked_whiten(torch.tensor([[5.0, NAN]]), torch.tensor([[1, 0]]), eps=1e-6), torch.zeros(1, 2))


def test_last_token_index_per_row():
    mask = torch.tensor([[1, 0, 0], [0, 0, 0], [0, 1, 1], [1, 0, 1]])
    assert last_token_index(mask).tolist() == [0, -1, 2, 2]


def test_one_token_is_its_own_mean_and_two_use_the_unbiased_std():
    assert masked_mean(torch.tensor([[4.0, 9.0]]), torch.tensor([[1, 0]])).item() == 4.0
    assert_close(masked_mean(torch.tensor([[4.0, 9.0]]), torch.tensor([[0, 1]]), dim=1), torch.tensor([9.0]))
    # two positions: centred [-1, 1], unbiased variance 2 / (2 - 1) = 2
    s = 2.0 ** 0.5
    assert_close(masked_whiten(torch.tensor([[1.0, 3.0]]), torch.ones(1, 2), eps=1e-12), torch.tensor([[-1 / s, 1 / s]]))
