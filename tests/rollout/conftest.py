"""One real vLLM engine for the vllm-marked tests of this folder (building one takes ~15 s on 2 cores)."""

from __future__ import annotations

import copy
import os

import pytest

# The model's generation_config lists a second end-of-sequence id beside the tokenizer's, as Llama 3's
# does (<|eot_id|> and <|end_of_text|>): the engine must stop at either.
SECOND_STOP_ID = 40


@pytest.fixture(scope="session")
def vllm_policy(tiny_model):
    policy = copy.deepcopy(tiny_model).eval()
    policy.generation_config.eos_token_id = [SECOND_STOP_ID, policy.config.eos_token_id]
    return policy


@pytest.fixture(scope="session")
def vllm_engine(vllm_policy, tokenizer):
    pytest.importorskip("vllm", reason="vLLM is not installed: `make test-vllm` runs these tests in .venv-vllm")
    from rlxf.models.special_tokens import stop_token_ids
    from rlxf.rollout.engine import build_engine

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; unset, vLLM on CPU takes 30% of the RAM
    engine = build_engine(
        "vllm", vllm_policy, stop_token_ids(tokenizer, vllm_policy), tokenizer.pad_token_id,
        {"enforce_eager": True, "max_model_len": 128},
    )
    yield engine
    engine.close()
