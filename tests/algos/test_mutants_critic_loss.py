"""The value loss's logged metrics and its aggregation mode: cases the mutation check
(tools/mutation_check.py) found unasserted."""

import pytest
import torch

from rlxf.algos import AlgorithmConfig, LossNormaliser, value_loss


def test_value_metrics_are_means_over_loss_tokens():
    values = torch.tensor([[1.0, 3.0, 100.0]])  # the last position is padding
    old = values.clone()
    returns = torch.tensor([[2.0, 1.0, 0.0]])
    mask = torch.tensor([[1, 1, 0]])
    loss, metrics = value_loss(AlgorithmConfig(name="ppo"), values, old, returns, mask, LossNormaliser.from_mask(mask))
    assert metrics["value_mean"] == pytest.approx(2.0)
    assert metrics["value_error"] == pytest.approx((1.0 + 2.0) / 2)
    assert metrics["value_loss"] == pytest.approx(0.5 * (1.0 + 4.0) / 2) == loss.item()
    assert metrics["value_clip_fraction"] == 0.0  # V == V_old: never clipped


def test_value_loss_follows_the_loss_aggregation():
    values, returns = torch.tensor([[1.0, 1.0], [3.0, 0.0]]), torch.zeros(2, 2)
    mask = torch.tensor([[1, 1], [1, 0]])
    cfg = AlgorithmConfig(name="ppo", value_clip=None, loss_aggregation="seq_mean_token_sum")
    loss, _ = value_loss(cfg, values, values, returns, mask, LossNormaliser.from_mask(mask))
    assert loss.item() == pytest.approx(0.5 * ((1.0 + 1.0) + 9.0) / 2)  # row sums over 2 rows


def test_value_clip_bounds_an_upward_move_too():
    # V moved 1 -> 2 with returns 3: clipped V = 1 + 0.2 = 1.2, (1.2 - 3)^2 = 3.24 > (2 - 3)^2 = 1
    values, old, returns, mask = torch.tensor([[2.0]]), torch.tensor([[1.0]]), torch.tensor([[3.0]]), torch.ones(1, 1)
    loss, metrics = value_loss(AlgorithmConfig(name="ppo"), values, old, returns, mask, LossNormaliser.from_mask(mask))
    assert loss.item() == pytest.approx(0.5 * 3.24)
    assert metrics["value_clip_fraction"] == 1.0
