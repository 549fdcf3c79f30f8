"""``rollout.engine_options.fp32_lm_head``: a bf16 engine's logits from its bf16 hidden state and an fp32 head."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from rlxf.algos.mismatch_metrics import mismatch_metrics
from rlxf.batch import left_pad
from rlxf.rollout.decoders import HFDecoder, LlamaDecoder, make_decoder
from rlxf.rollout.engine import build_engine
from rlxf.rollout.sampling import SamplingParams
from rlxf.train.log_probs import sequence_log_probs

transformers = pytest.importorskip("transformers")

VOCAB = 97
EOS, PAD = 2, 0
PROMPTS = [[5, 9, 11, 3, 7], [4, 8], [13, 21, 34]]
STEPS = 6


def _tiny(kind: str, seed: int = 1) -> torch.nn.Module:
    """A random fp32 Llama (tied head) or Qwen2 (untied, biased qkv) with logits large enough to matter."""
    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64)
    if kind == "llama_tied":
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**common, tie_word_embeddings=True))
    else:
        model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**common, tie_word_embeddings=False))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g) if name.endswith("norm.weight")
                    else 0.08 * torch.randn(p.shape, generator=g))
    return model.eval()


def _head_weight(model) -> torch.Tensor:
    return model.get_output_embeddings().weight.detach().clone()


def _spy_hidden(decoder) -> list[torch.Tensor]:
    """Record the final hidden state each head call receives (the decoder's own head still runs)."""
    seen: list[torch.Tensor] = []
    if isinstance(decoder, LlamaDecoder):
        head = decoder._head
        decoder._head = lambda h: (seen.append(h.clone()), head(h))[1]
    else:
        head = decoder.fp32_head
        decoder.fp32_head = lambda h: (seen.append(h.clone()), head(h))[1]
    return seen


def _teacher_forced(decoder, forced: torch.Tensor) -> list[torch.Tensor]:
    ids, mask = left_pad(PROMPTS, PAD, torch.device("cpu"))
    out = [decoder.prefill(ids, mask, STEPS)]
    out += [decoder.step(forced[:, t]) for t in range(STEPS - 1)]
    return out


@pytest.mark.parametrize("kind", ["llama_tied", "qwen2_untied"])
@pytest.mark.parametrize("prefer", ["llama", "hf"])
def test_logits_are_bf16_hidden_states_times_the_fp32_head(kind, prefer):
    model = _tiny(kind)
    w32 = _head_weight(model)
    on = make_decoder(model, prefer=prefer, dtype=torch.bfloat16, fp32_head=True)
    off = make_decoder(model, prefer=prefer, dtype=torch.bfloat16)
    assert isinstance(on, LlamaDecoder if prefer == "llama" else HFDecoder)
    seen = _spy_hidden(on)
    forced = torch.randint(3, VOCAB, (len(PROMPTS), STEPS), generator=torch.Generator().manual_seed(0))
    logits_on, logits_off = _teacher_forced(on, forced), _teacher_forced(off, forced)
    assert len(seen) == STEPS
    gaps = []
    for h, lon, loff in zip(seen, logits_on, logits_off):
        assert h.dtype == torch.bfloat16 and lon.dtype == torch.float32
        # the hand computation: the bf16 hidden state cast to fp32, times the fp32 weight of the policy
        torch.testing.assert_close(lon, F.linear(h.float(), w32), rtol=1e-6, atol=1e-6)
        # the same hidden state through the bf16 head (weight and product rounded) is the path without the option
        torch.testing.assert_close(loff, F.linear(h, w32.bfloat16()).float(), rtol=0, atol=0)
        gaps.append((lon.log_softmax(-1) - loff.log_softmax(-1)).abs().max())
    # bf16 logits of magnitude ~1-4 round by up to ~1e-2; the two paths must visibly differ
    assert max(gaps) > 2e-3


def test_engine_records_log_probs_of_the_fp32_logits():
    model = _tiny("qwen2_untied")
    w32 = _head_weight(model)
    # EOS -1: an id no token has, so every row decodes every step whatever it samples
    engine = build_engine("torch", model, -1, PAD, {"dtype": "bfloat16", "fp32_lm_head": True})
    seen = _spy_hidden(engine.decoder)
    params = SamplingParams(n=1, temperature=0.7, max_new_tokens=STEPS)
    gen = engine.generate(PROMPTS, params, torch.Generator().manual_seed(3))
    assert not gen.stopped.any() and gen.response_ids.shape == (len(PROMPTS), STEPS)  # rows stay aligned
    for t, h in enumerate(seen):
        # log-softmax in fp32 of the fp32 logits at the sampling temperature, at the sampled token
        hand = (F.linear(h.float(), w32) / 0.7).log_softmax(-1).gather(-1, gen.response_ids[:, t:t + 1]).squeeze(-1)
        torch.testing.assert_close(gen.log_probs[:, t], hand, rtol=1e-6, atol=1e-6)


def test_the_option_off_is_todays_engine_and_on_is_a_no_op_in_fp32():
    model = _tiny("llama_tied")
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=STEPS)
    runs = {}
    for name, options in {"default": {"dtype": "bfloat16"}, "off": {"dtype": "bfloat16", "fp32_lm_head": False},
                          "fp32": {}, "fp32_on": {"fp32_lm_head": True}}.items():
        engine = build_engine("torch", model, EOS, PAD, options)
        runs[name] = engine.generate(PROMPTS, params, torch.Generator().manual_seed(4)), engine.decoder
    for a, b in [("default", "off"), ("fp32", "fp32_on")]:
        assert torch.equal(runs[a][0].response_ids, runs[b][0].response_ids)
        assert torch.equal(runs[a][0].log_probs, runs[b][0].log_probs)
    # off: the tied head is the bf16 embedding itself, no fp32 copy; fp32 engine: still the embedding
    assert runs["off"][1].lm_head is runs["off"][1].embed and runs["off"][1].lm_head.dtype == torch.bfloat16
    assert runs["fp32_on"][1].lm_head is runs["fp32_on"][1].embed and not runs["fp32_on"][1]._mirrors
    hf_off = make_decoder(model, prefer="hf", dtype=torch.bfloat16)
    assert hf_off.fp32_head is None and make_decoder(model, prefer="hf", fp32_head=True).fp32_head is None


