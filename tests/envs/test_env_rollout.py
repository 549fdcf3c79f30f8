"""Multi-turn token-in/token-out rollout: exact loss-mask positions, the sequence is the turns' tokens
concatenated, budgets, async environments, and the real engine."""

import asyncio

import torch

from rlxf.config import EnvConfig
from rlxf.envs.base import ENVS
from rlxf.roles.env_rollout import EnvRolloutRole
from rlxf.rollout.generation import Generation
from rlxf.rollout.sampling import SamplingParams

EOS = 2


class ScriptedEngine:
    """Answers turn k of every trajectory with ``turns[k]`` (cut to the budget); records each prompt."""

    def __init__(self, turns):
        self.turns, self.calls, self.version = turns, [], 7

    def generate(self, prompts, params, generator=None):
        self.calls.append([list(p) for p in prompts])
        turn = len(self.calls) - 1
        outs = [self.turns[turn][: params.max_new_tokens] for _ in prompts]
        width = max(len(o) for o in outs)
        ids = torch.tensor([o + [0] * (width - len(o)) for o in outs])
        mask = torch.tensor([[1] * len(o) + [0] * (width - len(o)) for o in outs])
        logp = -0.5 * mask.float() - 0.01 * torch.arange(width)[None]
        return Generation(torch.arange(len(prompts)), ids, mask, logp * mask,
                          torch.tensor([o[-1] == EOS for o in outs]), self.version)


@ENVS.register("test_echo")
class EchoEnv:
    """Observation ``<n>`` after each turn; done after ``turns`` turns; reward = turn number."""

    def __init__(self, turns=2, asynchronous=False):
        self.turns, self.asynchronous, self.n = turns, asynchronous, 0

    def reset(self, task):
        self.n = 0
        return "Q:"

    def _step(self, action):
        self.n += 1
        done = self.n >= self.turns
        return (None if done else f"<{self.n}>"), float(self.n), done, {"components": {"correct": 1.0, "said": len(action)}}

    def step(self, action):
        if not self.asynchronous:
            return self._step(action)

        async def later():
            await asyncio.sleep(0)
            return self._step(action)

        return later()


def role(tokenizer, engine, max_turns=4, max_total_tokens=64, **kwargs):
    cfg = EnvConfig(name="test_echo", kwargs=kwargs, max_turns=max_turns, max_total_tokens=max_total_tokens)
    return EnvRolloutRole(engine, tokenizer, False, 64, cfg)


def ids(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_transcript_is_concatenation_and_loss_mask_exact(tokenizer):
    turn1, turn2 = ids(tokenizer, "ab") + [EOS], ids(tokenizer, "xyz") + [EOS]
    engine = ScriptedEngine([turn1, turn2])
    batch = role(tokenizer, engine, turns=2).generate([{"prompt": "ignored", "answer": "1"}], SamplingParams(n=2, max_new_tokens=8))
    obs = ids(tokenizer, "<1>")
    expected = turn1 + obs + turn2
    prompt = ids(tokenizer, "Q:")
    for row in range(2):
        n = int(batch.response_mask[row].sum())
        assert batch.response_ids[row, :n].tolist() == expected
        assert batch.loss_mask[row, :n].tolist() == [1, 1, 1, 0, 0, 0, 1, 1, 1, 1]
        assert batch.prompt_ids[row][batch.prompt_mask[row].bool()].tolist() == prompt
        assert batch.rollout_log_probs[row, 3:6].tolist() == [0.0, 0.0, 0.0]
        assert batch.rollout_log_probs[row, 0].item() == -0.5
        assert batch.policy_version[row, :n].tolist() == [7 * m for m in batch.loss_mask[row, :n].tolist()]
    # Turn 2's engine prompt is exactly prompt + turn 1 + observation: the ids, not a re-tokenized text.
    assert engine.calls[1][0] == prompt + turn1 + obs
    meta = batch.metadata[0]
    assert meta["turn_rewards"] == [1.0, 2.0] and meta["env_reward"] == 3.0 and meta["stopped"] is True
    assert meta["turn_spans"] == [(0, 3), (6, 10)] and meta["answer"] == "1"
    assert batch.truncated.tolist() == [False, False]
    assert batch.group_ids.tolist() == [0, 0]


def test_max_turns_and_async_env(tokenizer):
    engine = ScriptedEngine([[5, EOS]] * 5)
    batch = role(tokenizer, engine, max_turns=2, turns=10, asynchronous=True).generate(
        [{"prompt": "p"}], SamplingParams(n=1, max_new_tokens=4))
    obs = ids(tokenizer, "<1>")
    assert batch.response_ids[0].tolist() == [5, EOS] + obs + [5, EOS]  # no observation after the last turn
    assert batch.loss_mask[0].tolist() == [1, 1, 0, 0, 0, 1, 1]
    assert batch.truncated.tolist() == [True] and batch.metadata[0]["stopped"] is False
    assert len(engine.calls) == 2


def test_max_total_tokens_cuts_turns_and_observations(tokenizer):
    engine = ScriptedEngine([[5, 6, 7, EOS]] * 5)
    batch = role(tokenizer, engine, max_total_tokens=6, turns=10).generate([{"prompt": "p"}], SamplingParams(n=1, max_new_tokens=8))
    assert batch.response_ids[0].tolist() == [5, 6, 7, EOS] + ids(tokenizer, "<1>")[:2]
    assert batch.loss_mask[0].tolist() == [1, 1, 1, 1, 0, 0]
    assert batch.truncated.tolist() == [True] and len(engine.calls) == 1


def test_env_reward_reads_the_rollout(tokenizer):
    from rlxf.rewards.registry import build_reward

    batch = role(tokenizer, ScriptedEngine([[5, EOS], [6, EOS]]), turns=2).generate([{"prompt": "p"}], SamplingParams(n=1))
    out = build_reward("env").score([""], [""], batch.metadata)
    assert out.scores == [3.0] and out.components["correct"] == [1.0] and out.components["turns"] == [2.0]


def test_real_engine_sequence_is_concatenation_of_turns(tiny_model, tokenizer):
    from rlxf.rollout.torch_engine import TorchRolloutEngine

    engine = TorchRolloutEngine(tiny_model, tokenizer.eos_token_id, tokenizer.pad_token_id)
    engine.open_turn_sessions = lambda *args, **kwargs: None  # the re-prefill path: one generate() per turn
    calls = []
    original = engine.generate

    def recording(prompts, params, generator=None):
        gen = original(prompts, params, generator)
        calls.append(([list(p) for p in prompts], gen))
        return gen

    engine.generate = recording
    batch = role(tokenizer, engine, turns=3).generate([{"prompt": "p"}, {"prompt": "q"}], SamplingParams(n=2, max_new_tokens=5),
                                                      torch.Generator().manual_seed(0))
    for row in range(4):
        n = int(batch.response_mask[row].sum())
        full = batch.prompt_ids[row][batch.prompt_mask[row].bool()].tolist() + batch.response_ids[row, :n].tolist()
        # The last engine call for this row saw a prefix of the final sequence, and its tokens complete it.
        prompts, gen = calls[-1]
        assert full[: len(prompts[row])] == prompts[row]
        new = gen.response_ids[row, : int(gen.response_mask[row].sum())].tolist()
        assert full[len(prompts[row]):] == new
        assert batch.loss_mask[row, :n].sum().item() == sum(
            int(g.response_mask[row].sum()) for _, g in calls)
