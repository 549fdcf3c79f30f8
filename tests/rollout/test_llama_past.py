"""Prefill over a kept KV cache (decoders/llama_past.py): rows that continue cached sequences get the
logits of a full forward over their whole sequence, beside rows without a past and running cohorts."""

import pytest
import torch
import transformers

from rlxf.rollout.decoders import LlamaDecoder


def _model(kv_heads: int) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=50, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=kv_heads, max_position_embeddings=128)
    return transformers.LlamaForCausalLM(cfg).eval()


@torch.no_grad()
def _last_logits(model, seq: list[int]) -> torch.Tensor:
    return model(torch.tensor([seq])).logits[0, -1].float()


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_prefill_over_kept_caches_equals_full_forward(kv_heads):
    model = _model(kv_heads)
    dec = LlamaDecoder.from_hf(model)
    seqs = [[3, 4, 5, 6, 7], [9, 8], [1, 2, 3, 4, 5, 6, 7, 8, 9]]
    logits = dec.extend_with_past([None] * 3, seqs, max_new_tokens=8)  # no past: a plain prefill
    for row, seq in enumerate(seqs):
        torch.testing.assert_close(logits[row], _last_logits(model, seq), atol=1e-5, rtol=0)
    dec.step(torch.tensor([10, 11, 12]))
    seqs = [s + [t] for s, t in zip(seqs, [10, 11, 12])]
    pasts = [dec.row_cache(row) for row in range(3)]
    assert [p.shape[3] for p in pasts] == [6, 3, 10]  # the K/V of every token fed so far
    dec.keep(torch.tensor([], dtype=torch.long))  # their turns ended: the rows leave the batch
    # next turn: the pasts continue with new tokens of different lengths, beside a running cohort
    dec.extend_with_past([None], [[5, 5]], max_new_tokens=4)
    new = [[13, 20, 21], [14], [15, 22]]
    logits = dec.extend_with_past(pasts, new, max_new_tokens=8)
    assert [c.rows for c in dec.cohorts] == [1, 3]
    seqs = [s + n for s, n in zip(seqs, new)]
    for row, seq in enumerate(seqs):
        torch.testing.assert_close(logits[row], _last_logits(model, seq), atol=1e-5, rtol=0)
    out = dec.step(torch.tensor([4, 30, 31, 32]))
    torch.testing.assert_close(out[0], _last_logits(model, [5, 5, 4]), atol=1e-5, rtol=0)
    for row, seq in enumerate(seqs):
        torch.testing.assert_close(out[1 + row], _last_logits(model, seq + [30 + row]), atol=1e-5, rtol=0)


def test_a_row_needs_new_tokens():
    dec = LlamaDecoder.from_hf(_model(2))
    with pytest.raises(ValueError, match="at least one new token"):
        dec.extend_with_past([None], [[]], max_new_tokens=2)
