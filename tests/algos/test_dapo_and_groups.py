"""DAPO reward shaping, overlong filtering and dynamic-sampling group filter."""

import torch
from torch.testing import assert_close

from rlxf.algos import drop_truncated, group_stats, groups_with_signal, overlong_shaping_penalty


def test_overlong_shaping_by_hand():
    # L = 10, buffer 4: no penalty up to 6, then (6 - len) / 4, then -1 beyond 10
    lengths = torch.tensor([5, 6, 7, 8, 10, 11])
    assert_close(overlong_shaping_penalty(lengths, 10, 4, 1.0), torch.tensor([0, 0, -0.25, -0.5, -1.0, -1.0]))
    assert_close(overlong_shaping_penalty(lengths, 10, 4, 0.5), torch.tensor([0, 0, -0.125, -0.25, -0.5, -0.5]))
    assert (overlong_shaping_penalty(lengths, 10, 0, 1.0) == 0).all()


def test_drop_truncated_zeroes_whole_rows():
    mask = torch.ones(3, 2)
    assert_close(drop_truncated(mask, torch.tensor([False, True, False])), torch.tensor([[1.0, 1], [0, 0], [1, 1]]))


def test_groups_with_signal():
    scores = torch.tensor([1.0, 1.0, 0.0, 1.0, 2.0])
    groups = torch.tensor([0, 0, 1, 1, 2])
    assert groups_with_signal(scores, groups).tolist() == [False, False, True, True, False]


def test_group_stats_by_hand():
    total, mean, std, size = group_stats(torch.tensor([1.0, 0.0, 0.0, 5.0]), torch.tensor([7, 7, 7, 3]))
    assert_close(total, torch.tensor([1.0, 1.0, 1.0, 5.0]))
    assert_close(mean, torch.tensor([1 / 3, 1 / 3, 1 / 3, 5.0]))
    assert_close(std, torch.tensor([(1 / 3) ** 0.5] * 3 + [0.0]))
    assert_close(size, torch.tensor([3.0, 3.0, 3.0, 1.0]))
