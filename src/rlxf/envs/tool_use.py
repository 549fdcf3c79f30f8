"""Tool calling: the policy may call a tool before it answers; the result comes back as the next observation.

Format (documented in docs/environments.md). A turn that ends with ``@NAME(ARGUMENTS)`` is a tool call:

    policy:      @calculator(347*582)</s>
    environment: =201954\n                      (``=`` + the tool's output + newline; errors: ``=error: ...``)
    policy:      201954</s>                      (a turn without a call is the final answer)

``observation`` formats what comes back (``{result}``: the tool's output or ``error: ...``): the default is the
line above; a chat model's recipe wraps it in its template's turns instead, e.g. SmolLM2's
``"\\n<|im_start|>tool\\n{result}<|im_end|>\\n<|im_start|>assistant\\n"`` (the policy's turn already ended
with ``<|im_end|>``), so the answer turn opens as the template would open it.

Aliases map short names to tools (``{calc: calculator}``): a tiny model writes fewer characters. The
final answer is scored by a reward (``reward``, default ``arithmetic``); each valid tool call can earn
``call_reward`` (default 0). After ``max_calls`` calls the next turn is scored as the answer whatever it
says. Tools run in a worker thread (``step`` is async), so the trajectories of a turn call them in parallel.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from rlxf.data.tool_arithmetic import OBSERVATION, check_observation, tool_observation
from rlxf.envs.answer_scorer import AnswerScorer
from rlxf.envs.base import ENVS, StepResult
from rlxf.envs.tools import TOOLS, ToolError

TOOL_CALL = re.compile(r"@([A-Za-z_]\w*)\((.*)\)\s*$", re.DOTALL)


def parse_tool_call(action: str) -> tuple[str, str] | None:
    """(tool name, arguments) when the turn ends with ``@name(arguments)``, else None."""
    match = TOOL_CALL.search(action)
    return (match.group(1), match.group(2)) if match else None


def run_tool(name: str, arguments: str, tools: dict[str, str]) -> tuple[str, bool]:
    """(the tool's output or ``error: ...``, whether it ran); never raises."""
    if name not in tools:
        return f"error: unknown tool {name}", False
    try:
        return TOOLS.get(tools[name])(arguments).rstrip(), True
    except ToolError as err:
        return f"error: {err}", False


@ENVS.register("tool_use")
class ToolUseEnv:
    def __init__(
        self, tools: list[str] | None = None, aliases: dict[str, str] | None = None, reward: str = "arithmetic",
        reward_kwargs: dict[str, Any] | None = None, call_reward: float = 0.0, max_calls: int = 3,
        observation: str = OBSERVATION,
    ) -> None:
        check_observation(observation, "env.kwargs.observation")
        names = tools or ["calculator"]
        self.tools = {name: name for name in names} | dict(aliases or {})
        for target in self.tools.values():
            TOOLS.get(target)  # fail at start-up on an unknown tool
        self.scorer = AnswerScorer(reward, reward_kwargs)
        self.call_reward = call_reward
        self.max_calls = max_calls
        self.observation = observation
        self.task: dict = {}
        self.calls = 0

    def reset(self, task: dict) -> None:
        self.task, self.calls = task, 0
        return None

    async def step(self, action: str) -> StepResult:
        call = parse_tool_call(action)
        if call is not None and self.calls < self.max_calls:
            self.calls += 1
            result, valid = await asyncio.to_thread(run_tool, *call, self.tools)
            observation = tool_observation(self.observation, result)
            return observation, self.call_reward * valid, False, {"tool": call[0], "tool_ok": valid}
        score, components = self.scorer.score(self.task, action)
        return None, score, True, {"components": {**components, "tool_calls": float(self.calls)}}
