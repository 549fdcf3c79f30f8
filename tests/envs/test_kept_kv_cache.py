"""KV caches kept across turns (rollout/turn_sessions.py): the same tokens and log-probs as re-prefilling
every turn, for the tiny model and a small random model of SmolLM2's architecture (GQA); only the new
tokens are prefilled; a weight update mid-rollout recomputes the caches of the old weights."""

import copy

import pytest
import torch
import transformers

from rlxf.batch import TrajectoryBatch
from rlxf.config import EnvConfig
from rlxf.envs.base import ENVS
from rlxf.roles.env_rollout import EnvRolloutRole
from rlxf.rollout.sampling import SamplingParams
from rlxf.rollout.torch_engine import TorchRolloutEngine
from rlxf.train.log_probs import batch_log_probs

# Rounding: a kept cache holds K/V computed one token at a time by decode steps, a re-prefill computes
# them in one batched pass; in fp32 the log-probs then differ by ~1e-6, and the sampled tokens are the same.
ATOL = 1e-5


@ENVS.register("test_turn_counter")
class CounterEnv:
    """Observation ``[k]`` + a row-dependent suffix after turn k; done after ``turns`` turns."""

    def __init__(self, turns=4, hook=None):
        self.turns, self.hook, self.n = turns, hook, 0

    def reset(self, task):
        self.n, self.task = 0, task
        return task["prompt"]

    def step(self, action):
        self.n += 1
        if self.hook is not None:
            self.hook(self)
        done = self.n >= self.turns
        return (None if done else f"[{self.n}]" + "x" * (len(action) % 3)), float(self.n), done, {}


def role(engine, tokenizer, keep=True, barrier=False, reprefill=False, **kwargs):
    if reprefill:
        engine.open_turn_sessions = lambda *args, **kw: None  # today's path: engine.generate every turn
    cfg = EnvConfig(name="test_turn_counter", kwargs=kwargs, max_turns=6, max_total_tokens=200,
                    keep_kv_cache=keep, turn_barrier=barrier, max_concurrent_steps=8)
    return EnvRolloutRole(engine, tokenizer, False, 64, cfg)


def smollm2_like(vocab_size: int) -> torch.nn.Module:
    """SmolLM2's architecture (GQA 3:1 query:kv heads, head_dim 64, tied embeddings, rope theta 1e5), 2 layers."""
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=vocab_size, hidden_size=192, intermediate_size=512, num_hidden_layers=2,
                                   num_attention_heads=3, num_key_value_heads=1, head_dim=64, rope_theta=100000.0,
                                   rms_norm_eps=1e-5, tie_word_embeddings=True, max_position_embeddings=512)
    return transformers.LlamaForCausalLM(cfg).eval()


def stops(tokenizer) -> list[int]:
    """End-of-sequence plus ten more of the 100 ids: random models end turns at different lengths (~1 in 9
    tokens), so rows finish turns at different steps and join the running batch mid-decode."""
    return [tokenizer.eos_token_id, *range(10, 20)]


ROWS = [{"prompt": "12+7="}, {"prompt": "3+405="}, {"prompt": "8+1="}]
PARAMS = SamplingParams(n=2, temperature=1.0, max_new_tokens=8)


def run(model, tokenizer, seed=0, **kwargs):
    engine = TorchRolloutEngine(model, stops(tokenizer), tokenizer.pad_token_id)
    r = role(engine, tokenizer, **kwargs)
    batch = r.generate(ROWS, PARAMS, torch.Generator().manual_seed(seed))
    sessions = r.last_turns
    return batch, sessions


def assert_same(a, b):
    assert torch.equal(a.response_ids, b.response_ids)
    assert torch.equal(a.loss_mask, b.loss_mask)
    assert torch.equal(a.prompt_ids, b.prompt_ids)
    assert torch.equal(a.policy_version, b.policy_version)
    assert a.metadata == b.metadata
    torch.testing.assert_close(a.rollout_log_probs, b.rollout_log_probs, atol=ATOL, rtol=0)


@pytest.fixture(params=["tiny", "smollm2_gqa"])
def model(request, tiny_model, tokenizer):
    return tiny_model if request.param == "tiny" else smollm2_like(len(tokenizer))


