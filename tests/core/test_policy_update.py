"""One policy-gradient update moves probability towards positive-advantage responses."""

import copy

import torch

from rlxf.algos import AlgorithmConfig, compute_advantages, token_rewards_from_scores
from rlxf.config import OptimConfig
from rlxf.roles.actor import ActorRole
from rlxf.roles.rollout import RolloutRole
from rlxf.rollout.engine import build_engine
from rlxf.rollout.sampling import SamplingParams
from rlxf.train.log_probs import batch_log_probs


def rewarded_groups(model, tokenizer, prompts: list[str], max_new_tokens: int):
    """Two groups of 4 samples of ``model`` with fixed rewards and their GRPO advantages."""
    engine = build_engine("torch", model, tokenizer.eos_token_id, tokenizer.pad_token_id)
    rollout = RolloutRole(engine, tokenizer, chat_template=False, max_prompt_tokens=16)
    batch = rollout.generate([{"prompt": p} for p in prompts], SamplingParams(n=4, max_new_tokens=max_new_tokens),
                             torch.Generator().manual_seed(0))
    batch.rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0])
    algo = AlgorithmConfig(name="grpo")
    token_rewards = token_rewards_from_scores(batch.rewards, batch.loss_mask)
    batch.advantages, batch.returns = compute_advantages(algo, token_rewards, batch.loss_mask, batch.group_ids)
    return batch, algo


def test_grpo_step_raises_log_prob_of_rewarded_samples(tiny_model, tokenizer):
    model = copy.deepcopy(tiny_model)
    batch, algo = rewarded_groups(model, tokenizer, ["1+2=", "4+4="], 4)
    before = batch_log_probs(model, batch, 8).sum(-1)
    actor = ActorRole(model, OptimConfig(lr=1e-3), algo, mini_batch_size=8, micro_batch_size=4, temperature=1.0)
    metrics = actor.update(batch, torch.Generator().manual_seed(0))
    after = batch_log_probs(model, batch, 8).sum(-1)
    change = after - before
    assert len(metrics) == 1 and metrics[0]["grad_norm"] > 0
    assert (change[batch.rewards == 1] > 0).all(), change
    assert (change[batch.rewards == 0] < 0).all(), change


def test_token_budget_micro_batches_give_the_row_micro_batches_update(tiny_model, tokenizer):
    """train.micro_batch_tokens changes how the mini-batch is cut, not the update."""
    batch, algo = rewarded_groups(copy.deepcopy(tiny_model), tokenizer, ["1+2=", "40+4="], 12)
    updated = []
    for tokens in (None, 40):
        model = copy.deepcopy(tiny_model)
        actor = ActorRole(model, OptimConfig(lr=1e-3), algo, mini_batch_size=8, micro_batch_size=2,
                          temperature=1.0, micro_batch_tokens=tokens)
        loss = actor.update(batch, torch.Generator().manual_seed(0))[0]["loss"]
        updated.append((loss, model.state_dict()))
    (loss_rows, rows), (loss_tokens, tokens) = updated
    assert abs(loss_rows - loss_tokens) < 1e-6
    for name in rows:
        torch.testing.assert_close(rows[name], tokens[name], atol=1e-6, rtol=0)


def _first_loss(role, batch) -> float:
    """The loss of the role's first optimizer step (computed before the weights move)."""
    return role.update(batch, torch.Generator().manual_seed(0))[0]["loss"]


def test_actor_and_critic_divide_by_the_generation_budget(tiny_model, tokenizer):
    """Dr. GRPO (seq_mean_token_sum_norm): doubling the budget halves the loss, whatever the batch's width."""
    from rlxf.models.value_head import ValueModel
    from rlxf.roles.critic import CriticRole

    batch, _ = rewarded_groups(copy.deepcopy(tiny_model), tokenizer, ["1+2=", "4+4="], 4)
    algo = AlgorithmConfig(name="ppo", loss_aggregation="seq_mean_token_sum_norm")
    width = batch.response_ids.shape[1]
    losses = {}
    for budget in (width, 2 * width):
        actor = ActorRole(copy.deepcopy(tiny_model), OptimConfig(lr=1e-3), algo, 8, 8, 1.0, max_response_len=budget)
        critic = CriticRole(ValueModel(copy.deepcopy(tiny_model).requires_grad_(True)), OptimConfig(lr=1e-3), algo,
                            8, 8, max_response_len=budget)
        batch.values = critic.compute_values(batch)
        losses[budget] = (_first_loss(actor, batch), _first_loss(critic, batch))
    (actor_1, critic_1), (actor_2, critic_2) = losses[width], losses[2 * width]
    assert abs(actor_2 - actor_1 / 2) < 1e-6 * max(1.0, abs(actor_1)) and actor_1 != 0
    assert abs(critic_2 - critic_1 / 2) < 1e-6 * max(1.0, abs(critic_1)) and critic_1 > 0
