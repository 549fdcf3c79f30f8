"""The rollout engine: log-probs equal a full forward pass, masks stop at EOS, sampling filters."""

import pytest
import torch

from rlxf.rollout.engine import build_engine
from rlxf.rollout.sampling import SamplingParams, filter_top_k_top_p, inverse_cdf_sample, sample_tokens
from rlxf.train.log_probs import sequence_log_probs


def test_top_k_keeps_k_best():
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.0]])
    out = filter_top_k_top_p(logits, top_k=2, top_p=1.0)
    assert torch.isinf(out[0, [0, 3]]).all() and out[0, 1] == 3.0 and out[0, 2] == 2.0


def test_top_p_keeps_the_nucleus():
    # probabilities 0.5, 0.3, 0.2 (log of them as logits): top_p 0.6 keeps the first two tokens.
    logits = torch.tensor([[0.5, 0.3, 0.2]]).log()
    out = filter_top_k_top_p(logits, top_k=0, top_p=0.6)
    assert torch.isfinite(out[0, :2]).all() and torch.isinf(out[0, 2])
    out = filter_top_k_top_p(logits, top_k=0, top_p=0.5)
    assert torch.isfinite(out[0, 0]) and torch.isinf(out[0, 1:]).all()


def test_sampled_frequencies_follow_the_distribution():
    probs = torch.tensor([0.7, 0.2, 0.1])
    logits = probs.log().expand(20000, 3)
    tokens, log_probs = sample_tokens(logits, SamplingParams(temperature=1.0), torch.Generator().manual_seed(0))
    freq = torch.bincount(tokens, minlength=3).float() / len(tokens)
    assert torch.allclose(freq, probs, atol=0.015)
    assert torch.allclose(log_probs, probs.log()[tokens])


def test_inverse_cdf_draws_each_token_by_its_probability_and_never_a_cut_one():
    # 200,000 draws over a 5-token distribution with two cut tokens (top-k / top-p leave probability 0)
    probs = torch.tensor([0.0, 0.5, 0.0, 0.3, 0.2])
    tokens = inverse_cdf_sample(probs.expand(200_000, 5), torch.Generator().manual_seed(0))
    freq = torch.bincount(tokens, minlength=5).double() / len(tokens)
    assert freq[0] == 0 and freq[2] == 0
    assert torch.allclose(freq, probs.double(), atol=0.004)  # ~3.5 standard errors at p = 0.5


def test_inverse_cdf_maps_the_draw_to_the_interval_it_falls_in(monkeypatch):
    probs = torch.tensor([[0.25, 0.0, 0.25, 0.5, 0.0]])  # intervals [0, .25) [.25, .25) [.25, .5) [.5, 1) [1, 1)
    for draw, want in ((0.0, 0), (0.2499, 0), (0.25, 2), (0.4999, 2), (0.5, 3), (0.9999, 3), (1.0, 3)):
        monkeypatch.setattr(torch, "rand", lambda *a, draw=draw, **k: torch.full((1, 1), draw, dtype=torch.float64))
        assert inverse_cdf_sample(probs).tolist() == [want], draw  # a draw of 1.0 (rounding) stays on token 3


def test_inverse_cdf_keeps_the_tail_of_a_large_vocabulary(monkeypatch):
    # 49,152 entries as SmolLM2's, the last holding 1e-5 of the mass: a draw inside its interval must reach it
    # and 40 batches of draws reach a 0.1 tail about as often as they should
    probs = torch.full((1, 49_152), (1 - 1e-5) / 49_151)
    probs[0, -1] = 1e-5
    monkeypatch.setattr(torch, "rand", lambda *a, **k: torch.full((1, 1), 1 - 0.5e-5, dtype=torch.float64))
    assert inverse_cdf_sample(probs).tolist() == [49_151]
    monkeypatch.undo()
    probs[0, -1], probs[0, :-1] = 0.1, 0.9 / 49_151
    g = torch.Generator().manual_seed(0)
    hits = sum(int((inverse_cdf_sample(probs.expand(25, -1), g) == 49_151).sum()) for _ in range(40))
    assert 70 <= hits <= 130  # binomial(1,000, 0.1): mean 100, sd 9.5


def test_temperature_scales_the_recorded_log_prob():
    logits = torch.tensor([[2.0, 0.0]])
    _, lp = sample_tokens(logits, SamplingParams(temperature=2.0), torch.Generator().manual_seed(0))
    expected = torch.tensor([1.0, 0.0]).log_softmax(-1)
    assert lp.item() in (pytest.approx(expected[0].item()), pytest.approx(expected[1].item()))


@pytest.mark.parametrize("engine_name", ["torch", "hf"])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_rollout_log_probs_match_a_full_forward_pass(tiny_model, tokenizer, engine_name, temperature):
    engine = build_engine(engine_name, tiny_model, tokenizer.eos_token_id, tokenizer.pad_token_id)
    prompts = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in ["12+3=", "7+8=", "100+5="]]
    params = SamplingParams(n=3, temperature=temperature, max_new_tokens=7)
    gen = engine.generate(prompts, params, torch.Generator().manual_seed(1))
    assert gen.response_ids.shape[0] == 9
    assert gen.prompt_index.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    from rlxf.batch import left_pad

    prompt_ids, prompt_mask = left_pad([prompts[i] for i in gen.prompt_index.tolist()], tokenizer.pad_token_id, "cpu")
    full, _ = sequence_log_probs(
        tiny_model, prompt_ids, prompt_mask, gen.response_ids, gen.response_mask, temperature=temperature
    )
    assert torch.allclose(full, gen.log_probs, atol=1e-4), (full - gen.log_probs).abs().max()


def test_response_mask_ends_at_eos(tiny_model, tokenizer):
    engine = build_engine("torch", tiny_model, tokenizer.eos_token_id, tokenizer.pad_token_id)
    prompts = [tokenizer("1+1=", add_special_tokens=False)["input_ids"]]
    gen = engine.generate(prompts, SamplingParams(n=16, temperature=1.5, max_new_tokens=12), torch.Generator().manual_seed(3))
    eos = tokenizer.eos_token_id
    for ids, mask, stopped in zip(gen.response_ids, gen.response_mask, gen.stopped):
        length = int(mask.sum())
        assert mask[:length].all() and not mask[length:].any()
        assert (ids[length:] == tokenizer.pad_token_id).all()
        if stopped:
            assert ids[length - 1] == eos and (ids[: length - 1] != eos).all()
        else:
            assert length == 12 and (ids != eos).all()


def test_greedy_is_deterministic_and_matches_hf_generate(tiny_model, tokenizer):
    prompts = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in ["12+3=", "5+5="]]
    params = SamplingParams(n=1, temperature=0.0, max_new_tokens=6)
    ours = build_engine("torch", tiny_model, tokenizer.eos_token_id, tokenizer.pad_token_id).generate(prompts, params)
    ref = build_engine("hf", tiny_model, tokenizer.eos_token_id, tokenizer.pad_token_id).generate(prompts, params)
    assert torch.equal(ours.response_ids, ref.response_ids)
    assert torch.equal(ours.response_mask, ref.response_mask)
