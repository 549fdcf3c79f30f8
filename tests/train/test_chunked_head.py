"""The chunked LM head (train/chunked_head.py) gives the plain path's log-probs, entropy and gradients:
by hand on a 2-token vocabulary, against autograd at fp64, through whole models (the tiny model, a
random tied-embedding Llama, LoRA) and through a full actor update."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from rlxf.checked_config import load_config
from rlxf.config_error import ConfigError
from rlxf.train import log_probs as lp
from rlxf.train.chunked_head import chunked_head_log_probs, lm_head_parameters


def test_a_two_token_vocabulary_by_hand():
    # logits [ln 3, 0]: p = [3/4, 1/4]
    hidden = torch.tensor([[math.log(3.0)]], dtype=torch.float64, requires_grad=True)
    weight = torch.tensor([[1.0], [0.0]], dtype=torch.float64, requires_grad=True)
    log_p, entropy = chunked_head_log_probs(hidden, weight, None, torch.tensor([0]), 1, with_entropy=True)
    assert log_p.item() == pytest.approx(math.log(0.75), abs=1e-12)
    assert entropy.item() == pytest.approx(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)), abs=1e-12)
    log_p.sum().backward()
    # d log p_0 / dz = onehot - p = [1/4, -1/4]; dz/dh = W = [1, 0]; dz/dW = h
    assert hidden.grad.item() == pytest.approx(0.25, abs=1e-12)
    assert weight.grad[:, 0].tolist() == pytest.approx([0.25 * math.log(3.0), -0.25 * math.log(3.0)], abs=1e-12)


def _plain(hidden, weight, bias, targets, temperature):
    logits = torch.nn.functional.linear(hidden, weight, bias) / temperature
    log_p = logits.log_softmax(-1)
    return log_p.gather(1, targets[:, None]).squeeze(1), -(log_p.exp() * log_p).sum(-1)


def _grads(fn, inputs):
    for x in inputs:
        x.grad = None
    log_p, entropy = fn()
    g = torch.Generator().manual_seed(3)
    # a loss that weights every token's log-prob and entropy differently
    (log_p * torch.randn(log_p.shape, generator=g, dtype=log_p.dtype)
     + entropy * torch.randn(entropy.shape, generator=g, dtype=entropy.dtype)).sum().backward()
    return log_p.detach(), entropy.detach(), [x.grad.clone() for x in inputs]


@pytest.mark.parametrize("chunk", [1, 3, 7, 64])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_values_and_gradients_equal_autograd_at_fp64(chunk, temperature):
    g = torch.Generator().manual_seed(0)
    hidden, weight, bias = (torch.randn(shape, generator=g, dtype=torch.float64, requires_grad=True)
                            for shape in ((11, 6), (40, 6), (40,)))
    targets = torch.randint(0, 40, (11,), generator=g)
    inputs = [hidden, weight, bias]
    want = _grads(lambda: _plain(hidden, weight, bias, targets, temperature), inputs)
    got = _grads(lambda: chunked_head_log_probs(hidden, weight, bias, targets, chunk, temperature, True), inputs)
    for a, b in zip(got[:2], want[:2]):
        assert torch.allclose(a, b, rtol=0, atol=1e-12)
    for a, b in zip(got[2], want[2]):
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)
    assert want[2][1].abs().max() > 0.1  # the gradients compared are not all ~0


def test_log_probs_alone_need_no_entropy_and_their_gradient_matches():
    g = torch.Generator().manual_seed(1)
    hidden, weight = (torch.randn(s, generator=g, dtype=torch.float64, requires_grad=True) for s in ((9, 4), (30, 4)))
    targets = torch.randint(0, 30, (9,), generator=g)
    log_p, entropy = chunked_head_log_probs(hidden, weight, None, targets, 4)
    assert entropy is None
    log_p.sum().backward()
    want = [x.grad.clone() for x in (hidden, weight)]
    hidden.grad = weight.grad = None
    _plain(hidden, weight, None, targets, 1.0)[0].sum().backward()
    assert all(torch.allclose(a, b.grad, atol=1e-12) for a, b in zip(want, (hidden, weight)))


def _group_batch(vocab: int, seed: int = 0):
    """Two prompts x 3 samples (the shared-prompt path applies), left-padded prompts, right-padded responses."""
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(3, vocab, (2, 6), generator=g).repeat_interleave(3, 0)
    prompt_mask = torch.ones_like(prompts)
    prompt_mask[:3, :2] = 0  # the first prompt is 4 tokens, left-padded
    prompts = prompts * prompt_mask
    responses = torch.randint(3, vocab, (6, 5), generator=g)
    response_mask = (torch.arange(5)[None, :] < torch.tensor([5, 3, 1, 4, 5, 2])[:, None]).long()
    responses = responses * response_mask
    return torch.cat([prompts, responses], 1), torch.cat([prompt_mask, response_mask], 1), responses, response_mask


def _model_run(model, batch, chunk, temperature, with_entropy=True):
    ids, mask, responses, response_mask = batch
    model.zero_grad(set_to_none=True)
    log_p, entropy = lp.response_token_log_probs(model, ids, mask, responses, response_mask, temperature,
                                                 with_entropy=with_entropy, chunk_tokens=chunk)
    g = torch.Generator().manual_seed(5)
    loss = (log_p * torch.randn(log_p.shape, generator=g)).sum()
    if with_entropy:
        loss = loss + (entropy * torch.randn(entropy.shape, generator=g)).sum()
    loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return log_p.detach(), None if entropy is None else entropy.detach(), grads


def _assert_same(got, want, atol, rtol):
    (a_lp, a_ent, a_grads), (b_lp, b_ent, b_grads) = got, want
    assert torch.allclose(a_lp, b_lp, atol=atol, rtol=0)
    assert (b_lp != 0).sum() == 20  # every real response token, none of the pads
    if b_ent is not None:
        assert torch.allclose(a_ent, b_ent, atol=atol, rtol=0)
    assert a_grads.keys() == b_grads.keys() and len(a_grads) > 0
    for name in b_grads:
        assert torch.allclose(a_grads[name], b_grads[name], atol=atol, rtol=rtol), name


@pytest.mark.parametrize("shared", [True, False])
def test_the_tiny_model_gives_the_plain_path_numbers(tiny_model, shared, monkeypatch):
    model = copy.deepcopy(tiny_model).train().requires_grad_(True)
    if not shared:
        monkeypatch.setattr(lp, "SHARED_PREFIX_MODEL_TYPES", frozenset())
    batch = _group_batch(model.config.vocab_size)
    assert (lp._shared_prompt_states(model, None, *batch[:2], 5) is not None) == shared
    want = _model_run(model, batch, 0, 0.7)
    got = _model_run(model, batch, 3, 0.7)
    _assert_same(got, want, atol=1e-5, rtol=1e-4)
    assert "model.embed_tokens.weight" in got[2]  # tied: the head's gradient lands on the embedding


def _random_llama(tied: bool) -> LlamaForCausalLM:
    config = LlamaConfig(vocab_size=1000, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tied, pad_token_id=0)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).double()


def _fp64_plain(model, batch, temperature):
    """The plain path's numbers at fp64 (``response_logits`` rounds logits to fp32 by design)."""
    ids, mask, responses, response_mask = batch
    model.zero_grad(set_to_none=True)
    out = model(input_ids=ids, attention_mask=mask, position_ids=lp.position_ids_from_mask(mask))
    log_p_all = (out.logits[:, ids.shape[1] - responses.shape[1] - 1:-1] / temperature).log_softmax(-1)
    m = response_mask.double()
    log_p = log_p_all.gather(-1, responses[..., None]).squeeze(-1) * m
    entropy = -(log_p_all.exp() * log_p_all).sum(-1) * m
    g = torch.Generator().manual_seed(5)
    loss = (log_p * torch.randn(log_p.shape, generator=g)).sum() + (entropy * torch.randn(entropy.shape, generator=g)).sum()
    loss.backward()
    return log_p.detach(), entropy.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("tied", [True, False])
