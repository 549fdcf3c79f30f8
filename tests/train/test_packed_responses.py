"""The packed training pass (train/packed_responses.py): each distinct prompt once and the responses of its
rows back to back, under a block mask. The layout by hand; states, log-probs, values and gradients equal to
the padded forward's; when it is chosen."""

import copy

import pytest
import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from rlxf.train import log_probs
from rlxf.train.packed_responses import forward_flops, mask_kind, pack
from rlxf.train.precision import CPU_AUTOCAST_ATTENTION
from rlxf.train.value_model import ValueModel


def test_the_layout_of_a_small_micro_batch_by_hand():
    # rows 0 and 2 share the left-padded prompt [5, 6]; row 1 has [4, 5, 6]; responses of 3, 1 and 2 tokens
    ids = torch.tensor([[0, 5, 6, 7, 8, 9], [4, 5, 6, 10, 0, 0], [0, 5, 6, 11, 12, 0]])
    mask = torch.tensor([[0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0], [0, 1, 1, 1, 1, 0]])
    layout = pack(ids, mask, 3, torch.tensor([0, 1, 0]))
    # a response's last token predicts nothing, so it is not fed: row 0 feeds 7, 8; row 1 nothing; row 2 11
    assert layout.input_ids.tolist() == [[5, 6, 7, 8, 11], [4, 5, 6, 0, 0]]
    assert layout.position_ids.tolist() == [[0, 1, 2, 3, 2], [0, 1, 2, 0, 0]]
    assert layout.segments.tolist() == [[0, 0, 1, 1, 2], [0, 0, 0, -1, -1]]
    # states needed from position 1 (the shorter prompt's last token) on: 4 kept a sequence, zero row at 8
    assert layout.keep == 4
    assert layout.gather.view(3, 3).tolist() == [[0, 1, 2], [5, 8, 8], [0, 3, 8]]
    allowed = layout.attention_mask("bool", torch.float32)[:, 0].int().tolist()
    assert allowed[0] == [[1, 0, 0, 0, 0],
                          [1, 1, 0, 0, 0],
                          [1, 1, 1, 0, 0],  # response 1 sees the prompt and itself
                          [1, 1, 1, 1, 0],
                          [1, 1, 0, 0, 1]]  # response 2 sees the prompt, not response 1
    assert allowed[1] == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [0, 0, 0, 1, 0], [0, 0, 0, 0, 1]]
    additive = layout.attention_mask("additive", torch.float32)
    assert torch.equal(additive == 0, layout.attention_mask("bool", torch.float32))
    assert additive.min() == torch.finfo(torch.float32).min
    states = torch.arange(2 * 4, dtype=torch.float32).view(2, 4, 1) + 1
    # kept positions 1..4 of each sequence: [2, 3, 4, 5] and [6, 7, 8, 9]; padded rows read them back
    assert layout.unpack(states, 3, 3)[..., 0].tolist() == [[1, 2, 3], [6, 0, 0], [1, 4, 0]]


def test_a_response_mask_with_holes_or_an_empty_prompt_is_not_packed():
    ids = torch.tensor([[5, 6, 7, 8], [5, 6, 9, 10]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 1]])
    assert pack(ids, mask, 2, torch.tensor([0, 0])) is None
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    assert pack(ids, mask, 2, torch.tensor([0, 1])) is None


def test_forward_flops_counts_projections_mlp_and_attention_pairs():
    config = LlamaConfig(hidden_size=8, intermediate_size=16, num_hidden_layers=2, num_attention_heads=2,
                         num_key_value_heads=1)
    # a layer: q, o 8x8 each, k, v 8x4 each -> 2 x 8 x (8 + 8 + 4 + 4) a token; MLP 3 x 8 x 16 x 2 a token
    per_token = 2 * 8 * 24 + 6 * 8 * 16
    assert forward_flops(config, 10, 0) == 2 * 10 * per_token
    assert forward_flops(config, 0, 7) == 2 * 7 * 4 * 2 * 4  # 4 x heads x head_dim a pair


def test_mask_kinds():
    def model(implementation):
        return type("M", (), {"config": type("C", (), {"_attn_implementation": implementation})()})()

    assert mask_kind(model("sdpa")) == mask_kind(model(CPU_AUTOCAST_ATTENTION)) == "bool"
    assert mask_kind(model("eager")) == "additive"
    assert mask_kind(model("flash_attention_2")) is None


