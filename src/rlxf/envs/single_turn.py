"""The trivial environment: one turn, scored by a reward. ``env: {name: single_turn, kwargs: {reward: math}}``."""

from __future__ import annotations

from typing import Any

from rlxf.envs.answer_scorer import AnswerScorer
from rlxf.envs.base import ENVS, StepResult


@ENVS.register("single_turn")
class SingleTurnEnv:
    def __init__(self, reward: str = "arithmetic", reward_kwargs: dict[str, Any] | None = None) -> None:
        self.scorer = AnswerScorer(reward, reward_kwargs)
        self.task: dict = {}

    def reset(self, task: dict) -> None:
        self.task = task
        return None

    def step(self, action: str) -> StepResult:
        score, components = self.scorer.score(self.task, action)
        return None, score, True, {"components": components}