def test_a_random_llama_at_fp64_matches_to_rounding(tied, monkeypatch):
    # the full forward on both sides (the shared-prompt path differs from it by ~1e-7 even at fp64:
    # transformers computes rotary angles in fp32), and so does the packed one; the tiny-model test covers the
    # shared path, test_packed_responses.py the packed one
    monkeypatch.setattr(lp, "SHARED_PREFIX_MODEL_TYPES", frozenset())
    monkeypatch.setattr(lp, "PACKED_MODEL_TYPES", frozenset())
    model = _random_llama(tied)
    if not tied:  # a head with a bias too
        head = torch.nn.Linear(32, 1000, bias=True, dtype=torch.float64)
        model.lm_head = head
    batch = _group_batch(1000, seed=2)
    want = _fp64_plain(model, batch, 0.7)
    got = _model_run(model, batch, 4, 0.7)
    _assert_same(got, want, atol=1e-10, rtol=1e-8)
    assert tied == ("lm_head.weight" not in got[2])
    assert got[0].dtype == torch.float64


def test_lora_adapters_get_the_plain_path_gradients(tiny_model):
    pytest.importorskip("peft")
    from rlxf.models.lora import LoraConfig, adapter_off, apply_lora

    model = apply_lora(copy.deepcopy(tiny_model), LoraConfig(r=4))
    with torch.no_grad():  # B starts at 0, which makes A's gradient 0: give it weights
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05, generator=torch.Generator().manual_seed(0))
    batch = _group_batch(model.config.vocab_size)
    want, got = _model_run(model, batch, 0, 1.0), _model_run(model, batch, 2, 1.0)
    _assert_same(got, want, atol=1e-5, rtol=1e-4)
    assert all("lora_" in name for name in got[2])
    with torch.no_grad(), adapter_off(model):  # the reference's pass: the base model's log-probs
        base = lp.sequence_log_probs(tiny_model, batch[0][:, :6], batch[1][:, :6], batch[2], batch[3])[0]
        off = lp.sequence_log_probs(model, batch[0][:, :6], batch[1][:, :6], batch[2], batch[3], chunk_tokens=3)[0]
    assert torch.allclose(off, base, atol=1e-5) and (off - got[0]).abs().max() > 1e-4


