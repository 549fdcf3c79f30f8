"""Every online preset, wired through advantages and ActorRole.update on one fixed scored batch: its
first optimizer step has a gradient, and presets whose advantage estimator, normalisation, aggregation or
policy loss differ take different steps (a preset whose settings were dropped on the way would take
GRPO's). The learning claims themselves are the slow runs of tests/test_algorithms_slow.py."""

import copy

import pytest
import torch
from tests.core.test_policy_update import rewarded_groups, uneven_lengths

from rlxf.algos import AlgorithmConfig, compute_advantages, token_rewards_from_scores
from rlxf.algos.presets import PRESETS
from rlxf.config import OptimConfig
from rlxf.roles.actor import ActorRole
from rlxf.train.log_probs import batch_log_probs

GREEDY_REWARD = 0.25  # ReMax's baseline: the reward of each prompt's greedy answer, given by hand here
# the settings that change the first step's gradient on a batch that holds no KL, overlong or old policy
MATH = ("advantage_estimator", "norm_adv_by_std", "loss_aggregation", "policy_loss")


def first_step(tiny_model, batch, preset: str) -> dict[str, float]:
    from rlxf.roles.critic import CriticRole
    from rlxf.train.value_model import ValueModel

    algo = AlgorithmConfig(name=preset)
    values = None
    if algo.use_critic:
        critic = CriticRole(ValueModel(copy.deepcopy(tiny_model).requires_grad_(True)), OptimConfig(lr=1e-3), algo, 8, 8)
        values = critic.compute_values(batch)
    token_rewards = token_rewards_from_scores(batch.rewards, batch.loss_mask)
    baseline = torch.full((len(batch),), GREEDY_REWARD) if algo.needs_greedy_baseline else None
    batch.advantages, batch.returns = compute_advantages(algo, token_rewards, batch.loss_mask, batch.group_ids,
                                                         values=values, baseline_rewards=baseline)
    actor = ActorRole(copy.deepcopy(tiny_model), OptimConfig(lr=1e-30, grad_clip=None), algo, 8, 8, 1.0,
                      max_response_len=12)
    return actor.update(batch, torch.Generator().manual_seed(0))[0]


@pytest.fixture(scope="module")
def steps(tiny_model, tokenizer) -> dict[str, dict[str, float]]:
    batch, _ = rewarded_groups(copy.deepcopy(tiny_model), tokenizer, ["1+2=", "40+4="], 12)
    batch = uneven_lengths(batch, [3, 5, 12, 8, 2, 12, 7, 10])
    batch.rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0])  # group means differ: 0.5, 0.75
    # a step after the sampling policy moved (ratios e^-0.4 .. e^0.4, alternating along each response:
    # some clipped by PPO-clip, not by CISPO): at ratio 1 GSPO, CISPO and GRPO share one gradient
    shift = 0.4 * (-1.0) ** torch.arange(batch.response_ids.shape[1])
    batch.old_log_probs = (batch_log_probs(tiny_model, batch, 8) - shift) * batch.loss_mask
    return {preset: first_step(tiny_model, copy.deepcopy(batch), preset) for preset in PRESETS}


def test_every_preset_takes_a_step(steps):
    for preset, step in steps.items():
        assert step["grad_norm"] > 1e-3, (preset, step)


def test_presets_that_differ_take_different_steps(steps):
    for a in PRESETS:
        for b in PRESETS:
            settings_differ = any(PRESETS[a][k] != PRESETS[b][k] for k in MATH)
            if a < b and settings_differ:
                assert steps[a]["grad_norm"] != pytest.approx(steps[b]["grad_norm"], rel=1e-4), (a, b)
            if a < b and not settings_differ:  # e.g. DAPO's changes act on clipping and sampling only
                assert steps[a]["grad_norm"] == pytest.approx(steps[b]["grad_norm"], rel=1e-5), (a, b)


def test_ppo_critic_learns_the_returns(tiny_model, tokenizer):
    """PPO's critic, updated three times on one batch, fits its returns: the value loss falls each time
    and the values move towards the returns."""
    from rlxf.roles.critic import CriticRole
    from rlxf.train.value_model import ValueModel

    batch, _ = rewarded_groups(copy.deepcopy(tiny_model), tokenizer, ["1+2=", "40+4="], 6)
    algo = AlgorithmConfig(name="ppo", ppo_epochs=1)
    critic = CriticRole(ValueModel(copy.deepcopy(tiny_model).requires_grad_(True)), OptimConfig(lr=3e-3), algo, 8, 8)
    batch.values = critic.compute_values(batch)
    token_rewards = token_rewards_from_scores(batch.rewards, batch.loss_mask)
    batch.advantages, batch.returns = compute_advantages(algo, token_rewards, batch.loss_mask, batch.group_ids,
                                                         values=batch.values)
    mask = batch.loss_mask.bool()
    before = (critic.compute_values(batch) - batch.returns)[mask].abs().mean()
    losses = [critic.update(batch, torch.Generator().manual_seed(i))[0]["loss"] for i in range(3)]
    after = (critic.compute_values(batch) - batch.returns)[mask].abs().mean()
    assert losses[0] > losses[1] > losses[2] > 0, losses
    assert after < before - 0.01, (before, after)  # (value_clip bounds how far one batch moves them)
