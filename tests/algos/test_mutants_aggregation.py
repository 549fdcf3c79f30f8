"""LossNormaliser edge cases the mutation check (tools/mutation_check.py) found unasserted."""

import pytest
import torch

from rlxf.algos import LossNormaliser


def test_max_len_defaults_to_the_mask_width_not_its_height():
    assert LossNormaliser.from_mask(torch.ones(2, 5)).max_len == 5.0


def test_max_len_must_be_positive_and_one_is_enough():
    with pytest.raises(ValueError, match="max_len must be positive, got 0"):
        LossNormaliser.from_counts(num_tokens=3, num_seqs=1, max_len=0)
    assert LossNormaliser.from_counts(num_tokens=3, num_seqs=1, max_len=1) == LossNormaliser(3.0, 1.0, 1.0)


def test_counts_are_floored_at_one_each():
    empty = LossNormaliser.from_mask(torch.zeros(2, 3))
    assert (empty.num_tokens, empty.num_seqs) == (1.0, 1.0)
    one_row = LossNormaliser.from_mask(torch.tensor([[1, 0, 0], [0, 0, 0]]))
    assert (one_row.num_tokens, one_row.num_seqs) == (1.0, 1.0)
