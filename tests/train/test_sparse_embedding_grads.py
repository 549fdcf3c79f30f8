"""The input embedding's gradient as the rows it used (train/sparse_embedding_grads.py): the single engine's
update equals the dense path's, tied and untied, and the shared-prompt path runs the LM head once."""

import copy

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from rlxf.config import OptimConfig
from rlxf.train import engine as engine_module
from rlxf.train import log_probs as lp
from rlxf.train.engine import TrainEngine
from rlxf.train.sparse_embedding_grads import densify_sparse_grads, sparse_embedding_grads


def _random_llama(tied: bool) -> LlamaForCausalLM:
    config = LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tied, pad_token_id=0)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).double()


def _micro_batches(vocab: int):
    """Two micro-batches of 2 prompts x 2 samples (the shared-prompt path), responses of 1-4 tokens."""
    g = torch.Generator().manual_seed(0)
    out = []
    for lengths in ([4, 2, 3, 1], [1, 4, 4, 2]):
        prompts = torch.randint(3, vocab, (2, 5), generator=g).repeat_interleave(2, 0)
        mask = (torch.arange(4)[None] < torch.tensor(lengths)[:, None]).long()
        responses = torch.randint(3, vocab, (4, 4), generator=g) * mask
        out.append((torch.cat([prompts, responses], 1), torch.cat([torch.ones_like(prompts), mask], 1), responses, mask))
    return out


def _loss(model, micro):
    ids, mask, responses, response_mask = micro
    log_p, _ = lp.response_token_log_probs(model, ids, mask, responses, response_mask, 0.7)
    return -(log_p * torch.linspace(-1, 2, log_p.numel()).view_as(log_p).double()).sum(), {}


def _grads_after_backward(model, sparse: bool) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    scope = sparse_embedding_grads(model) if sparse else torch.enable_grad()
    with scope:
        for micro in _micro_batches(model.config.vocab_size):
            _loss(model, micro)[0].backward()
    return {n: p.grad for n, p in model.named_parameters()}


@pytest.mark.parametrize("tied", [True, False])
def test_the_embedding_gradient_sums_to_the_dense_one(tied):
    model = _random_llama(tied)
    dense = {n: g.clone() for n, g in _grads_after_backward(model, sparse=False).items()}
    assert not model.model.embed_tokens.sparse
    got = _grads_after_backward(model, sparse=True)
    assert not model.model.embed_tokens.sparse  # switched back after the block
    embedding = "model.embed_tokens.weight"
    # tied: the head's dense gradient absorbs the rows; untied: the rows stay sparse until densified
    assert got[embedding].is_sparse == (not tied)
    densify_sparse_grads(model.parameters())
    assert not model.model.embed_tokens.weight.grad.is_sparse
    got = {n: p.grad for n, p in model.named_parameters()}
    assert dense.keys() == got.keys()
    for name in dense:
        torch.testing.assert_close(got[name], dense[name], rtol=1e-12, atol=1e-12)
    used = torch.cat([m[0] for m in _micro_batches(model.config.vocab_size)]).unique()
    untouched = torch.ones(model.config.vocab_size, dtype=torch.bool)
    untouched[used] = False
    if not tied:  # rows no token used get no gradient from the embedding
        assert torch.count_nonzero(got[embedding][untouched]) == 0


@pytest.mark.parametrize("tied", [True, False])
def test_an_engine_step_equals_the_dense_update(tied, monkeypatch):
    plain, sparse = _random_llama(tied), _random_llama(tied)
    cfg = OptimConfig(lr=1e-2, grad_clip=0.5)
    dense_engine, sparse_engine = TrainEngine(plain, cfg), TrainEngine(sparse, cfg)
    monkeypatch.setattr(dense_engine, "_gradient_scope", torch.enable_grad)
    seen = []
    real_clip = sparse_engine._clip_gradients

    def clip():  # the optimizer and the clip see dense gradients only (fused AdamW refuses sparse ones)
        seen.extend(p.grad.is_sparse for p in sparse.parameters() if p.grad is not None)
        return real_clip()

    monkeypatch.setattr(sparse_engine, "_clip_gradients", clip)
    arrived_sparse = []
    real_densify = engine_module.densify_sparse_grads

    def densify(params):
        params = list(params)
        arrived_sparse.append(any(p.grad is not None and p.grad.is_sparse for p in params))
        real_densify(params)

    monkeypatch.setattr(engine_module, "densify_sparse_grads", densify)
    for _ in range(2):
        a = dense_engine.optimizer_step(_micro_batches(300), lambda m: _loss(plain, m))
        b = sparse_engine.optimizer_step(_micro_batches(300), lambda m: _loss(sparse, m))
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-12)
    assert seen and not any(seen)
    # the dense engine's steps see no sparse rows; the sparse one's do where the embedding is untied
    assert arrived_sparse == [False, not tied, False, not tied]
    for (name, p), q in zip(plain.named_parameters(), sparse.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-12, atol=1e-12, msg=name)


def test_frozen_embeddings_are_left_dense():
    model = _random_llama(tied=False)
    model.model.embed_tokens.weight.requires_grad_(False)
    with sparse_embedding_grads(model):
        assert not model.model.embed_tokens.sparse


def test_the_shared_prompt_path_runs_the_head_once():
    """One head call over [first; rest]: each call writes a whole [V, H] gradient in backward."""
    model = _random_llama(tied=True)
    calls = []
    model.lm_head.register_forward_hook(lambda module, args, out: calls.append(args[0].shape))
    ids, mask, responses, response_mask = _micro_batches(300)[0]
    shared = lp.response_logits(model, ids, mask, responses.shape[1])
    assert calls == [torch.Size([4, 4, 32])]
    calls.clear()
    full = copy.deepcopy(model)
    full.config.model_type = "plain"  # not a shared-prefix architecture: the full forward
    full.lm_head.register_forward_hook(lambda module, args, out: calls.append(args[0].shape))
    torch.testing.assert_close(shared, lp.response_logits(full, ids, mask, responses.shape[1]), rtol=1e-6, atol=1e-7)
