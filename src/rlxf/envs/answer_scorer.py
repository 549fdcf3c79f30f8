"""Scoring one answer with any configured reward, for environments that judge the policy's final turn."""

from __future__ import annotations

from typing import Any

from rlxf.rewards.base import call_reward
from rlxf.rewards.registry import build_reward


class AnswerScorer:
    """``score(task, answer) -> (score, components)`` with reward ``function`` (a name or dotted path)."""

    def __init__(self, function: str = "arithmetic", kwargs: dict[str, Any] | None = None) -> None:
        self.name = function
        self.reward = build_reward(function, kwargs)

    def score(self, task: dict, answer: str, prompt: str = "", stopped: bool = True) -> tuple[float, dict[str, float]]:
        meta = {**task, "stopped": stopped}
        out = call_reward(self.reward, [prompt], [answer], [meta], self.name)
        return out.scores[0], {k: v[0] for k, v in out.components.items()}
