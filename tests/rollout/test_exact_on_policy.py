"""rollout.engine_options.batch_invariant: the log-probs the engine samples from are the trainer's exact
pass's bit for bit (tiny model, a SmolLM2-shaped random Llama), and without it they are not."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from rlxf.batch import left_pad
from rlxf.models.batch_invariant.llama import InvariantLlama
from rlxf.rollout.engine import build_engine
from rlxf.rollout.sampling import SamplingParams
from rlxf.train.exact_log_probs import exact_sequence_log_probs

EOS, PAD = 1, 0
PROMPTS = [[5, 6, 7], [8, 9, 10, 11, 12, 13, 14], [20] * 37, [3, 4], [9] * 12]


@pytest.fixture(scope="module")
def smollm2_shaped() -> LlamaForCausalLM:
    # SmolLM2-135M's shape in miniature: GQA 9/3 heads of 64, tied embeddings, rms norm, rope 100k
    config = LlamaConfig(vocab_size=4096, hidden_size=576, intermediate_size=1536, num_hidden_layers=2,
                         num_attention_heads=9, num_key_value_heads=3, tie_word_embeddings=True,
                         rope_theta=100000.0, max_position_embeddings=512, rms_norm_eps=1e-5)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def qwen2_shaped():
    # Qwen2's q/k/v biases and untied head
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=300, hidden_size=128, intermediate_size=320, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
                         max_position_embeddings=512)
    torch.manual_seed(1)
    model = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.5)  # nonzero biases (they start at 0)
    return model


def _trainer_log_probs(model, prompts, generation, rows=slice(None)):
    """The trainer's exact pass on the sampled tokens, prompts left-padded to this sub-batch's width."""
    chosen = [prompts[i] for i in generation.prompt_index[rows].tolist()]
    ids, mask = left_pad(chosen, PAD, torch.device("cpu"))
    net = InvariantLlama.of(model.config, model.state_dict())
    return exact_sequence_log_probs(net, ids, mask, generation.response_ids[rows], generation.response_mask[rows])


def _generate(model, prompts, n, options, seed=0, temperature=1.0):
    engine = build_engine("torch", model, EOS, PAD, options)
    params = SamplingParams(n=n, max_new_tokens=24, temperature=temperature)
    return engine, engine.generate(prompts, params, torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("model_name", ["tiny", "smollm2_shaped", "qwen2_shaped"])
@pytest.mark.parametrize("n_prompts,n", [(1, 1), (2, 3), (5, 4)])
def test_engine_and_trainer_log_probs_are_equal(request, tiny_model, model_name, n_prompts, n):
    model = tiny_model if model_name == "tiny" else request.getfixturevalue(model_name)
    prompts = PROMPTS[:n_prompts]
    _, generation = _generate(model, prompts, n, {"batch_invariant": True})
    assert generation.response_mask.sum() > n_prompts * n  # more than one token each: decode steps ran
    assert torch.equal(_trainer_log_probs(model, prompts, generation), generation.log_probs)
    # a micro-batch of other rows and another left padding: still the same floats
    last = slice(len(generation.prompt_index) - 2, None)
    assert torch.equal(_trainer_log_probs(model, prompts, generation, last), generation.log_probs[last])


@pytest.mark.parametrize("model_name", ["tiny", "smollm2_shaped"])
def test_without_the_option_the_default_decoder_differs(request, tiny_model, model_name):
    # the same test on the default fast decoder: float-rounding apart, so the check above can fail
    model = tiny_model if model_name == "tiny" else request.getfixturevalue("smollm2_shaped")
    _, generation = _generate(model, PROMPTS, 4, {})
    diff = (_trainer_log_probs(model, PROMPTS, generation) - generation.log_probs).abs().max()
    assert 0.0 < float(diff) < 1e-3


def test_greedy_and_a_temperature_are_exact_too(tiny_model):
    for temperature in (0.0, 0.7):
        _, generation = _generate(tiny_model, PROMPTS, 2, {"batch_invariant": True}, temperature=temperature)
        chosen = [PROMPTS[i] for i in generation.prompt_index.tolist()]
        ids, mask = left_pad(chosen, PAD, torch.device("cpu"))
        net = InvariantLlama.of(tiny_model.config, tiny_model.state_dict())
        trainer = exact_sequence_log_probs(net, ids, mask, generation.response_ids, generation.response_mask,
                                           temperature or 1.0)
        assert torch.equal(trainer, generation.log_probs)


def test_a_weight_update_keeps_the_engine_exact(tiny_model):
    import copy

    model = copy.deepcopy(tiny_model)
    engine, _ = _generate(model, PROMPTS, 2, {"batch_invariant": True})
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    engine.update_weights(model.state_dict(), version=1)
    generation = engine.generate(PROMPTS, SamplingParams(n=2, max_new_tokens=24), torch.Generator().manual_seed(3))
    assert torch.equal(_trainer_log_probs(model, PROMPTS, generation), generation.log_probs)


def test_the_option_is_refused_where_it_cannot_hold(tiny_model):
    with pytest.raises(ValueError, match="batch_invariant must be true or false, got 'yes'"):
        build_engine("torch", tiny_model, EOS, PAD, {"batch_invariant": "yes"})
    with pytest.raises(ValueError, match="batch_invariant runs its own fp32 decoder"):
        build_engine("torch", tiny_model, EOS, PAD, {"batch_invariant": True, "dtype": "bfloat16"})
    with pytest.raises(ValueError, match="runs in float32; model.embed_tokens.weight is torch.bfloat16"):
        InvariantLlama.of(tiny_model.config, {k: v.bfloat16() for k, v in tiny_model.state_dict().items()})
