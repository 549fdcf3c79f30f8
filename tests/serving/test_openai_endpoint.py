"""The OpenAI-compatible endpoint with the real ``openai`` client on loopback: a tool-calling agent's
trajectory (exact tokens, loss mask, log-probs), concurrent agents batched into the real engine (log-probs
equal the trainer's recomputation), crashes and hangs, edited history, the completions API, keys."""

import sys
import threading
from pathlib import Path

import pytest
import torch

from rlxf.config import EnvConfig
from rlxf.roles.agent_rollout import AgentRolloutRole
from rlxf.rollout.generation import Generation
from rlxf.rollout.sampling import SamplingParams
from tests.serving import agents

openai = pytest.importorskip("openai")
EOS = 2
AGENTS = "tests.serving.agents"


class ScriptedEngine:
    """Turn k of a conversation (k = stop tokens already in its context) is ``turns[k]``; log-prob of
    position j is -0.1 * (j + 1) - k."""

    def __init__(self, tokenizer, turns):
        self.turns = [tokenizer(t, add_special_tokens=False)["input_ids"] + [EOS] for t in turns]
        self.version, self.contexts = 5, []

    def generate(self, prompts, params, generator=None):
        self.contexts += [list(p) for p in prompts]
        outs, logps = [], []
        for p in prompts:
            k = min(p.count(EOS), len(self.turns) - 1)
            out = self.turns[k][: params.max_new_tokens]
            outs.append(out)
            logps.append([-0.1 * (j + 1) - k for j in range(len(out))])
        width = max(len(o) for o in outs)
        pad = lambda rows, fill: torch.tensor([r + [fill] * (width - len(r)) for r in rows])  # noqa: E731
        mask = pad([[1] * len(o) for o in outs], 0)
        return Generation(torch.arange(len(prompts)), pad(outs, 0), mask, pad(logps, 0.0).float(),
                          torch.tensor([o[-1] == EOS for o in outs]), self.version)


def make_role(tokenizer, engine, max_turns=4, max_total_tokens=64, **kwargs):
    kwargs.setdefault("format_kwargs", {"tool_aliases": {"calc": "calculator"}, "tools_header": ""})
    cfg = EnvConfig(name="openai_agent", kwargs=kwargs, max_turns=max_turns, max_total_tokens=max_total_tokens)
    return AgentRolloutRole(engine, tokenizer, False, 64, cfg)


