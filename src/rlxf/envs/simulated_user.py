"""A simulated user for multi-turn chat: scripted (from the task row) or any callable (e.g. another model).

Scripted: the row's ``turns`` is a list of ``{"user": text, ...reference fields}``. The first user
message is the first observation; after each assistant reply the reply is scored against that turn's
reference fields (``reward``, default ``arithmetic`` with the turn's ``answer``) as the turn's reward,
and the next user message follows; the episode ends after the last turn.

Another user: ``user: my_pkg.users:reply`` names a callable ``(task, history) -> str | None`` (history:
a list of ``(role, text)``); None ends the episode. Per-turn rewards then need the row's ``turns`` too,
or come as 0.

Messages are rendered with ``user_format`` / ``assistant_prefix`` (default: the char model's plain
"user: ...\\nassistant: " chat format); only the new message is tokenized, never the transcript.

``scored: last`` scores only the reply to the script's last message (earlier turns earn 0 and log no
components): a conversation whose earlier turns are working, not answers, such as a judge that solves the
question before it is shown the claim (``data/judge_task.py``, ``protocol: solve_first``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlxf.envs.answer_scorer import AnswerScorer
from rlxf.envs.base import ENVS, StepResult
from rlxf.rewards.registry import import_object


def scripted_user(task: dict, history: list[tuple[str, str]]) -> str | None:
    """The next scripted message of ``task["turns"]``, or None when the script is done."""
    asked = sum(1 for role, _ in history if role == "user")
    turns = task["turns"]
    return turns[asked]["user"] if asked < len(turns) else None


SCORED_TURNS = ("every", "last")


@ENVS.register("simulated_user")
class SimulatedUserEnv:
    def __init__(
        self, user: str = "script", reward: str = "arithmetic", reward_kwargs: dict[str, Any] | None = None,
        user_format: str = "user: {message}\nassistant: ", reply_separator: str = "\n", scored: str = "every",
    ) -> None:
        if scored not in SCORED_TURNS:
            raise ValueError(f"simulated_user: scored must be one of {SCORED_TURNS}, got {scored!r}")
        self.scored = scored
        self.user: Callable = scripted_user if user == "script" else import_object(user)
        self.scorer = AnswerScorer(reward, reward_kwargs)
        self.user_format = user_format
        self.reply_separator = reply_separator
        self.task: dict = {}
        self.history: list[tuple[str, str]] = []

    def _say(self) -> str | None:
        message = self.user(self.task, self.history)
        if message is None:
            return None
        self.history.append(("user", message))
        return self.user_format.format(message=message)

    def reset(self, task: dict) -> str | None:
        self.task, self.history = task, []
        return self._say()

    def step(self, action: str) -> StepResult:
        turn = sum(1 for role, _ in self.history if role == "user") - 1
        self.history.append(("assistant", action))
        turns = self.task.get("turns") or []
        scored = turn < len(turns) and (self.scored == "every" or turn == len(turns) - 1)
        reward, components = self.scorer.score({**self.task, **turns[turn]}, action) if scored else (0.0, {})
        following = self._say()
        if following is None:
            return None, reward, True, {"components": components}
        return self.reply_separator + following, reward, False, {"components": components}
