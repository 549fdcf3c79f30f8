"""No turn barrier: a trajectory whose environment is slow delays only itself. Shown by the order of
events (never a timer): trajectory 0's first step waits on a gate that trajectory 1 opens only at its own
third step, which it can reach only if it decodes on while trajectory 0 waits."""

import asyncio
from types import SimpleNamespace

import pytest
import torch

from rlxf.config import EnvConfig
from rlxf.envs.base import ENVS
from rlxf.roles.env_rollout import EnvRolloutRole
from rlxf.rollout.sampling import SamplingParams
from rlxf.rollout.torch_engine import TorchRolloutEngine
from tests.envs.test_env_rollout import ScriptedEngine


class Board:
    """Shared by a batch's environments: the events in order, and the gate."""

    def __init__(self, gated: bool):
        self.events, self.gated, self.gate = [], gated, None


@ENVS.register("test_gated")
class GatedEnv:
    TURNS = 4

    def __init__(self, board):
        self.board, self.n = board, 0

    def reset(self, task):
        self.id, self.n = task["id"], 0
        return "Q:"

    async def step(self, action):
        board = self.board
        self.n += 1
        board.events.append(("step", self.id, self.n))
        if board.gate is None:
            board.gate = asyncio.Event()
        if board.gated and (self.id, self.n) == (0, 1):
            await board.gate.wait()  # a slow tool call, released by another trajectory's progress
        if (self.id, self.n) == (1, 3):
            board.gate.set()
        await asyncio.sleep(0)
        board.events.append(("answer", self.id, self.n))
        done = self.n >= self.TURNS
        return (None if done else f"<{self.n}>"), float(self.n), done, {}


def rollout(engine, tokenizer, board, barrier=False):
    cfg = EnvConfig(name="test_gated", kwargs={"board": board}, max_turns=6, max_total_tokens=200,
                    keep_kv_cache=True, turn_barrier=barrier, max_concurrent_steps=4)
    role = EnvRolloutRole(engine, tokenizer, False, 64, cfg)
    return role.generate([{"prompt": "a", "id": 0}, {"prompt": "b", "id": 1}, {"prompt": "c", "id": 2}],
                         SamplingParams(n=1, max_new_tokens=5), torch.Generator().manual_seed(0))


@pytest.fixture(params=["turn_sessions", "generate_turns"])
def engine(request, tiny_model, tokenizer):
    if request.param == "generate_turns":  # an engine without sessions: one generate per batch of ready rows
        return ScriptedEngine([[5, 6, tokenizer.eos_token_id]] * 20)
    return TorchRolloutEngine(tiny_model, tokenizer.eos_token_id, tokenizer.pad_token_id)


def test_a_slow_environment_delays_only_its_own_trajectory(engine, tokenizer):
    board = Board(gated=True)
    batch = rollout(engine, tokenizer, board)
    events = board.events
    released = events.index(("answer", 0, 1))
    # while trajectory 0 waited on its first step, trajectories 1 and 2 took their second and third turns
    assert events.index(("step", 0, 1)) < events.index(("answer", 1, 1))
    for other in (1, 2):
        assert events.index(("answer", other, 2)) < released
        assert events.index(("step", other, 3)) < released
    assert events.index(("answer", 1, 3)) < released
    # the batch is laid out as ever: every trajectory has its four turns and rewards
    assert [m["turns"] for m in batch.metadata] == [4, 4, 4]
    assert [m["turn_rewards"] for m in batch.metadata] == [[1.0, 2.0, 3.0, 4.0]] * 3
    assert [m["stopped"] for m in batch.metadata] == [True, True, True]


def test_turn_barrier_keeps_turns_in_lockstep(engine, tokenizer):
    board = Board(gated=False)
    batch = rollout(engine, tokenizer, board, barrier=True)
    turns = [n for kind, _, n in board.events if kind == "step"]
    assert turns == sorted(turns)  # every step of turn k before any of turn k + 1
    assert len(turns) == 12 and [m["turns"] for m in batch.metadata] == [4, 4, 4]


@ENVS.register("test_counted")
class CountedEnv:
    """Counts the steps running at once (each yields to the loop three times while it runs)."""

    def __init__(self, board):
        self.board = board

    def reset(self, task):
        return "Q:"

    async def step(self, action):
        self.board.running += 1
        self.board.most = max(self.board.most, self.board.running)
        for _ in range(3):
            await asyncio.sleep(0)
        self.board.running -= 1
        return "<o>", 0.0, False, {}


@pytest.mark.parametrize(("limit", "most"), [(2, 2), (64, 6)])
def test_max_concurrent_steps_bounds_the_steps_running_at_once(tokenizer, limit, most):
    board = SimpleNamespace(running=0, most=0)
    cfg = EnvConfig(name="test_counted", kwargs={"board": board}, max_turns=2, max_total_tokens=200,
                    max_concurrent_steps=limit)
    engine = ScriptedEngine([[5, tokenizer.eos_token_id]] * 4)  # all six turns end in the same generate call
    batch = EnvRolloutRole(engine, tokenizer, False, 64, cfg).generate([{"prompt": "p"}] * 3, SamplingParams(n=2))
    assert board.most == most and [m["turns"] for m in batch.metadata] == [2] * 6
