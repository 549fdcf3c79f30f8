"""The reward protocol: score a batch of trajectories, return one score each plus named components.

A reward is any object with ``score(prompts, responses, metadata) -> RewardOutput`` — ``score`` may be
``async def`` (the reward role runs it to completion) — and a plain function (sync or async) with that
signature returning a list of floats is accepted too (see ``as_reward``). ``metadata`` holds
whatever the dataset row carried besides the prompt (the reference answer, unit tests, ...).
Components (e.g. ``correct``, ``format``) are logged separately; ``scores`` is what training uses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from rlxf.awaitables import resolve


@dataclass
class RewardOutput:
    scores: list[float]
    components: dict[str, list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, values in self.components.items():
            if len(values) != len(self.scores):
                raise ValueError(
                    f"reward component {name!r} has {len(values)} values for {len(self.scores)} scores"
                )


@runtime_checkable
class Reward(Protocol):
    def score(
        self, prompts: Sequence[str], responses: Sequence[str], metadata: Sequence[dict]
    ) -> RewardOutput: ...


class FunctionReward:
    """Wraps a plain callable ``fn(prompts, responses, metadata) -> list[float] | RewardOutput``."""

    def __init__(self, fn: Callable, name: str | None = None) -> None:
        self.fn = fn
        self.name = name or getattr(fn, "__qualname__", repr(fn))

    def score(
        self, prompts: Sequence[str], responses: Sequence[str], metadata: Sequence[dict]
    ) -> RewardOutput:
        return as_output(resolve(self.fn(prompts, responses, metadata)), len(responses), self.name)


def as_output(out: object, n: int, name: str) -> RewardOutput:
    """A ``RewardOutput`` from what a reward returned (an output or a list of floats), length-checked."""
    if not isinstance(out, RewardOutput):
        out = RewardOutput(scores=[float(s) for s in out])  # type: ignore[union-attr]
    if len(out.scores) != n:
        raise ValueError(f"reward {name} returned {len(out.scores)} scores for {n} responses")
    return out


def call_reward(
    reward: Reward, prompts: Sequence[str], responses: Sequence[str], metadata: Sequence[dict], name: str = ""
) -> RewardOutput:
    """Score synchronously whether ``reward.score`` is sync or async."""
    out = resolve(reward.score(prompts, responses, metadata))
    return as_output(out, len(responses), name or type(reward).__name__)


def as_reward(obj: object) -> Reward:
    if isinstance(obj, Reward):
        return obj
    if callable(obj):
        return FunctionReward(obj)
    raise TypeError(f"{obj!r} is neither a Reward (with .score) nor a callable")
