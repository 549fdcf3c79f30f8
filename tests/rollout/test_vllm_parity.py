"""Log-prob parity between vLLM and the trainer's forward pass (``train/log_probs.py``), in fp32, on the
same prompts and weights; and after a weight update, vLLM's log-probs are those of the new weights.

Tolerance: 1e-4 (absolute, on log-probs). Both sides compute in fp32, in different kernels: vLLM's CPU
build runs the linear layers as packed oneDNN GEMMs and has its own fused RMSNorm, rotary and SiLU, so the
two differ by summation order only, a few fp32 ulps of the logits per layer. Measured on the tiny model:
at most 4.8e-7 with its initial weights (logits of order 0.1) and 2.5e-5 after the update below (noise of
0.5 on every matrix: logits of order 10). Any real mismatch is orders of magnitude larger: the wrong
temperature, a stale layer or the old weights (4.8 below), an off-by-one position.
"""

from __future__ import annotations

import copy

import pytest
import torch

from rlxf.batch import left_pad
from rlxf.rollout.sampling import SamplingParams
from rlxf.train.log_probs import sequence_log_probs

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm", reason="vLLM is not installed: `make test-vllm` runs these tests in .venv-vllm")

PROMPTS = [[5, 9, 12, 3], [7, 7], [20, 4, 11, 30, 2, 8], [15], [3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3]]
TOLERANCE = 1e-4


def trainer_log_probs(model, gen, pad_id: int, temperature: float) -> torch.Tensor:
    """What the trainer computes for the sampled tokens: log_softmax(logits / T), on the response mask."""
    prompt_ids, prompt_mask = left_pad([PROMPTS[i] for i in gen.prompt_index.tolist()], pad_id, torch.device("cpu"))
    with torch.no_grad():
        expected, _ = sequence_log_probs(model, prompt_ids, prompt_mask, gen.response_ids, gen.response_mask,
                                         temperature or 1.0)
    return (expected * gen.response_mask).float()


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_log_probs_match_the_trainer_forward(vllm_engine, vllm_policy, tokenizer, temperature):
    params = SamplingParams(n=3, temperature=temperature, max_new_tokens=12)
    assert vllm_engine.exact_log_probs(params)
    gen = vllm_engine.generate(PROMPTS, params, torch.Generator().manual_seed(1))
    assert gen.response_mask.sum() >= 30  # enough tokens for the comparison to mean something
    diff = (gen.log_probs - trainer_log_probs(vllm_policy, gen, tokenizer.pad_token_id, temperature)).abs()
    assert diff.max().item() <= TOLERANCE


def test_after_an_update_log_probs_are_the_new_weights(vllm_engine, vllm_policy, tokenizer):
    """Then a change to the tied embedding alone: it must reach the head's logits too (vLLM's reload
    processes the embedding's layer only; rollout/vllm_worker.py re-packs the head)."""
    original = {k: v.detach().clone() for k, v in vllm_policy.state_dict().items()}
    g = torch.Generator().manual_seed(7)
    new = {k: v + 0.5 * torch.randn(v.shape, generator=g) if v.dim() == 2 else v for k, v in original.items()}
    new["lm_head.weight"] = new["model.embed_tokens.weight"]
    updated = copy.deepcopy(vllm_policy)
    updated.load_state_dict(new)
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=12)
    vllm_engine.update_weights(new, vllm_engine.version + 1)
    try:
        gen = vllm_engine.generate(PROMPTS, params, torch.Generator().manual_seed(2))
        to_new = (gen.log_probs - trainer_log_probs(updated, gen, tokenizer.pad_token_id, 1.0)).abs().max().item()
        to_old = (gen.log_probs - trainer_log_probs(vllm_policy, gen, tokenizer.pad_token_id, 1.0)).abs().max().item()
        assert to_new <= TOLERANCE
        assert to_old > 1.0  # measured 4.8: the update took
        only_head = {**original, "model.embed_tokens.weight": new["model.embed_tokens.weight"],
                     "lm_head.weight": new["model.embed_tokens.weight"]}
        vllm_engine.update_weights(only_head, vllm_engine.version + 1)  # a change to the tied head alone
        updated.load_state_dict(only_head)
        gen = vllm_engine.generate(PROMPTS, params, torch.Generator().manual_seed(3))
        assert (gen.log_probs - trainer_log_probs(updated, gen, tokenizer.pad_token_id, 1.0)).abs().max() <= TOLERANCE
    finally:
        vllm_engine.update_weights(original, vllm_engine.version)


def test_an_update_in_chunks_that_split_fused_layers(vllm_engine, vllm_policy, tokenizer, monkeypatch):
    """One tensor per collective_rpc call: q/k/v (one fused qkv_proj in vLLM) and gate/up arrive in
    separate calls; vLLM's reload buffers a layer's tensors until its last one, then loads it whole."""
    original = {k: v.detach().clone() for k, v in vllm_policy.state_dict().items()}
    g = torch.Generator().manual_seed(11)
    new = {k: v + 0.3 * torch.randn(v.shape, generator=g) if v.dim() == 2 else v for k, v in original.items()}
    new["lm_head.weight"] = new["model.embed_tokens.weight"]
    updated = copy.deepcopy(vllm_policy)
    updated.load_state_dict(new)
    calls = []
    rpc = vllm_engine.llm.collective_rpc
    monkeypatch.setattr(vllm_engine.llm, "collective_rpc", lambda method, *a, **k: calls.append(method) or rpc(method, *a, **k))
    monkeypatch.setattr(vllm_engine, "_chunk_bytes", 1)  # every tensor alone
    vllm_engine.update_weights(new, vllm_engine.version + 1)
    try:
        assert calls.count("rlxf_load_weights") == len(new)
        gen = vllm_engine.generate(PROMPTS, SamplingParams(n=2, temperature=1.0, max_new_tokens=12),
                                   torch.Generator().manual_seed(4))
        assert (gen.log_probs - trainer_log_probs(updated, gen, tokenizer.pad_token_id, 1.0)).abs().max() <= TOLERANCE
    finally:
        monkeypatch.undo()
        vllm_engine.update_weights(original, vllm_engine.version)