def ids(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.fixture
def closing():
    roles = []
    yield roles.append
    for role in roles:
        role.close()


def test_tool_calls_round_trip_into_the_env_layout(tokenizer, closing):
    engine = ScriptedEngine(tokenizer, ["@calc(2*3)", "6"])
    role = make_role(tokenizer, engine, agent=f"{AGENTS}:tool_loop")
    closing(role)
    batch = role.generate([{"prompt": "2*3=", "answer": "6", "id": "t1"}], SamplingParams(n=1, max_new_tokens=12))
    # what the agent saw: an OpenAI tool call (alias calc -> calculator, the one parameter), then the answer
    assert agents.SEEN["t1"] == [("tool_calls", None, [("calculator", {"expression": "2*3"})]), ("stop", "6", [])]
    turn1, obs, turn2 = ids(tokenizer, "@calc(2*3)") + [EOS], ids(tokenizer, "=6\n"), ids(tokenizer, "6") + [EOS]
    n = int(batch.response_mask[0].sum())
    assert n == len(turn1) + len(obs) + len(turn2) == 11 + 3 + 2
    assert batch.response_ids[0, :n].tolist() == turn1 + obs + turn2
    assert batch.loss_mask[0, :n].tolist() == [1] * 11 + [0] * 3 + [1] * 2
    expected = [-0.1 * (j + 1) for j in range(11)] + [0.0] * 3 + [-1.1, -1.2]
    assert batch.rollout_log_probs[0, :n].tolist() == pytest.approx(expected)
    assert batch.policy_version[0, :n].tolist() == [5] * 11 + [0] * 3 + [5] * 2
    prompt = batch.prompt_ids[0][batch.prompt_mask[0].bool()].tolist()
    assert prompt == tokenizer("2*3=")["input_ids"]  # the row's prompt exactly as single-turn runs encode it
    meta = batch.metadata[0]
    assert meta["turn_spans"] == [(0, 11), (14, 16)] and meta["turn_rewards"] == [0.0, 1.1]  # arithmetic: 1 correct + 0.1 format
    assert meta["env_reward"] == 1.1 and meta["stopped"] is True and meta["env_components"]["correct"] == 1.0
    assert meta["env_components"]["history_mismatch"] == 0.0 and meta["env_components"]["requests"] == 2.0
    # the second turn continued the recorded ids: prompt + turn 1 + the tool result, never re-tokenized text
    assert engine.contexts[1] == prompt + turn1 + obs


def test_concurrent_agents_are_batched_and_log_probs_are_the_policys(tokenizer, tiny_model, closing):
    from rlxf.rollout.torch_engine import TorchRolloutEngine

    engine = TorchRolloutEngine(tiny_model, EOS, tokenizer.pad_token_id)
    role = make_role(tokenizer, engine, agent=f"{AGENTS}:chatty", max_wait_s=2.0, max_total_tokens=40)
    closing(role)
    agents.BARRIER["b"] = threading.Barrier(6)
    rows = [{"prompt": f"{a}+{a}=", "answer": "0", "id": f"c{a}", "barrier": "b"} for a in (1, 2, 3)]
    batch = role.generate(rows, SamplingParams(n=2, max_new_tokens=6), torch.Generator().manual_seed(0))
    assert batch.group_ids.tolist() == [0, 0, 1, 1, 2, 2]
    assert max(role.endpoint.batcher.batches) > 1  # six agents at a barrier: their turns share engine calls
    for row in range(6):
        meta = batch.metadata[row]
        assert meta["turns"] == 2 and meta["env_reward"] == 2.0 and meta["turn_rewards"] == [0.0, 2.0]
        n = int(batch.response_mask[row].sum())
        response, mask = batch.response_ids[row, :n].tolist(), batch.loss_mask[row, :n].tolist()
        (s0, e0), (s1, e1) = meta["turn_spans"]
        assert mask == [1] * e0 + [0] * (s1 - e0) + [1] * (e1 - s1)
        assert response[e0:s1] == ids(tokenizer, "+1=")  # the agent's follow-up, loss mask 0
        texts = [tokenizer.decode(response[s:e], skip_special_tokens=True) for s, e in meta["turn_spans"]]
        assert texts == agents.SEEN[meta["agent_session"]]  # each trajectory is its own agent's conversation
        assert meta["env_components"]["said"] == float(len("".join(texts)))
    # what is trained is what was sampled: the trainer's forward pass gives the recorded log-probs
    with torch.no_grad():
        for row in range(6):
            prompt = batch.prompt_ids[row][batch.prompt_mask[row].bool()]
            n = int(batch.response_mask[row].sum())
            full = torch.cat([prompt, batch.response_ids[row, :n]])[None]
            logits = tiny_model(full).logits[0, len(prompt) - 1: -1].float().log_softmax(-1)
            recomputed = logits.gather(-1, full[0, len(prompt):, None]).squeeze(-1)
            keep = batch.loss_mask[row, :n].bool()
            assert torch.allclose(recomputed[keep], batch.rollout_log_probs[row, :n][keep], atol=1e-4)


def test_crash_hang_and_bad_result_score_zero_with_a_counted_reason(tokenizer, closing):
    engine = ScriptedEngine(tokenizer, ["1"])
    rows = [{"prompt": "0+1=", "answer": "1", "id": f"f{i}"} for i in range(2)]
    outcomes = {}
    for name in ("crash_after_one", "hang_after_one", "wrong_result"):
        role = make_role(tokenizer, engine, agent=f"{AGENTS}:{name}", timeout_s=1.0)
        closing(role)
        outcomes[name] = role.generate(rows[:1], SamplingParams(n=1, max_new_tokens=4)).metadata[0]
    agents.RELEASE.set()
    crash, hang, wrong = outcomes["crash_after_one"], outcomes["hang_after_one"], outcomes["wrong_result"]
    assert crash["env_reward"] == 0.0 and crash["env_components"]["agent_error"] == 1.0
    assert "RuntimeError: the agent's own bug" in crash["agent_failure"]
    assert crash["turns"] == 1 and crash["stopped"] is False  # its turn is kept (scored 0)
    assert hang["env_reward"] == 0.0 and hang["env_components"]["agent_timeout"] == 1.0
    assert "timeout_s=1.0" in hang["agent_failure"]
    assert wrong["env_components"]["agent_error"] == 1.0 and "expected a number" in wrong["agent_failure"]


def test_async_agents_run_on_the_loop_and_are_cancelled_at_the_timeout(tokenizer, closing):
    engine = ScriptedEngine(tokenizer, ["@calc(2*3)", "6"])
    role = make_role(tokenizer, engine, agent=f"{AGENTS}:async_tool_loop")
    closing(role)
    ok = role.generate([{"prompt": "2*3=", "answer": "6"}], SamplingParams(n=1, max_new_tokens=12)).metadata[0]
    assert ok["turn_spans"] == [(0, 11), (14, 16)] and ok["env_reward"] == 1.1
    role = make_role(tokenizer, engine, agent=f"{AGENTS}:async_hang", timeout_s=0.5)
    closing(role)
    hang = role.generate([{"prompt": "2*3=", "answer": "6", "id": "ah"}], SamplingParams(n=1, max_new_tokens=12)).metadata[0]
    assert hang["env_components"]["agent_timeout"] == 1.0 and hang["turns"] == 1 and hang["env_reward"] == 0.0
    assert agents.SEEN["ah"] == ["cancelled"]  # the coroutine itself was cancelled, not abandoned


def test_subprocess_agents_ok_crash_and_hang(tokenizer, closing):
    engine = ScriptedEngine(tokenizer, ["@calc(2*3)", "6"])
    command = [sys.executable, str(Path(agents.__file__))]
    role = make_role(tokenizer, engine, command=command, timeout_s=20.0)
    closing(role)
    rows = [{"prompt": "2*3=", "answer": "6", "id": "s0"}, {"prompt": "2*3=", "answer": "6", "id": "s1", "mode": "crash"}]
    batch = role.generate(rows, SamplingParams(n=1, max_new_tokens=12))
    ok, crash = batch.metadata
    assert ok["env_reward"] == 1.1 and ok["turn_spans"] == [(0, 11), (14, 16)] and ok["env_components"]["correct"] == 1.0
    assert crash["env_reward"] == 0.0 and "exited with status 3" in crash["agent_failure"] and crash["turns"] == 2
    role = make_role(tokenizer, engine, command=command, timeout_s=0.5)
    closing(role)
    hang = role.generate([{**rows[0], "mode": "hang"}], SamplingParams(n=1, max_new_tokens=12)).metadata[0]
    assert hang["env_components"]["agent_timeout"] == 1.0 and hang["turns"] == 0
    assert hang["env_reward"] == 0.0 and "still running after timeout_s=0.5" in hang["agent_failure"]


def test_edited_history_starts_a_new_segment_and_is_counted(tokenizer, closing):
    engine = ScriptedEngine(tokenizer, ["5", "6"])
    role = make_role(tokenizer, engine, agent=f"{AGENTS}:edit_history")
    closing(role)
    batch = role.generate([{"prompt": "2+3=", "answer": "6", "id": "e"}], SamplingParams(n=1, max_new_tokens=4))
    meta = batch.metadata[0]
    comp = meta["env_components"]
    assert comp["history_mismatch"] == 1.0 and comp["dropped_tokens"] == 2.0  # "5" + EOS of the first segment
    # the trajectory is the second segment: the conversation as sent (the edited "9", its end of turn) is
    # its prompt, tokenized afresh; only the new turn is trained
    prompt = batch.prompt_ids[0][batch.prompt_mask[0].bool()].tolist()
    assert prompt == tokenizer("2+3=9</s>+1=")["input_ids"]
    n = int(batch.response_mask[0].sum())
    assert batch.response_ids[0, :n].tolist() == ids(tokenizer, "6") + [EOS] and meta["turn_spans"] == [(0, 2)]
    assert meta["env_reward"] == 1.1


def test_completions_extend_the_recorded_text(tokenizer, closing):
    engine = ScriptedEngine(tokenizer, ["@calc(2*3)", "6"])
    role = make_role(tokenizer, engine, agent=f"{AGENTS}:completions")
    closing(role)
    batch = role.generate([{"prompt": "2*3=", "answer": "6", "id": "p"}], SamplingParams(n=1, max_new_tokens=12))
    assert agents.SEEN["p"] == ["@calc(2*3)", "6"]
    n = int(batch.response_mask[0].sum())
    turn1, obs, turn2 = ids(tokenizer, "@calc(2*3)") + [EOS], ids(tokenizer, "=6\n"), ids(tokenizer, "6") + [EOS]
    assert batch.response_ids[0, :n].tolist() == turn1 + obs + turn2
    assert batch.loss_mask[0, :n].tolist() == [1] * len(turn1) + [0] * len(obs) + [1] * len(turn2)
    assert batch.metadata[0]["env_components"]["history_mismatch"] == 0.0


def test_sessions_need_their_key_and_refuse_what_they_cannot_serve(tokenizer, closing):
    from rlxf.serving.session import Budget

    role = make_role(tokenizer, ScriptedEngine(tokenizer, ["1"]), agent=f"{AGENTS}:tool_loop")
    closing(role)
    endpoint = role.endpoint
    session = endpoint.open_session(Budget(64, 64, 4, 4))
    other = endpoint.open_session(Budget(64, 64, 4, 4))
    by_key = openai.OpenAI(base_url=f"{endpoint.url}/v1", api_key=session.key, max_retries=0)
    assert [m.id for m in by_key.models.list().data] == ["policy"]
    reply = by_key.chat.completions.create(model="policy", messages=[{"role": "user", "content": "0+1="}])
    assert reply.choices[0].message.content == "1" and session.requests == 1 and other.requests == 0
    wrong = openai.OpenAI(base_url=endpoint.base_url(session), api_key=other.key, max_retries=0)
    with pytest.raises(openai.AuthenticationError, match="rlxf: wrong API key"):
        wrong.chat.completions.create(model="policy", messages=[{"role": "user", "content": "0+1="}])
    with pytest.raises(openai.BadRequestError, match="rlxf: n must be 1"):
        by_key.chat.completions.create(model="policy", messages=[{"role": "user", "content": "0+1="}], n=2)
    with pytest.raises(openai.BadRequestError, match="over data.max_prompt_tokens=64"):
        by_key.chat.completions.create(model="policy", messages=[{"role": "user", "content": "1" * 70}])
    endpoint.close_session(session)
    with pytest.raises(openai.APIStatusError, match="is over"):
        by_key.chat.completions.create(model="policy", messages=[{"role": "user", "content": "0+1="}])