def test_autocast_bf16_stays_close_to_the_plain_path(tiny_model):
    model = copy.deepcopy(tiny_model).train().requires_grad_(True)
    batch = _group_batch(model.config.vocab_size)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want, got = _model_run(model, batch, 0, 1.0), _model_run(model, batch, 3, 1.0)
    assert torch.allclose(got[0], want[0], atol=2e-2)
    for name in want[2]:
        assert torch.allclose(got[2][name], want[2][name], atol=2e-2, rtol=5e-2), name


def test_a_head_that_is_not_a_linear_layer_is_refused():
    model = _random_llama(tied=False)
    model.lm_head = torch.nn.Sequential(torch.nn.Linear(32, 1000))
    with pytest.raises(ConfigError, match="logits_chunk_tokens.*Sequential"):
        lm_head_parameters(model)
    model = _random_llama(tied=True)
    model.config.final_logit_softcapping = 30.0
    with pytest.raises(ConfigError, match="final_logit_softcapping"):
        lm_head_parameters(model)


def test_the_option_needs_the_single_backend():
    assert load_config(overrides=["train.logits_chunk_tokens=256"]).train.logits_chunk_tokens == 256
    with pytest.raises(ConfigError, match="logits_chunk_tokens.*single"):
        load_config(overrides=["train.logits_chunk_tokens=256", "train.backend=fsdp2"])


