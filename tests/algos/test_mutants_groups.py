"""Group statistics at their edges: cases the mutation check (tools/mutation_check.py) found unasserted."""

import torch

from rlxf.algos import group_stats, groups_with_signal


def test_a_spread_just_above_the_default_tolerance_is_signal():
    # scores 0 and 2e-8: unbiased std 1.41e-8 > atol 1e-8
    assert groups_with_signal(torch.tensor([0.0, 2e-8, 1.0, 1.0]), torch.tensor([0, 0, 1, 1])).tolist() == [
        True, True, False, False]


def test_no_rows_no_groups():
    total, mean, std, size = group_stats(torch.zeros(0), torch.zeros(0, dtype=torch.long))
    assert total.shape == mean.shape == std.shape == size.shape == (0,)


def test_with_zero_tolerance_equal_scores_are_still_no_signal():
    assert groups_with_signal(torch.tensor([1.0, 1.0, 0.0, 1.0]), torch.tensor([0, 0, 1, 1]), atol=0.0).tolist() == [
        False, False, True, True]
