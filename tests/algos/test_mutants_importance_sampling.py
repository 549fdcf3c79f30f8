"""Truncated IS weights token by token: a case the mutation check (tools/mutation_check.py) found
unasserted (the loss test only sees their sum)."""

import math

import torch
from torch.testing import assert_close

from rlxf.algos import truncated_is_weights


def test_sequence_weights_are_per_row_and_zero_on_padding():
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    old = torch.zeros(2, 3)
    rollout = -torch.tensor([[math.log(2.0), math.log(1.5), 9.0], [math.log(0.5), 9.0, 9.0]])
    weights = truncated_is_weights(old, rollout, mask, "sequence", cap=10.0)
    assert_close(weights, torch.tensor([[3.0, 3.0, 0.0], [0.5, 0.0, 0.0]]))
    assert truncated_is_weights(old, rollout, mask, "none", cap=10.0) is None
