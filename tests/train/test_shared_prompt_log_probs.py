"""Shared-prompt forward (each distinct prompt once, its KV cache gathered to every sample) equals the
full forward in logits and gradients; the bf16 autocast switch of the train engine."""

import copy

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rlxf.batch import left_pad
from rlxf.config import OptimConfig
from rlxf.rollout.engine import build_engine
from rlxf.rollout.sampling import SamplingParams
from rlxf.train import log_probs
from rlxf.train.engine import TrainEngine
from rlxf.train.precision import CPU_AUTOCAST_ATTENTION, autocast
from rlxf.train.value_model import ValueModel


def test_distinct_prompts_finds_each_prompt_once():
    ids = torch.tensor([[0, 5, 6, 9], [7, 5, 6, 8], [0, 5, 6, 1], [7, 5, 6, 2]])
    mask = torch.ones_like(ids)
    mask[[0, 2], 0] = 0  # rows 0 and 2 are the left-padded prompt [5, 6]
    rows, inverse = log_probs.distinct_prompts(ids, mask, prompt_width=3)
    assert sorted(rows.tolist()) == [0, 1]
    assert inverse[0] == inverse[2] and inverse[1] == inverse[3] and inverse[0] != inverse[1]
    assert torch.equal(ids[rows[inverse], :3], ids[:, :3])


def _shuffled_group_batch(model, tokenizer):
    engine = build_engine("torch", model, tokenizer.eos_token_id, tokenizer.pad_token_id)
    prompts = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in ["12+3=", "7+8=", "100+5="]]
    gen = engine.generate(prompts, SamplingParams(n=4, max_new_tokens=7), torch.Generator().manual_seed(1))
    prompt_ids, prompt_mask = left_pad([prompts[i] for i in gen.prompt_index.tolist()], tokenizer.pad_token_id, "cpu")
    order = torch.randperm(len(prompt_ids), generator=torch.Generator().manual_seed(0))
    ids = torch.cat([prompt_ids, gen.response_ids], 1)[order]
    mask = torch.cat([prompt_mask, gen.response_mask], 1)[order]
    return ids, mask, gen.response_ids.shape[1], gen.response_mask[order].bool()


def _logits_and_grads(model, ids, mask, width, real):
    model.zero_grad(set_to_none=True)
    logits = log_probs.response_logits(model, ids, mask, width)
    logits.log_softmax(-1).amax(-1)[real].sum().backward()
    return logits.detach(), [p.grad.clone() for p in model.parameters()]


def test_shared_prompt_forward_matches_the_full_forward(tiny_model, tokenizer, monkeypatch):
    monkeypatch.setattr(log_probs, "PACKED_MODEL_TYPES", frozenset())  # the packed forward: test_packed_responses.py
    model = copy.deepcopy(tiny_model).train()
    ids, mask, width, real = _shuffled_group_batch(model, tokenizer)
    assert log_probs._shared_prompt_states(model, None, ids, mask, width) is not None  # the shared path runs
    shared, shared_grads = _logits_and_grads(model, ids, mask, width, real)
    monkeypatch.setattr(log_probs, "SHARED_PREFIX_MODEL_TYPES", frozenset())
    assert log_probs._shared_prompt_states(model, None, ids, mask, width) is None
    full, full_grads = _logits_and_grads(model, ids, mask, width, real)
    assert torch.allclose(shared[real], full[real], atol=1e-5)
    for a, b in zip(shared_grads, full_grads):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)


def _values_and_grads(critic, ids, mask, width, real):
    critic.zero_grad(set_to_none=True)
    values = critic(ids, mask, response_width=width)
    (values[real] * torch.linspace(0.5, 1.5, int(real.sum()))).sum().backward()
    return values.detach(), [p.grad.clone() for p in critic.parameters() if p.grad is not None]


def test_the_critic_computes_each_shared_prompt_once_with_the_same_values_and_gradients(tiny_model, tokenizer,
                                                                                        monkeypatch):
    monkeypatch.setattr(log_probs, "PACKED_MODEL_TYPES", frozenset())  # the packed forward: test_packed_responses.py
    critic = ValueModel(copy.deepcopy(tiny_model).requires_grad_(True)).train()
    torch.nn.init.normal_(critic.value_head.weight, std=0.5)  # a zero head would hide the trunk's part
    ids, mask, width, real = _shuffled_group_batch(tiny_model, tokenizer)
    prompt_width = ids.shape[1] - width
    full_positions = critic(ids, mask)[:, prompt_width - 1: prompt_width - 1 + width]  # the old slicing
    counted = _count_trunk_tokens(critic, monkeypatch)
    shared, shared_grads = _values_and_grads(critic, ids, mask, width, real)
    # 12 rows of 3 distinct prompts: the prompts once (3 x P), then every row's responses (12 x (R - 1))
    assert counted == [3 * prompt_width, 12 * (width - 1)]
    monkeypatch.setattr(log_probs, "SHARED_PREFIX_MODEL_TYPES", frozenset())
    counted.clear()
    full, full_grads = _values_and_grads(critic, ids, mask, width, real)
    assert counted == [12 * ids.shape[1]]
    assert torch.allclose(shared[real], full[real], atol=1e-5) and torch.allclose(full, full_positions.detach())
    assert len(shared_grads) == len(full_grads) == len(list(critic.parameters()))
    for a, b in zip(shared_grads, full_grads):  # fp32 rounding of sums over 12 rows, gradients of ~100
        assert (a - b).abs().max() <= 1e-5 * b.abs().max() + 1e-6


