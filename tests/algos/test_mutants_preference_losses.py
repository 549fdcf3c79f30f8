"""Preference-loss metrics on an asymmetric case, with a tie: cases the mutation check
(tools/mutation_check.py) found unasserted."""

import pytest
import torch

from rlxf.algos import PreferenceLossConfig, bradley_terry_loss, preference_loss


def test_implicit_reward_metrics_with_a_tie():
    # beta 1, reference 0: implicit rewards are the policy log-probs; margins 0.5, -0.25 and a tie (0)
    zeros = torch.zeros(3)
    chosen, rejected = torch.tensor([0.5, 0.25, 0.1]), torch.tensor([0.0, 0.5, 0.1])
    _, m = preference_loss(PreferenceLossConfig(name="dpo", beta=1.0), chosen, rejected, zeros, zeros)
    assert m["reward_chosen"] == pytest.approx(0.85 / 3)
    assert m["reward_rejected"] == pytest.approx(0.6 / 3)
    assert m["reward_margin"] == pytest.approx(0.25 / 3)
    assert m["reward_accuracy"] == pytest.approx(1 / 3)  # a tie is not a win


def test_bradley_terry_tie_is_not_a_win():
    loss, accuracy = bradley_terry_loss(torch.tensor([1.0, 1.0]), torch.tensor([1.0, 0.0]))
    assert accuracy == 0.5
    assert loss.item() == pytest.approx((torch.nn.functional.softplus(torch.tensor(0.0)).item()
                                         + torch.nn.functional.softplus(torch.tensor(-1.0)).item()) / 2)


def test_dpo_and_ipo_use_the_reference_simpo_does_not():
    assert PreferenceLossConfig(name="dpo").uses_reference and PreferenceLossConfig(name="ipo").uses_reference
    assert PreferenceLossConfig(name="cdpo", label_smoothing=0.2).label_smoothing == 0.2


def test_defaults():
    cfg = PreferenceLossConfig()
    assert (cfg.name, cfg.beta, cfg.label_smoothing, cfg.simpo_gamma, cfg.nll_weight) == ("dpo", 0.1, 0.0, 0.5, 0.0)
