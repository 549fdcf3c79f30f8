"""One policy-gradient update moves probability towards positive-advantage responses."""

import copy

import pytest
import torch

from rlxf.algos import AlgorithmConfig, compute_advantages, token_rewards_from_scores
from rlxf.config import OptimConfig
from rlxf.roles.actor import ActorRole
from rlxf.roles.rollout import RolloutRole
from rlxf.rollout.engine import build_engine
from rlxf.rollout.sampling import SamplingParams
from rlxf.train.log_probs import batch_log_probs, response_logits, token_log_probs


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


def uneven_lengths(batch, lengths: list[int]):
    """``batch`` with its responses cut to ``lengths`` tokens (padding after), so micro-batches hold
    different token counts and a token budget cuts the rows differently from a row count."""
    keep = (torch.arange(batch.response_ids.shape[1])[None, :] < torch.tensor(lengths)[:, None]).long()
    batch.response_mask = batch.response_mask * keep
    batch.loss_mask = batch.loss_mask * keep
    batch.response_ids = torch.where(keep.bool(), batch.response_ids, 0)
    return batch


def hand_gradient(model, batch, aggregation: str) -> tuple[float, dict[str, torch.Tensor]]:
    """Loss and gradients of the whole mini-batch in one pass, written out by hand: at the sampling
    policy the clipped ratio is 1, so the loss is -A (its gradient -A * grad log p), aggregated over ALL
    rows with the whole mini-batch's counts."""
    model.zero_grad(set_to_none=True)
    model.train()
    logits = response_logits(model, batch.input_ids, batch.attention_mask, batch.response_ids.shape[1])
    log_probs = token_log_probs(logits, batch.response_ids)
    mask = batch.loss_mask.float()
    surrogate = -batch.advantages * torch.exp(log_probs - log_probs.detach()) * mask
    if aggregation == "token_mean":
        loss = surrogate.sum() / mask.sum()
    else:  # seq_mean_token_mean
        loss = (surrogate.sum(1) / mask.sum(1)).sum() / len(batch)
    loss.backward()
    return float(loss.detach()), {n: p.grad.clone() for n, p in model.named_parameters()}


# Sorted by length: [2, 3, 5, 7, 8, 10, 12, 12] with prompts of 4-5 tokens. Rows of 3 cut [3, 3, 2]; a
# budget of 40 padded tokens cuts [3, 2, 2, 1]; 8 rows make one micro-batch. Each micro-batch holds a
# different share of the loss tokens, so normalising a micro-batch by its own counts changes the gradient.
CUTS = {"rows of 3": (3, None), "one micro-batch": (8, None), "40-token budget": (8, 40)}


@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean_token_mean"])
def test_any_micro_batch_cut_gives_the_whole_mini_batch_gradient(tiny_model, tokenizer, aggregation):
    """train.micro_batch_size / micro_batch_tokens change how the mini-batch is cut, not its loss or
    gradient: every cut, through ActorRole.update and the train engine, gives the gradient of the whole
    mini-batch computed by hand (compared before the optimizer moves anything)."""
    from rlxf.train.micro_batches import micro_batches

    batch, _ = rewarded_groups(copy.deepcopy(tiny_model), tokenizer, ["1+2=", "40+4="], 12)
    batch = uneven_lengths(batch, [3, 5, 12, 8, 2, 12, 7, 10])
    # advantages that grow along the response, so neither mode's loss is a sum of +A and -A that cancels
    batch.advantages = batch.advantages + torch.linspace(0.0, 0.5, batch.advantages.shape[1])
    algo = AlgorithmConfig(name="grpo", loss_aggregation=aggregation)
    expected_loss, expected = hand_gradient(copy.deepcopy(tiny_model), batch, aggregation)
    expected_norm = float(torch.linalg.vector_norm(torch.stack([g.norm() for g in expected.values()])))
    assert expected_norm > 1e-3 and abs(expected_loss) > 1e-3  # a gradient worth comparing
    sorted_batch = batch.select(torch.argsort(batch.response_lengths, stable=True))
    for cut, (rows, tokens) in CUTS.items():
        sizes = [len(m) for m in micro_batches(sorted_batch, rows, tokens)]
        assert sizes == {"rows of 3": [3, 3, 2], "one micro-batch": [8], "40-token budget": [3, 2, 2, 1]}[cut]
        model = copy.deepcopy(tiny_model)
        # grad_clip off and a negligible lr: the gradients are read as the engine left them after its step
        actor = ActorRole(model, OptimConfig(lr=1e-30, grad_clip=None), algo, mini_batch_size=8,
                          micro_batch_size=rows, temperature=1.0, micro_batch_tokens=tokens)
        step = actor.update(batch, torch.Generator().manual_seed(0))[0]
        assert step["loss"] == pytest.approx(expected_loss, rel=1e-5, abs=1e-7), cut
        assert step["grad_norm"] == pytest.approx(expected_norm, rel=1e-4), cut
        for name, param in model.named_parameters():
            torch.testing.assert_close(param.grad, expected[name], rtol=1e-4, atol=1e-7, msg=f"{cut}: {name}")


def _first_loss(role, batch) -> float:
    """The loss of the role's first optimizer step (computed before the weights move)."""
    return role.update(batch, torch.Generator().manual_seed(0))[0]["loss"]


def test_actor_and_critic_divide_by_the_generation_budget(tiny_model, tokenizer):
    """Dr. GRPO (seq_mean_token_sum_norm): doubling the budget halves the loss, whatever the batch's width."""
    from rlxf.roles.critic import CriticRole
    from rlxf.train.value_model import ValueModel

    batch, _ = rewarded_groups(copy.deepcopy(tiny_model), tokenizer, ["1+2=", "4+4="], 4)
    # GRPO's advantages sum to zero in a group, so at ratio 1 with equal lengths the actor's loss is 0 up
    # to float rounding (the order micro-batches add it up in decides the sign of the rounding): all positive
    batch.advantages = batch.loss_mask * torch.arange(1.0, 9.0)[:, None]
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