def test_kept_cache_samples_the_tokens_of_todays_reprefill_path(model, tokenizer):
    """Lockstep turns (turn_barrier): the kept cache = one engine.generate per turn over the transcripts."""
    for seed in (0, 1):
        kept, sessions = run(model, tokenizer, seed, barrier=True)
        today, generate_turns = run(model, tokenizer, seed, barrier=True, reprefill=True)
        assert type(sessions).__name__ == "TurnSessions" and type(generate_turns).__name__ == "GenerateTurns"
        assert_same(kept, today)


def test_kept_cache_equals_reprefill_with_continuous_batching(model, tokenizer):
    """No barrier: rows join the running batch as their environment answers; keeping the cache or
    re-prefilling the transcript at each join samples the same tokens; the kept cache prefills only the
    prompt once and then (last sampled token + observation) per later turn."""
    kept, kept_sessions = run(model, tokenizer)
    again, again_sessions = run(model, tokenizer, keep=False)
    assert_same(kept, again)
    turns = [m["turn_spans"] for m in kept.metadata]
    prompts = kept.prompt_mask.sum(1).tolist()
    assert [m["turns"] for m in kept.metadata] == [4] * 6
    # kept: prompt, then per later turn the previous turn's last token and the observation between them
    kept_expected = sum(p + sum(1 + (b - prev_end) for (_, prev_end), (b, _) in zip(spans, spans[1:]))
                        for p, spans in zip(prompts, turns))
    # re-prefill: the whole transcript before every turn
    again_expected = sum(sum(p + b for b, _ in spans) for p, spans in zip(prompts, turns))
    assert kept_sessions.prefilled == kept_expected
    assert again_sessions.prefilled == again_expected
    assert kept_expected < again_expected / 2
    lockstep, _ = run(model, tokenizer, barrier=True)  # rows did join mid-decode: other rows, other noise
    assert not torch.equal(lockstep.response_ids, kept.response_ids)


def test_weight_update_mid_rollout_recomputes_old_caches(tiny_model, tokenizer):
    """The first environment step loads new weights (version 3) while other rows are still decoding:
    every token sampled afterwards has version 3 and the new weights' log-probs (a full forward over
    the trajectory), every token before it version 0 and the old weights' log-probs."""
    new_model = copy.deepcopy(tiny_model)
    with torch.no_grad():
        for p in new_model.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(1)) * 0.05)
    engine = TorchRolloutEngine(copy.deepcopy(tiny_model), stops(tokenizer), tokenizer.pad_token_id)

    def update_once(env):
        if engine.version == 0:
            engine.update_weights(new_model.state_dict(), version=3)

    batch = role(engine, tokenizer, hook=update_once).generate(ROWS, PARAMS, torch.Generator().manual_seed(0))
    versions, mask = batch.policy_version, batch.loss_mask.bool()
    old, new = (versions == 0) & mask, versions == 3
    assert int(old.sum()) > 0 and int(new.sum()) > int(old.sum())
    assert torch.equal(old | new, mask)
    # some trajectory was mid-turn at the update: it has tokens of both versions within one turn
    mixed = [row for row in range(len(versions)) for b, e in batch.metadata[row]["turn_spans"]
             if {0, 3} <= set(versions[row, b:e].tolist())]
    assert mixed
    full = TrajectoryBatch(batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask,
                           batch.loss_mask, batch.group_ids)
    full_new, full_old = batch_log_probs(new_model, full, 8), batch_log_probs(tiny_model, full, 8)
    torch.testing.assert_close(batch.rollout_log_probs[new], full_new[new].float(), atol=1e-4, rtol=0)
    torch.testing.assert_close(batch.rollout_log_probs[old], full_old[old].float(), atol=1e-4, rtol=0)
    assert (batch.rollout_log_probs[new] - full_old[new]).abs().max() > 1e-3  # the weights did change


def test_an_engine_without_sessions_reprefills_with_the_same_tokens(tiny_model, tokenizer):
    """The torch engine's generic decoder (HFDecoder) cannot prefill over a kept cache: each turn is a
    generate() over the transcripts, and under lockstep turns it samples the kept cache's tokens."""
    engine = TorchRolloutEngine(tiny_model, stops(tokenizer), tokenizer.pad_token_id, decoder="hf")
    assert engine.open_turn_sessions(PARAMS) is None
    r = role(engine, tokenizer, barrier=True)
    fallback = r.generate(ROWS, PARAMS, torch.Generator().manual_seed(0))
    assert type(r.last_turns).__name__ == "GenerateTurns"
    kept, _ = run(tiny_model, tokenizer, barrier=True)
    assert_same(fallback, kept)
