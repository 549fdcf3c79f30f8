"""The vLLM rollout engine on the tiny model (``make test-vllm``): shapes and masks, stops at every
end-of-sequence id, greedy output equal to the built-in engine's, top-k / top-p, seeded sampling, weight
updates without a restart with the weight-sync protocol's version and checksum, sleep mode refused on
CPU. Log-prob parity with the trainer's forward pass is in test_vllm_parity.py.

Skipped where vLLM is not importable (test_vllm_engine_glue.py covers that case with a stand-in).
"""

from __future__ import annotations

import copy

import pytest
import torch

from rlxf.rollout.engine import build_engine
from rlxf.rollout.sampling import SamplingParams
from rlxf.runtime.transports.plan import StaleWeightsError
from rlxf.runtime.weight_sync import check_report, engine_report, pack_weights

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm", reason="vLLM is not installed: `make test-vllm` runs these tests in .venv-vllm")

PROMPTS = [[5, 9, 12, 3], [7, 7], [20, 4, 11, 30, 2, 8], [15]]


def _state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _perturbed(model, seed: int, scale: float = 0.5) -> dict[str, torch.Tensor]:
    """The model's weights plus noise on every matrix, the tied head kept one tensor with the embedding."""
    g = torch.Generator().manual_seed(seed)
    new = {k: v + scale * torch.randn(v.shape, generator=g) if v.dim() == 2 else v for k, v in _state(model).items()}
    if model.config.tie_word_embeddings:
        new["lm_head.weight"] = new["model.embed_tokens.weight"]  # one tensor, as the trainer sends it
    return new


def first_token_weights(state: dict[str, torch.Tensor], token: int) -> dict[str, torch.Tensor]:
    """Weights whose greedy next token is always ``token``: the layers add nothing to the residual stream
    (o_proj, down_proj = 0), the final norm keeps feature 0 only, every embedding has feature 0 = 1
    except ``token``'s = 2, so the logit of v is E[v, 0] * h0 with h0 > 0 and ``token``'s is the largest."""
    out = {k: v.clone() for k, v in state.items()}
    for name in out:
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            out[name].zero_()
    out["model.norm.weight"].zero_()
    out["model.norm.weight"][0] = 1.0
    for head in ("model.embed_tokens.weight", "lm_head.weight"):
        if head in out:
            out[head][:, 0] = 1.0
            out[head][token, 0] = 2.0
    return out


def _check_shapes(gen, n_prompts: int, params: SamplingParams, stop_ids: list[int], pad_id: int) -> None:
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
        assert not set(ids[:-1]) & set(stop_ids)  # stops at the first stop id
        assert bool(gen.stopped[row]) == (bool(ids) and ids[-1] in stop_ids)
        if not gen.stopped[row]:
            assert length == params.max_new_tokens


def _second_stop_id(policy) -> int:
    return policy.generation_config.eos_token_id[0]  # tests/rollout/conftest.py lists it first


def test_engine_stops_on_generation_config_and_tokenizer_eos(vllm_engine, vllm_policy, tokenizer):
    assert vllm_engine.stop_ids == [40, tokenizer.eos_token_id] == [_second_stop_id(vllm_policy), 2]
    assert torch.get_num_threads() == 1  # vLLM's CPU worker made set_num_threads a no-op; the engine put it back
    torch.set_num_threads(1)


def test_sampling_shapes_masks_and_stops(vllm_engine, tokenizer):
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=12)
    gen = vllm_engine.generate(PROMPTS, params, torch.Generator().manual_seed(0))
    _check_shapes(gen, len(PROMPTS), params, vllm_engine.stop_ids, tokenizer.pad_token_id)
    assert gen.version == vllm_engine.version


@pytest.mark.parametrize("stop", ["tokenizer", "generation_config"])
def test_each_stop_id_ends_a_response(vllm_engine, vllm_policy, tokenizer, stop):
    token = tokenizer.eos_token_id if stop == "tokenizer" else _second_stop_id(vllm_policy)
    state = _state(vllm_policy)
    vllm_engine.update_weights(first_token_weights(state, token), version=vllm_engine.version)
    try:
        gen = vllm_engine.generate(PROMPTS, SamplingParams(n=2, temperature=0.0, max_new_tokens=5))
        assert gen.stopped.all()
        assert gen.response_mask.tolist() == [[1]] * len(gen.stopped)
        assert gen.response_ids[:, 0].tolist() == [token] * len(gen.stopped)
    finally:
        vllm_engine.update_weights(state, version=vllm_engine.version)


def test_greedy_matches_the_builtin_engine(vllm_engine, vllm_policy, tokenizer):
    torch_engine = build_engine("torch", vllm_policy, vllm_engine.stop_ids, tokenizer.pad_token_id)
    params = SamplingParams(n=2, temperature=0.0, max_new_tokens=10)
    ours, theirs = vllm_engine.generate(PROMPTS, params), torch_engine.generate(PROMPTS, params)
    assert ours.response_ids.tolist() == theirs.response_ids.tolist()
    assert ours.response_mask.tolist() == theirs.response_mask.tolist()
    assert ours.stopped.tolist() == theirs.stopped.tolist()
    torch.testing.assert_close(ours.log_probs, theirs.log_probs, atol=1e-4, rtol=0)


