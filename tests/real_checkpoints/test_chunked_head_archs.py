"""The chunked LM head (train.logits_chunk_tokens) on Qwen2, Mistral and GPT-2: the decoder each model
names (``get_decoder``) and its output layer give the full forward's log-probs and gradients."""

from __future__ import annotations

import pytest
import torch

from rlxf.models.loading import load_causal_lm
from rlxf.train.log_probs import response_token_log_probs
from tests.real_checkpoints.conftest import ARCHS


def _run(model, chunk: int):
    g = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    prompts = torch.randint(3, vocab, (2, 5), generator=g).repeat_interleave(2, 0)  # shared prompts
    responses = torch.randint(3, vocab, (4, 4), generator=g)
    response_mask = (torch.arange(4)[None, :] < torch.tensor([4, 2, 3, 1])[:, None]).long()
    ids = torch.cat([prompts, responses * response_mask], 1)
    mask = torch.cat([torch.ones_like(prompts), response_mask], 1)
    model.zero_grad(set_to_none=True)
    log_p, entropy = response_token_log_probs(model, ids, mask, responses * response_mask, response_mask,
                                              0.8, with_entropy=True, chunk_tokens=chunk)
    (log_p.sum() + 0.3 * entropy.sum()).backward()
    return log_p.detach(), entropy.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("arch", ARCHS)
def test_chunked_head_matches_the_full_forward(checkpoints, arch):
    model = load_causal_lm(checkpoints[arch]).eval().requires_grad_(True)  # eval: GPT-2's dropout off
    want, got = _run(model, 0), _run(model, 3)
    assert (want[0] != 0).sum() == 10
    assert torch.allclose(got[0], want[0], atol=1e-5) and torch.allclose(got[1], want[1], atol=1e-5)
    assert got[2].keys() == want[2].keys()
    for name, grad in want[2].items():
        assert torch.allclose(got[2][name], grad, atol=1e-5, rtol=1e-4), name