def _count_trunk_tokens(critic, monkeypatch) -> list[int]:
    """Token positions each trunk forward runs over, in call order."""
    counted, forward = [], critic.trunk.forward

    def counting(*args, input_ids=None, **kwargs):
        counted.append(input_ids.numel())
        return forward(*args, input_ids=input_ids, **kwargs)

    monkeypatch.setattr(critic.trunk, "forward", counting)
    return counted


def test_distinct_prompts_fall_back_to_the_full_forward(tiny_model, tokenizer):
    prompts = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in ["12+3=", "7+8="]]
    ids, mask = left_pad(prompts, tokenizer.pad_token_id, "cpu")
    assert log_probs._shared_prompt_states(tiny_model, None, ids, mask, 1) is None  # two rows, two prompts


def test_autocast_switch(tiny_model):
    model = copy.deepcopy(tiny_model)
    assert not torch.is_autocast_enabled("cpu")
    with autocast(model, "none"):
        assert not torch.is_autocast_enabled("cpu")
    with autocast(model, "bfloat16"):
        assert torch.is_autocast_enabled("cpu")
    engine = TrainEngine(model, OptimConfig(lr=1e-3, autocast="bfloat16"))
    ids = torch.arange(3, 11).view(1, 8)

    def loss_of(batch):
        logits = model(input_ids=batch).logits
        assert logits.dtype == torch.bfloat16
        return logits.float().log_softmax(-1)[0, :-1].gather(-1, batch[0, 1:, None]).mean().neg(), {}

    before = [p.detach().clone() for p in model.parameters()]
    metrics = engine.optimizer_step([ids], loss_of)
    assert metrics["grad_norm"] > 0
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_generic_decoder_expands_shared_prefill(tiny_model, tokenizer):
    """The engine prefills each prompt once and expands the cache n times with any decoder."""
    from rlxf.rollout.decoders import HFDecoder
    from rlxf.train.log_probs import sequence_log_probs

    engine = build_engine("torch", tiny_model, tokenizer.eos_token_id, tokenizer.pad_token_id)
    engine.decoder = HFDecoder(tiny_model)
    prompts = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in ["12+3=", "7+8=", "100+5="]]
    gen = engine.generate(prompts, SamplingParams(n=3, temperature=0.7, max_new_tokens=7), torch.Generator().manual_seed(1))
    assert gen.prompt_index.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    prompt_ids, prompt_mask = left_pad([prompts[i] for i in gen.prompt_index.tolist()], tokenizer.pad_token_id, "cpu")
    with torch.no_grad():
        full, _ = sequence_log_probs(tiny_model, prompt_ids, prompt_mask, gen.response_ids, gen.response_mask, 0.7)
    assert torch.allclose(full, gen.log_probs, atol=1e-4)


class _AttentionDtypes(TorchDispatchMode):
    """Records the query dtype of every SDPA kernel call (the mode sees ops after autocast's casts)."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if "scaled_dot_product" in func.__name__:
            self.seen.append(args[0].dtype)
        return func(*args, **(kwargs or {}))


def test_cpu_autocast_keeps_attention_in_fp32_and_padding_masked(tiny_model, tokenizer):
    model = copy.deepcopy(tiny_model)
    prompts = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in ["12+3=", "7+8=", "100+5="]]
    ids, mask = left_pad(prompts, tokenizer.pad_token_id, "cpu")  # rows 0 and 1 have left pads
    real = mask.bool()

    def token_log_probs():
        with torch.no_grad(), _AttentionDtypes() as dtypes:
            logits = model(input_ids=ids, attention_mask=mask).logits.float()
        return logits.log_softmax(-1), dtypes.seen

    before, seen = token_log_probs()
    assert seen and set(seen) == {torch.float32}
    with autocast(model, "bfloat16"):
        mixed, seen = token_log_probs()
    # the projections ran in bf16 (the log-probs moved), attention in fp32
    assert model.config._attn_implementation == CPU_AUTOCAST_ATTENTION
    assert seen and set(seen) == {torch.float32}
    assert 0 < (mixed[real] - before[real]).abs().max() < 0.05
    # and the switch changed nothing outside autocast: the pads are still masked
    after, _ = token_log_probs()
    torch.testing.assert_close(after[real], before[real], atol=1e-6, rtol=0)
