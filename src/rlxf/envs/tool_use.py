"""Tool calling: the policy may call a tool before it answers; the result comes back as the next observation.

Format (documented in docs/environments.md). A turn that ends with ``@NAME(ARGUMENTS)`` is a tool call:

    policy:      @calculator(347*582)</s>
    environment: =201954\n                      (``=`` + the tool's output + newline; errors: ``=error: ...``)
    policy:      201954</s>                      (a turn without a call is the final answer)

Aliases map short names to tools (``{calc: calculator}``): a tiny model writes fewer characters. The
final answer is scored by a reward (``reward``, default ``arithmetic``); each valid tool call can earn
``call_reward`` (default 0). After ``max_calls`` calls the next turn is scored as the answer whatever it
says. Tools run in a worker thread (``step`` is async), so the trajectories of a turn call them in parallel.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from rlxf.envs.answer_scorer import AnswerScorer
from rlxf.envs.base import ENVS, StepResult
from rlxf.envs.tools import TOOLS, ToolError

TOOL_CALL = re.compile(r"@([A-Za-z_]\w*)\((.*)\)\s*$", re.DOTALL)


def parse_tool_call(action: str) -> tuple[str, str] | None:
    """(tool name, arguments) when the turn ends with ``@name(arguments)``, else None."""
    match = TOOL_CALL.search(action)
    return (match.group(1), match.group(2)) if match else None


def run_tool(name: str, arguments: str, tools: dict[str, str]) -> str:
    """The observation for a call: ``=result\\n`` or ``=error: ...\\n`` (never raises)."""
    if name not in tools:
        return f"=error: unknown tool {name}\n"
    try:
        return f"={TOOLS.get(tools[name])(arguments).rstrip()}\n"
    except ToolError as err:
        return f"=error: {err}\n"


@ENVS.register("tool_use")
class ToolUseEnv:
    def __init__(
        self, tools: list[str] | None = None, aliases: dict[str, str] | None = None, reward: str = "arithmetic",
        reward_kwargs: dict[str, Any] | None = None, call_reward: float = 0.0, max_calls: int = 3,
    ) -> None:
        names = tools or ["calculator"]
        self.tools = {name: name for name in names} | dict(aliases or {})
        for target in self.tools.values():
            TOOLS.get(target)  # fail at start-up on an unknown tool
        self.scorer = AnswerScorer(reward, reward_kwargs)
        self.call_reward = call_reward
        self.max_calls = max_calls
        self.task: dict = {}
        self.calls = 0

    def reset(self, task: dict) -> None:
        self.task, self.calls = task, 0
        return None

    async def step(self, action: str) -> StepResult:
        call = parse_tool_call(action)
        if call is not None and self.calls < self.max_calls:
            self.calls += 1
            observation = await asyncio.to_thread(run_tool, *call, self.tools)
            valid = not observation.startswith("=error")
            return observation, self.call_reward * valid, False, {"tool": call[0], "tool_ok": valid}
        score, components = self.scorer.score(self.task, action)
        return None, score, True, {"components": {**components, "tool_calls": float(self.calls)}}