def test_top_k_one_and_tiny_top_p_are_greedy(vllm_engine):
    """Top-k 1 (or a nucleus of one token) at temperature 1 samples the argmax; vLLM's processed log-probs
    are those of the truncated distribution, which puts probability 1 (log-prob 0) on it."""
    greedy = vllm_engine.generate(PROMPTS, SamplingParams(n=1, temperature=0.0, max_new_tokens=8))
    for params in (SamplingParams(n=2, temperature=1.0, top_k=1, max_new_tokens=8),
                   SamplingParams(n=2, temperature=1.0, top_p=1e-6, max_new_tokens=8)):
        assert not vllm_engine.exact_log_probs(params)
        gen = vllm_engine.generate(PROMPTS, params, torch.Generator().manual_seed(2))
        assert gen.response_ids.tolist() == greedy.response_ids.repeat_interleave(2, dim=0).tolist()
        assert gen.log_probs.abs().max().item() == pytest.approx(0.0, abs=1e-6)


def test_top_k_samples_among_the_k_best(vllm_engine, vllm_policy, tokenizer):
    """Every token sampled with top-k 3 is among the 3 largest logits of the policy at that position."""
    from rlxf.batch import left_pad

    gen = vllm_engine.generate(PROMPTS, SamplingParams(n=4, temperature=1.5, top_k=3, max_new_tokens=8),
                               torch.Generator().manual_seed(5))
    prompts = [PROMPTS[i] for i in gen.prompt_index.tolist()]
    ids, mask = left_pad(prompts, tokenizer.pad_token_id, torch.device("cpu"))
    full = torch.cat([ids, gen.response_ids], dim=1)
    attention = torch.cat([mask, gen.response_mask], dim=1)
    with torch.no_grad():
        logits = vllm_policy(input_ids=full, attention_mask=attention).logits[:, ids.shape[1] - 1: -1]
    top3 = logits.topk(3, dim=-1).indices
    chosen = (top3 == gen.response_ids[..., None]).any(-1)
    assert chosen[gen.response_mask.bool()].all()
    assert len(set(gen.response_ids[:, 0].tolist())) > 1  # and it did sample, not only take the argmax


def test_seeded_sampling_is_reproducible(vllm_engine):
    params = SamplingParams(n=4, temperature=1.0, max_new_tokens=8)
    a = vllm_engine.generate(PROMPTS, params, torch.Generator().manual_seed(3))
    b = vllm_engine.generate(PROMPTS, params, torch.Generator().manual_seed(3))
    c = vllm_engine.generate(PROMPTS, params, torch.Generator().manual_seed(4))
    assert a.response_ids.tolist() == b.response_ids.tolist()
    assert a.response_ids.tolist() != c.response_ids.tolist()
    assert len({tuple(r) for r in a.response_ids[:4].tolist()}) > 1  # the n samples of a prompt differ


def test_update_weights_every_step_with_version_and_checksum(vllm_engine, vllm_policy, tokenizer):
    """Three updates in a row, as three RL steps: after each, greedy output is the built-in engine's on a
    model holding the new weights, and the weight-sync protocol's check passes (version, and a digest per
    tensor of what vLLM holds). A report checked against other weights or another version fails."""
    params = SamplingParams(n=1, temperature=0.0, max_new_tokens=8)
    original = _state(vllm_policy)
    before = vllm_engine.generate(PROMPTS, params)
    other = copy.deepcopy(vllm_policy)
    try:
        for step in range(3):
            new = _perturbed(vllm_policy, seed=10 + step)
            version = vllm_engine.version + 1
            vllm_engine.update_weights(new, version)
            after = vllm_engine.generate(PROMPTS, params)
            assert vllm_engine.version == version and after.version == version
            other.load_state_dict(new)
            reference = build_engine("torch", other, vllm_engine.stop_ids, tokenizer.pad_token_id).generate(PROMPTS, params)
            assert after.response_ids.tolist() == reference.response_ids.tolist()
            assert after.response_ids.tolist() != before.response_ids.tolist()
            report = engine_report(vllm_engine, with_digests=True)
            assert len(report["digests"]) == len(new) - int(vllm_policy.config.tie_word_embeddings)
            check_report(pack_weights(new, version, 2**20), report)
        with pytest.raises(StaleWeightsError, match="differ from the trainer's"):
            check_report(pack_weights(_perturbed(vllm_policy, seed=99), version, 2**20), report)
        with pytest.raises(StaleWeightsError, match=f"holds policy version {version}, trainer sent {version + 1}"):
            check_report(pack_weights(new, version + 1, 2**20), report)
    finally:
        vllm_engine.update_weights(original, vllm_engine.version)
    assert vllm_engine.generate(PROMPTS, params).response_ids.tolist() == before.response_ids.tolist()


def test_sleep_mode_is_refused_on_cpu_with_the_reason(vllm_policy, tokenizer):
    with pytest.raises(ValueError, match=r"rlxf: rollout\.engine_options\.enable_sleep_mode.*GPU"):
        build_engine("vllm", vllm_policy, tokenizer.eos_token_id, tokenizer.pad_token_id,
                     {"enable_sleep_mode": True, "enforce_eager": True})