@pytest.mark.parametrize("kind", ["llama_tied", "qwen2_untied"])
@pytest.mark.parametrize("prefer", ["llama", "hf"])
def test_a_weight_update_refreshes_the_fp32_head(kind, prefer):
    model = _tiny(kind)
    engine = build_engine("torch", copy.deepcopy(model), EOS, PAD,
                          {"dtype": "bfloat16", "fp32_lm_head": True, "decoder": prefer})
    new = _tiny(kind, seed=9)
    state = new.state_dict()
    if kind == "llama_tied":  # a trainer may send a tied head under the embedding's name only
        state = {k: v for k, v in state.items() if k != "lm_head.weight"}
    engine.update_weights(state, version=1)
    dec = engine.decoder
    head = dec.lm_head if prefer == "llama" else dec.fp32_head.weight
    assert head.dtype == torch.float32
    assert torch.equal(head, _head_weight(new))  # the trainer's fp32 tensor, not its bf16 rounding
    assert not torch.equal(head, _head_weight(new).bfloat16().float())
    if prefer == "llama" and kind == "llama_tied":
        assert torch.equal(dec.embed, new.model.embed_tokens.weight.detach().bfloat16())


def test_unfit_options_are_refused():
    model = _tiny("llama_tied")
    with pytest.raises(ValueError, match="fp32_lm_head must be true or false, got 'yes'"):
        build_engine("torch", model, EOS, PAD, {"dtype": "bfloat16", "fp32_lm_head": "yes"})
    with pytest.raises(TypeError, match="not options of engine 'torch'"):
        build_engine("torch", model, EOS, PAD, {"fp32_lm_heads": True})
    gemma_like = copy.deepcopy(model)
    gemma_like.config.final_logit_softcapping = 30.0
    with pytest.raises(ValueError, match="final_logit_softcapping"):
        make_decoder(gemma_like, prefer="hf", dtype=torch.bfloat16, fp32_head=True)


def _mismatch(model, options: dict, seed: int) -> float:
    """Mean |delta log p| of a bf16 engine's samples against the fp32 trainer's log-probs of them."""
    engine = build_engine("torch", model, EOS, PAD, options)
    prompts = [[3 + (seed * 7 + i * 5 + j) % (VOCAB - 3) for j in range(4 + i % 3)] for i in range(8)]
    gen = engine.generate(prompts, SamplingParams(n=2, temperature=1.0, max_new_tokens=12),
                          torch.Generator().manual_seed(seed))
    ids, mask = left_pad(prompts, PAD, torch.device("cpu"))
    rows = gen.prompt_index
    with torch.no_grad():
        trainer, _ = sequence_log_probs(model, ids[rows], mask[rows], gen.response_ids, gen.response_mask)
    return mismatch_metrics(trainer, gen.log_probs, gen.response_mask)["rollout_log_prob_diff"]


# head scale: logits of a few units, where bf16 rounds them by ~1e-2 (at scale 1 the hidden state's own bf16
# rounding dominates and the fp32 head takes 2-5% off the gap; benchmarks/fp32_head_mismatch.py)
@pytest.mark.parametrize(("kind", "head_scale"), [("llama_tied", 3.0), ("qwen2_untied", 6.0)])
def test_the_fp32_head_shrinks_the_mismatch_against_an_fp32_trainer(kind, head_scale):
    model = _tiny(kind)
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(head_scale)
    fp32 = sum(_mismatch(model, {}, s) for s in range(3)) / 3
    bf16 = sum(_mismatch(model, {"dtype": "bfloat16"}, s) for s in range(3)) / 3
    head = sum(_mismatch(model, {"dtype": "bfloat16", "fp32_lm_head": True}, s) for s in range(3)) / 3
    print(f"{kind}: mean |delta log p| fp32 {fp32:.2e}, bf16 {bf16:.2e}, bf16 + fp32 head {head:.2e}")
    assert fp32 < 1e-5  # the fp32 engine is the trainer up to float rounding
    # measured here: 3.05e-3 -> 2.31e-3 (llama, 0.76x), 1.99e-2 -> 1.79e-2 (qwen2, 0.90x)
    assert head < 0.95 * bf16