def _group_batch(vocab: int, seed: int = 1):
    """12 rows of 3 left-padded prompts (6, 4 and 5 tokens), responses of 0..7 tokens, shuffled groups."""
    g = torch.Generator().manual_seed(seed)
    prompts, width, response = torch.randint(3, vocab, (3, 6), generator=g), 6, 7
    prompt_mask = (torch.arange(width)[None] >= (width - torch.tensor([6, 4, 5]))[:, None]).long()
    group = torch.tensor([0, 1, 2, 0, 1, 2, 0, 0, 1, 2, 1, 2])
    lengths = torch.randint(0, response + 1, (12,), generator=g)
    lengths[:3] = torch.tensor([response, 0, 1])
    response_mask = (torch.arange(response)[None] < lengths[:, None]).long()
    response_ids = torch.randint(3, vocab, (12, response), generator=g) * response_mask
    ids = torch.cat([prompts[group] * prompt_mask[group], response_ids], 1)
    return ids, torch.cat([prompt_mask[group], response_mask], 1), response, response_mask.bool()


def _small(cls, config_cls, implementation, **extra):
    torch.manual_seed(0)
    return cls(config_cls(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, attn_implementation=implementation,
                          tie_word_embeddings=True, **extra)).train()


def _states_and_grads(model, ids, mask, width, real):
    model.zero_grad(set_to_none=True)
    states = log_probs.response_hidden_states(model, ids, mask, width)
    weights = torch.linspace(-1, 1, states[real].numel()).view_as(states[real])
    (states[real] * weights).sum().backward()
    return states.detach(), [p.grad.clone() for p in model.parameters()]


def _close(packed, padded):
    for a, b in zip(packed, padded, strict=True):  # fp32 sums over other row orders: relative to the largest
        assert (a - b).abs().max() <= 1e-5 * b.abs().max() + 1e-7


@pytest.mark.parametrize("cls,config_cls,implementation,extra", [
    (LlamaForCausalLM, LlamaConfig, "sdpa", {}), (Qwen2ForCausalLM, Qwen2Config, "sdpa", {}),
    (LlamaForCausalLM, LlamaConfig, "eager", {}),
    # a 4-position sliding window: prompts of 4-6 tokens and responses of up to 7 run past it
    (MistralForCausalLM, MistralConfig, "sdpa", {"sliding_window": 4}),
])
def test_the_packed_forward_gives_the_padded_forwards_states_and_gradients(cls, config_cls, implementation, extra,
                                                                           monkeypatch):
    model = _small(cls, config_cls, implementation, **extra)
    ids, mask, width, real = _group_batch(64)
    calls = _count_forwards(model.model, monkeypatch)
    packed, packed_grads = _states_and_grads(model, ids, mask, width, real)
    # one forward over 3 sequences: each prompt once, every fed response token once, padded to the longest
    fed = int(real.sum()) - int(real.any(1).sum())
    assert calls == [(3, max(_sequence_lengths(ids, mask, width)))] and sum(_sequence_lengths(ids, mask, width)) == 15 + fed
    assert packed[~real].abs().max() == 0  # positions past a response: zeros, as their loss mask is 0
    monkeypatch.setattr(log_probs, "PACKED_MODEL_TYPES", frozenset())
    monkeypatch.setattr(log_probs, "SHARED_PREFIX_MODEL_TYPES", frozenset())
    calls.clear()
    padded, padded_grads = _states_and_grads(model, ids, mask, width, real)
    assert calls == [tuple(ids.shape)]  # the reference: every row padded, prompts and all
    assert (packed[real] - padded[real]).abs().max() < 1e-5
    _close(packed_grads, padded_grads)


def _sequence_lengths(ids, mask, width) -> list[int]:
    prompt = mask[:, :-width].sum(1)
    fed = (mask[:, -width:].sum(1) - 1).clamp(min=0)
    rows, inverse = log_probs.distinct_prompts(ids, mask, ids.shape[1] - width)
    return [int(prompt[rows[u]] + fed[inverse == u].sum()) for u in range(len(rows))]


def _count_forwards(module, monkeypatch) -> list[tuple[int, int]]:
    """The input shape of each forward of ``module``, in call order."""
    calls, forward = [], module.forward

    def counting(*args, input_ids=None, **kwargs):
        calls.append(tuple(input_ids.shape))
        return forward(*args, input_ids=input_ids, **kwargs)

    monkeypatch.setattr(module, "forward", counting)
    return calls


