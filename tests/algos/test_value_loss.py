"""Clipped value loss against hand-computed numbers."""

import pytest
import torch

from rlxf.algos import AlgorithmConfig, LossNormaliser, value_loss

NAN = float("nan")


def test_clipped_value_loss_by_hand():
    values = torch.tensor([[1.0, 1.0, 0.0, NAN]], requires_grad=True)
    old = torch.tensor([[1.5, 1.5, 0.0, 0.0]])
    returns = torch.tensor([[2.0, 0.5, 0.5, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    norm = LossNormaliser.from_mask(mask)
    # token 0: unclipped (1-2)^2 = 1, clipped (1.3-2)^2 = 0.49 -> 0.5 * 1
    # token 1: unclipped (1-0.5)^2 = 0.25, clipped (1.3-0.5)^2 = 0.64 -> 0.5 * 0.64
    # token 2: no change from old -> 0.5 * 0.25
    loss, metrics = value_loss(AlgorithmConfig(name="ppo"), values, old, returns, mask, norm)
    assert loss.item() == pytest.approx((0.5 + 0.32 + 0.125) / 3)
    assert metrics["value_clip_fraction"] == pytest.approx(1 / 3)
    loss.backward()
    # token 1 takes the clipped branch: its gradient is 0 (clip active); others (V - R) / 3
    assert torch.allclose(values.grad, torch.tensor([[(1.0 - 2.0) / 3, 0.0, (0.0 - 0.5) / 3, 0.0]]))


def test_unclipped_value_loss():
    values = torch.tensor([[1.0, 1.0, 0.0]])
    old = torch.tensor([[1.5, 1.5, 0.0]])
    returns = torch.tensor([[2.0, 0.5, 0.5]])
    mask = torch.ones(1, 3)
    cfg = AlgorithmConfig(name="ppo", value_clip=None)
    loss, metrics = value_loss(cfg, values, old, returns, mask, LossNormaliser.from_mask(mask))
    assert loss.item() == pytest.approx(0.5 * (1.0 + 0.25 + 0.25) / 3)
    assert "value_clip_fraction" not in metrics