def test_an_actor_update_with_chunking_equals_the_plain_update(tiny_model, tokenizer):
    """Two PPO epochs over two mini-batches (so the old-policy pass runs too), an entropy bonus, a KL
    term against the reference and temperature 0.7: same losses, metrics and weights after the steps."""
    from rlxf.algos import AlgorithmConfig
    from rlxf.config import OptimConfig
    from rlxf.roles.actor import ActorRole
    from rlxf.roles.reference import ReferenceRole
    from tests.core.test_policy_update import rewarded_groups

    batch, _ = rewarded_groups(copy.deepcopy(tiny_model), tokenizer, ["1+2=", "4+4="], 6)
    algo = AlgorithmConfig(name="grpo", entropy_coef=0.05, kl_coef=0.1, ppo_epochs=2)
    runs = {}
    for chunk in (0, 5):
        trial = copy.deepcopy(batch)
        trial.ref_log_probs = ReferenceRole(copy.deepcopy(tiny_model), 4, 0.7, chunk).compute_log_probs(trial)
        model = copy.deepcopy(tiny_model).requires_grad_(True)
        actor = ActorRole(model, OptimConfig(lr=1e-2), algo, mini_batch_size=4, micro_batch_size=2, temperature=0.7,
                          logits_chunk_tokens=chunk)
        trial.old_log_probs = actor.compute_log_probs(trial)
        steps = actor.update(trial, torch.Generator().manual_seed(0))
        runs[chunk] = trial, steps, dict(model.named_parameters())
    (plain, plain_steps, plain_params), (chunked, chunked_steps, chunked_params) = runs[0], runs[5]
    assert torch.allclose(chunked.ref_log_probs, plain.ref_log_probs, atol=1e-5)
    assert torch.allclose(chunked.old_log_probs, plain.old_log_probs, atol=1e-5)
    assert len(plain_steps) == len(chunked_steps) == 4
    for a, b in zip(chunked_steps, plain_steps):
        for key in ("loss", "grad_norm", "entropy"):
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), key
    moved = max(float((plain_params[n] - p).detach().abs().max()) for n, p in tiny_model.named_parameters())
    assert moved > 1e-2  # the steps changed the weights (4 steps of lr 1e-2)
    # AdamW's first steps are ~lr x sign(grad) whatever the gradient's size, so float noise on tiny
    # gradient entries shows up at ~1e-5 here; a real difference would be ~lr (1e-2) per entry
    for name, param in chunked_params.items():
        assert torch.allclose(param, plain_params[name], atol=1e-4, rtol=0), name


def test_an_rl_step_through_the_loop_logs_the_same_numbers(tmp_path, sft_model_dir):
    """``train.logits_chunk_tokens`` set in a recipe reaches the actor and the reference: one GRPO step
    with a KL term logs the plain run's loss, KL, entropy and gradient norm."""
    from rlxf.loops.rl import train_rl
    from tests.conftest import small_overrides
    from tests.core.test_loop import read_metrics

    rows = {}
    for chunk in (0, 7):
        run_dir = tmp_path / f"chunk{chunk}"
        config = load_config(None, [*small_overrides(run_dir, sft_model_dir, steps=1), "algorithm.kl_coef=0.05",
                                    "algorithm.entropy_coef=0.01", f"train.logits_chunk_tokens={chunk}"])
        train_rl(config, write=lambda _: None)
        rows[chunk] = read_metrics(run_dir)[-1]
    keys = [k for k in rows[0] if k.startswith("policy/") and isinstance(rows[0][k], float)]
    assert {"policy/loss", "policy/kl", "policy/entropy", "policy/grad_norm"} <= set(keys)
    assert rows[0]["policy/grad_norm"] > 1e-3
    for key in keys:
        assert rows[7][key] == pytest.approx(rows[0][key], rel=1e-4, abs=1e-6), key


def test_no_tokens_give_a_zero_head_gradient():
    # the sum over chunks starts from the first chunk; with no chunk at all it is an explicit zero
    weight = torch.randn(7, 4, requires_grad=True)
    bias = torch.randn(7, requires_grad=True)
    hidden = torch.randn(0, 4, requires_grad=True)
    log_p, _ = chunked_head_log_probs(hidden, weight, bias, torch.zeros(0, dtype=torch.long), chunk=2)
    log_p.sum().backward()
    assert torch.equal(weight.grad, torch.zeros(7, 4)) and torch.equal(bias.grad, torch.zeros(7))
    assert hidden.grad.shape == (0, 4)