def test_log_probs_entropy_and_the_chunked_head_are_unchanged_by_packing(monkeypatch):
    model = _small(LlamaForCausalLM, LlamaConfig, "sdpa")
    ids, mask, width, real = _group_batch(64, seed=2)
    response = ids[:, -width:]

    def log_probs_of(chunk):
        out = log_probs.response_token_log_probs(model, ids, mask, response, real.long(), 0.7, with_entropy=True,
                                                 chunk_tokens=chunk)
        return torch.stack(out)

    packed = [log_probs_of(0), log_probs_of(16)]
    monkeypatch.setattr(log_probs, "PACKED_MODEL_TYPES", frozenset())
    monkeypatch.setattr(log_probs, "SHARED_PREFIX_MODEL_TYPES", frozenset())
    for a, b in zip(packed, [log_probs_of(0), log_probs_of(16)]):
        assert (a - b).abs().max() < 1e-5 and a[:, ~real].abs().max() == 0


def test_activation_checkpointing_packs_too(monkeypatch):
    """The shared-prompt forward needs a KV cache, which transformers drops when recomputing activations;
    the packed forward needs none, so a checkpointed model also computes each prompt once."""
    model = _small(LlamaForCausalLM, LlamaConfig, "sdpa")
    reference = copy.deepcopy(model)
    model.activation_checkpointing_enable()
    ids, mask, width, real = _group_batch(64)
    calls = _count_forwards(model.model, monkeypatch)
    packed, packed_grads = _states_and_grads(model, ids, mask, width, real)
    assert calls == [(3, max(_sequence_lengths(ids, mask, width)))]
    monkeypatch.setattr(log_probs, "PACKED_MODEL_TYPES", frozenset())
    padded, padded_grads = _states_and_grads(reference, ids, mask, width, real)
    assert (packed[real] - padded[real]).abs().max() < 1e-5
    _close(packed_grads, padded_grads)


def test_the_critic_packs_with_the_same_values_and_gradients(monkeypatch):
    critic = ValueModel(_small(LlamaForCausalLM, LlamaConfig, "sdpa")).train()
    torch.nn.init.normal_(critic.value_head.weight, std=0.5)  # a zero head would hide the trunk's part
    ids, mask, width, real = _group_batch(64, seed=3)
    calls = _count_forwards(critic.trunk, monkeypatch)

    def values_and_grads():
        critic.zero_grad(set_to_none=True)
        values = critic(ids, mask, response_width=width)
        (values[real] * torch.linspace(0.5, 1.5, int(real.sum()))).sum().backward()
        return values.detach(), [p.grad.clone() for p in critic.parameters()]

    packed, packed_grads = values_and_grads()
    assert calls == [(3, max(_sequence_lengths(ids, mask, width)))]
    monkeypatch.setattr(log_probs, "PACKED_MODEL_TYPES", frozenset())
    monkeypatch.setattr(log_probs, "SHARED_PREFIX_MODEL_TYPES", frozenset())
    padded, padded_grads = values_and_grads()
    assert (packed[real] - padded[real]).abs().max() < 1e-5
    _close(packed_grads, padded_grads)


def test_packing_is_chosen_by_the_flops_it_saves():
    """A group's sequence is n samples long and its attention dense. Where the samples' lengths differ the
    padded rows compute the padding; where they are long and equal, packing saves nothing and its attention
    costs more: the forward stays as it was."""
    model = _small(LlamaForCausalLM, LlamaConfig, "sdpa")
    config = model.config
    g = torch.Generator().manual_seed(0)
    for lengths, packs in (([8] + [1] * 7, True), ([400] * 8, False)):
        width = max(lengths)
        response_mask = (torch.arange(width)[None] < torch.tensor(lengths)[:, None]).long()
        ids = torch.cat([torch.randint(3, 64, (1, 4), generator=g).expand(8, 4),
                         torch.randint(3, 64, (8, width), generator=g) * response_mask], 1)
        mask = torch.cat([torch.ones(8, 4, dtype=torch.long), response_mask], 1)
        fed = sum(n - 1 for n in lengths)
        packed_flops = forward_flops(config, 4 + fed, (4 + fed) ** 2)
        shared_flops = forward_flops(config, 4 + 8 * (width - 1), 16 + 8 * (width - 1) * (width + 3))
        assert (packed_flops < shared_flops) is packs
        with torch.no_grad():
            assert (log_probs._packed_states(model, None, ids, mask, width) is not None) is packs
