"""Policy losses at extreme ratios and on the dual clip's edge: cases the mutation check
(tools/mutation_check.py) found unasserted."""

import math

import pytest
import torch

from rlxf.algos import POLICY_LOSSES, AlgorithmConfig


def test_ppo_ratio_log_is_clamped_to_twenty_both_ways():
    old = torch.zeros(1, 2)
    log_probs = torch.tensor([[25.0, -25.0]])
    advantages = torch.tensor([[-1.0, 1.0]])
    loss, stats = POLICY_LOSSES.get("ppo_clip")(AlgorithmConfig(name="dapo"), log_probs, old, advantages, torch.ones(1, 2))
    assert stats["ratio"][0, 0].item() == pytest.approx(math.exp(20.0), rel=1e-6)
    assert stats["ratio"][0, 1].item() == pytest.approx(math.exp(-20.0), rel=1e-6)
    assert loss[0, 0].item() == pytest.approx(math.exp(20.0), rel=1e-6)  # A < 0: the unclipped -A * ratio
    assert loss[0, 1].item() == pytest.approx(-math.exp(-20.0), rel=1e-6)  # A > 0: max(-A r, -A 0.8) = -A r


def test_cispo_ratio_log_is_clamped_too():
    old = torch.zeros(1, 1)
    _, stats = POLICY_LOSSES.get("cispo")(AlgorithmConfig(name="cispo"), torch.tensor([[-30.0]]), old,
                                          torch.ones(1, 1), torch.ones(1, 1))
    assert stats["ratio"].item() == pytest.approx(math.exp(-20.0), rel=1e-6)


def test_gspo_sequence_ratio_log_is_capped_at_twenty():
    old = torch.zeros(1, 2)
    _, stats = POLICY_LOSSES.get("gspo")(AlgorithmConfig(name="gspo"), torch.tensor([[30.0, 30.0]]), old,
                                         torch.ones(1, 2), torch.ones(1, 2))
    assert stats["ratio"][0, 0].item() == pytest.approx(math.exp(20.0), rel=1e-6)


def test_dual_clip_leaves_zero_and_positive_advantages_alone():
    cfg = AlgorithmConfig(name="dapo", dual_clip=3.0)
    log_probs = torch.tensor([[math.log(5.0), math.log(5.0), math.log(3.0), 0.0]])
    # A = 0; A > 0 clipped at 1.28; A < 0 with ratio == dual_clip; a small positive A at ratio 1
    advantages = torch.tensor([[0.0, 1.0, -1.0, 0.5]])
    loss, stats = POLICY_LOSSES.get("ppo_clip")(cfg, log_probs, torch.zeros(1, 4), advantages, torch.ones(1, 4))
    assert loss[0].tolist() == pytest.approx([0.0, -1.28, 3.0, -0.5])
    assert stats["dual_clip_fraction"][0].tolist() == [0.0, 0.0, 0.0, 0.0]  # ratio 3 gives loss 3 == cap: not above


def test_cispo_weight_is_clipped_from_below_at_one_minus_clip_low():
    cfg = AlgorithmConfig(name="cispo", clip_low=0.5, clip_high=1.0)  # weights in [0.5, 2]
    log_probs = torch.tensor([[math.log(0.25), math.log(4.0), 0.0]])
    loss, stats = POLICY_LOSSES.get("cispo")(cfg, log_probs, torch.zeros(1, 3), torch.ones(1, 3), torch.ones(1, 3))
    # -w * A * log_probs with w = 0.5, 2, 1
    assert loss[0].tolist() == pytest.approx([-0.5 * math.log(0.25), -2.0 * math.log(4.0), 0.0])
    assert stats["clip_fraction"][0].tolist() == [1.0, 1.0, 0.0]
