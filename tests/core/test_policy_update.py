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


def test_grpo_step_raises_log_prob_of_rewarded_samples(tiny_model, tokenizer):
    model = copy.deepcopy(tiny_model)
    engine = build_engine("torch", model, tokenizer.eos_token_id, tokenizer.pad_token_id)
    rollout = RolloutRole(engine, tokenizer, chat_template=False, max_prompt_tokens=16)
    batch = rollout.generate([{"prompt": "1+2="}, {"prompt": "4+4="}], SamplingParams(n=4, max_new_tokens=4),
                             torch.Generator().manual_seed(0))
    batch.rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0])
    algo = AlgorithmConfig(name="grpo")
    token_rewards = token_rewards_from_scores(batch.rewards, batch.loss_mask)
    batch.advantages, batch.returns = compute_advantages(algo, token_rewards, batch.loss_mask, batch.group_ids)
    before = batch_log_probs(model, batch, 8).sum(-1)
    actor = ActorRole(model, OptimConfig(lr=1e-3), algo, mini_batch_size=8, micro_batch_size=4, temperature=1.0)
    metrics = actor.update(batch, torch.Generator().manual_seed(0))
    after = batch_log_probs(model, batch, 8).sum(-1)
    change = after - before
    assert len(metrics) == 1 and metrics[0]["grad_norm"] > 0
    assert (change[batch.rewards == 1] > 0).all(), change
    assert (change[batch.rewards == 0] < 0).all(), change
