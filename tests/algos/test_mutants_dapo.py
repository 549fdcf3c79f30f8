"""DAPO's overlong penalty when the buffer is longer than the budget: a case the mutation check
(tools/mutation_check.py) found unasserted."""

import torch
from torch.testing import assert_close

from rlxf.algos import overlong_shaping_penalty


def test_a_buffer_longer_than_the_budget_is_capped_at_the_budget():
    # L = 4, buffer 8 -> 4: the penalty starts at length 0 and reaches -penalty at 4
    lengths = torch.tensor([0, 1, 2, 4, 6])
    assert_close(overlong_shaping_penalty(lengths, 4, 8, 2.0), torch.tensor([0.0, -0.5, -1.0, -2.0, -2.0]))


def test_a_one_token_buffer_still_penalises():
    # L = 4, buffer 1: no penalty up to 3 tokens, the full penalty at 4
    assert_close(overlong_shaping_penalty(torch.tensor([3, 4]), 4, 1, 1.0), torch.tensor([0.0, -1.0]))
