"""model.gradient_checkpointing: the actor's and the critic's gradients are those of the plain backward,
and activations really are recomputed (each layer runs twice)."""

from __future__ import annotations

import pytest
import torch

from rlxf.config import Config
from rlxf.loops.setup import frozen_copy, load_policy
from rlxf.train.log_probs import sequence_log_probs
from rlxf.train.value_model import ValueModel

PROMPTS = torch.tensor([[0, 0, 5, 9, 14], [3, 7, 11, 20, 21]])
PROMPT_MASK = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
RESPONSE = torch.tensor([[30, 31, 32], [40, 41, 0]])
RESPONSE_MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])


def _layer_calls(model) -> list[int]:
    """How often the first layer's MLP ran (transformers checkpoints a layer's forward: its submodules rerun)."""
    decoder = model.get_decoder()
    first = decoder.layers[0] if hasattr(decoder, "layers") else decoder.h[0]
    calls = [0]
    # a pre-hook: the recompute stops early once it has the tensors backward needs (inside the MLP)
    first.mlp.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


def _actor_grads(model) -> dict[str, torch.Tensor]:
    model.train()
    log_probs, _ = sequence_log_probs(model, PROMPTS, PROMPT_MASK, RESPONSE, RESPONSE_MASK)
    (log_probs * RESPONSE_MASK).sum().backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _critic_grads(lm) -> dict[str, torch.Tensor]:
    critic = ValueModel(lm.requires_grad_(True))
    torch.nn.init.constant_(critic.value_head.weight, 0.1)
    critic.train()
    ids, mask = torch.cat([PROMPTS, RESPONSE], 1), torch.cat([PROMPT_MASK, RESPONSE_MASK], 1)
    critic(ids, mask).pow(2).sum().backward()
    return {n: p.grad.clone() for n, p in critic.named_parameters() if p.grad is not None}


def _same(a: dict, b: dict) -> float:
    assert a.keys() == b.keys() and len(a) > 10
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.mark.parametrize("arch", ["qwen2", "gpt2"])
def test_actor_and_critic_gradients_identical_with_checkpointing(checkpoints, arch):
    plain_cfg, ckpt_cfg = Config(), Config.model_validate({"model": {"gradient_checkpointing": True}})
    plain, checkpointed = load_policy(plain_cfg, checkpoints[arch], "cpu"), load_policy(ckpt_cfg, checkpoints[arch], "cpu")
    calls_plain, calls_ckpt = _layer_calls(plain), _layer_calls(checkpointed)
    assert _same(_actor_grads(plain), _actor_grads(checkpointed)) <= 1e-6
    assert (calls_plain[0], calls_ckpt[0]) == (1, 2)  # the checkpointed layer ran again in backward
    # the critic is a copy of the policy when model.critic_path is unset: it inherits the switch
    critic_plain, critic_ckpt = frozen_copy(plain), frozen_copy(checkpointed)
    calls_plain, calls_ckpt = _layer_calls(critic_plain), _layer_calls(critic_ckpt)
    assert _same(_critic_grads(critic_plain), _critic_grads(critic_ckpt)) <= 1e-6
    assert (calls_plain[0], calls_ckpt[0]) == (1, 2)
