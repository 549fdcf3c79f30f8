"""Generation on real checkpoints: eval mode, EOS lists, the generation-config policy, decoder parity
(sliding window included) against plain transformers."""

from __future__ import annotations

import pytest
import torch
import transformers

from rlxf.batch import left_pad
from rlxf.config import Config
from rlxf.loops.setup import make_rollout_role
from rlxf.models.loading import load_causal_lm, load_tokenizer
from rlxf.models.special_tokens import stop_token_ids
from rlxf.rollout.engine import build_engine
from rlxf.rollout.sampling import SamplingParams
from rlxf.train.log_probs import sequence_log_probs

PROMPTS = ["What is 12 + 7?", "Hello", "def add(a, b):", "The quick brown fox jumps"]
GREEDY = SamplingParams(n=1, temperature=0.0, max_new_tokens=12)
NO_STOP = -1  # an id no model emits: the reference runs the whole budget


def _encode(tokenizer) -> list[list[int]]:
    return [tokenizer(p)["input_ids"] for p in PROMPTS]


def _hf_greedy(model, prompts, pad_id, new_tokens: int) -> torch.Tensor:
    """Plain transformers on the same left-padded batch: greedy, eval mode, no stop token."""
    ids, mask = left_pad(prompts, pad_id, torch.device("cpu"))
    with torch.no_grad():
        out = model.eval().generate(
            input_ids=ids, attention_mask=mask, generation_config=transformers.GenerationConfig(
                max_new_tokens=new_tokens, do_sample=False, eos_token_id=None, pad_token_id=pad_id))
    return out[:, ids.shape[1]:]


def _trainer_log_probs(model, prompts, pad_id, response: torch.Tensor) -> torch.Tensor:
    ids, mask = left_pad(prompts, pad_id, torch.device("cpu"))
    with torch.no_grad():
        log_probs, _ = sequence_log_probs(model.eval(), ids, mask, response, torch.ones_like(response))
    return log_probs


@pytest.mark.parametrize("arch", ["qwen2", "mistral", "gpt2"])
@pytest.mark.parametrize("engine", ["torch", "hf"])
def test_greedy_tokens_and_log_probs_match_transformers(checkpoints, arch, engine):
    """Left-padded batch, 12 new tokens: Mistral's window is 8, so every row runs past it."""
    tokenizer, model = load_tokenizer(checkpoints[arch]), load_causal_lm(checkpoints[arch])
    prompts = _encode(tokenizer)
    assert max(len(p) for p in prompts) + GREEDY.max_new_tokens > 8
    gen = build_engine(engine, model, NO_STOP, tokenizer.pad_token_id).generate(prompts, GREEDY)
    expected = _hf_greedy(model, prompts, tokenizer.pad_token_id, GREEDY.max_new_tokens)
    assert torch.equal(gen.response_ids, expected)
    reference = _trainer_log_probs(model, prompts, tokenizer.pad_token_id, expected)
    assert (gen.log_probs - reference).abs().max() <= 1e-5


def test_sliding_window_picks_the_decoder_that_applies_it(checkpoints):
    from rlxf.rollout.decoders import HFDecoder, LlamaDecoder

    mistral, qwen = load_causal_lm(checkpoints["mistral"]), load_causal_lm(checkpoints["qwen2"])
    assert isinstance(build_engine("torch", mistral, 0, 0).decoder, HFDecoder)
    assert isinstance(build_engine("torch", qwen, 0, 0).decoder, LlamaDecoder)
    assert isinstance(build_engine("torch", qwen, 0, 0, {"decoder": "hf"}).decoder, HFDecoder)


@pytest.mark.parametrize("engine", ["torch", "hf"])
def test_generation_runs_in_eval_mode_while_the_trainer_trains(checkpoints, engine):
    """GPT-2 with dropout 0.3 left in train mode by the trainer: the engine still samples the eval-mode
    model (tokens of plain eval-mode transformers, log-probs of the eval-mode forward)."""
    tokenizer, model = load_tokenizer(checkpoints["gpt2"]), load_causal_lm(checkpoints["gpt2"])
    prompts = _encode(tokenizer)
    expected = _hf_greedy(model, prompts, tokenizer.pad_token_id, GREEDY.max_new_tokens)
    reference = _trainer_log_probs(model, prompts, tokenizer.pad_token_id, expected)
    model.train()
    torch.manual_seed(0)
    gen = build_engine(engine, model, NO_STOP, tokenizer.pad_token_id).generate(prompts, GREEDY)
    assert model.training  # the trainer's mode is given back
    assert torch.equal(gen.response_ids, expected)
    assert (gen.log_probs - reference).abs().max() <= 1e-5


def test_stop_tokens_are_generation_configs_list(checkpoints):
    """Qwen2.5 style: tokenizer EOS <|endoftext|>, generation_config [<|im_end|>, <|endoftext|>]."""
    tokenizer, model = load_tokenizer(checkpoints["qwen2"]), load_causal_lm(checkpoints["qwen2"])
    im_end, text_end = tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    assert tokenizer.eos_token_id == text_end
    assert stop_token_ids(tokenizer, model) == [im_end, text_end]


@pytest.mark.parametrize("engine", ["torch", "hf"])
def test_generation_stops_at_any_listed_eos(checkpoints, engine):
    """A token the unstopped run emits at position 3 of row 0 is put in generation_config's list:
    the run built from the config stops right there (stopped, 4 tokens), other rows go on."""
    tokenizer, model = load_tokenizer(checkpoints["qwen2"]), load_causal_lm(checkpoints["qwen2"])
    prompts = _encode(tokenizer)
    free = _hf_greedy(model, prompts, tokenizer.pad_token_id, GREEDY.max_new_tokens)
    stop = int(free[0, 3])
    first = (free[0] == stop).nonzero()[0].item()
    assert stop != tokenizer.eos_token_id
    model.generation_config.eos_token_id = [tokenizer.convert_tokens_to_ids("<|im_end|>"), stop]
    config = Config.model_validate({"rollout": {"engine": engine}})
    role = make_rollout_role(config, model, tokenizer)
    gen = role.engine.generate(prompts, GREEDY)
    assert bool(gen.stopped[0]) and int(gen.response_mask[0].sum()) == first + 1
    assert int(gen.response_ids[0, first]) == stop
    for row in range(1, len(prompts)):
        hits = (free[row] == stop).nonzero()
        assert bool(gen.stopped[row]) == bool(len(hits))


def test_checkpoint_generation_config_processors_are_not_applied(checkpoints, tmp_path):
    """A checkpoint shipping repetition_penalty=20 (Qwen2.5-Instruct ships 1.05): both engines sample
    the rollout.* distribution only, so hf == torch tokens and hf log-probs == the trainer's."""
    tokenizer = load_tokenizer(checkpoints["qwen2"])
    model = load_causal_lm(checkpoints["qwen2"])
    model.generation_config.repetition_penalty = 20.0
    model.generation_config.temperature = 0.3
    prompts = _encode(tokenizer)
    hf = build_engine("hf", model, NO_STOP, tokenizer.pad_token_id).generate(prompts, GREEDY)
    built_in = build_engine("torch", model, NO_STOP, tokenizer.pad_token_id).generate(prompts, GREEDY)
    assert torch.equal(hf.response_ids, built_in.response_ids)
    reference = _trainer_log_probs(model, prompts, tokenizer.pad_token_id, hf.response_ids)
    assert (hf.log_probs - reference).abs().max() <= 1e-5
    sampled = SamplingParams(n=2, temperature=0.7, max_new_tokens=12)
    gen = build_engine("hf", model, NO_STOP, tokenizer.pad_token_id).generate(
        prompts, sampled, torch.Generator().manual_seed(0))
    ids, mask = left_pad([prompts[i] for i in gen.prompt_index.tolist()], tokenizer.pad_token_id, torch.device("cpu"))
    with torch.no_grad():
        trainer, _ = sequence_log_probs(model, ids, mask, gen.response_ids, gen.response_mask, 0.7)
    assert ((gen.log_probs - trainer) * gen.response_mask).abs().max() <= 1e-5
