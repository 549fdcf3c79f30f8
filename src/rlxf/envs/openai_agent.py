"""Any agent program as the environment: it talks to the policy through an OpenAI-compatible endpoint.

``env: {name: openai_agent, kwargs: {...}}`` runs one agent per trajectory, all of a step at once
(``max_concurrent`` at most), each against its own session of the endpoint (``serving/``):

* ``agent: my_pkg.agents:solve`` — a function ``(client, task) -> result``; ``client`` is an
  ``openai.OpenAI`` (``openai.AsyncOpenAI`` for an ``async def``) already pointed at the session (its
  ``base_url`` and ``api_key`` are the session's), ``task`` the dataset row. It runs on a thread of its own
  (an ``async def`` on the rollout's event loop).
* ``command: [python, my_agent.py]`` — a subprocess per task, given ``OPENAI_BASE_URL`` and
  ``OPENAI_API_KEY`` in its environment (which the ``openai`` client reads by itself) and the task row as
  JSON on stdin; its result is the last line of its stdout, as JSON.

The result: a number (the reward), ``{"reward": x, "components": {...}}``, or the agent's answer (a text,
or ``{"answer": text}``) which the task's verifier ``reward`` (default ``arithmetic``) scores as it would
score a single-turn response. An agent that raises, exits non-zero, or returns something else is a
failure (component ``agent_error``); one still running after ``timeout_s`` is cancelled (a function: its
session refuses its further requests; a subprocess: killed) and is a failure too (``agent_timeout``).
A failed trajectory keeps what the policy generated and scores 0; the reason is in the metadata
(``agent_failure``) and one ``rlxf:`` line per step tells how many failed and why.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import shlex
import signal
import threading
from dataclasses import dataclass
from typing import Any

from rlxf.config_error import ConfigError
from rlxf.envs.answer_scorer import AnswerScorer
from rlxf.envs.base import ENVS
from rlxf.errors import MissingPackageError
from rlxf.rewards.registry import import_object
from rlxf.serving.chat_format import CHAT_FORMATS, ChatFormat


class AgentFailure(Exception):
    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind, self.reason = kind, reason  # kind: "timeout" or "error"


@dataclass
class AgentOutcome:
    reward: float
    components: dict[str, float]
    failure: AgentFailure | None = None
    turn_rewards: list[float] | None = None  # one per policy turn (an environment that rewards each step)


def _thread_result(fn, *args) -> asyncio.Future:
    """``fn(*args)`` on a daemon thread of its own: a hung agent is abandoned, never joined."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def settle(value, error) -> None:
        if not future.done():
            future.set_exception(error) if error is not None else future.set_result(value)

    def work() -> None:
        try:
            value, error = fn(*args), None
        except BaseException as err:  # noqa: BLE001 - handed to the waiting coroutine
            value, error = None, err
        try:
            loop.call_soon_threadsafe(settle, value, error)
        except RuntimeError:  # the rollout's loop is gone: nobody waits for this agent any more
            pass

    threading.Thread(target=work, name="rlxf-agent", daemon=True).start()
    return future


def _describe(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}".strip()[:300]


def _openai():
    try:
        import openai
    except ImportError:
        raise MissingPackageError("env openai_agent with an agent function needs the openai client: pip install openai") from None
    return openai


class FunctionAgent:
    def __init__(self, dotted: str, timeout_s: float) -> None:
        self.name = dotted
        try:
            self.fn = import_object(dotted)
        except ValueError as err:
            raise ConfigError(f"env.kwargs.agent: {err}") from None
        if not callable(self.fn):
            raise ConfigError(f"env.kwargs.agent {dotted!r} is not a function")
        self.timeout_s = timeout_s

    def shared_http(self):
        """One HTTP connection pool for a step's synchronous agents (a client each would build its own)."""
        if inspect.iscoroutinefunction(self.fn):
            return None
        return _openai().DefaultHttpxClient(timeout=self.timeout_s)

    async def run(self, base_url: str, api_key: str, task: dict, http=None) -> Any:
        openai = _openai()
        asynchronous = inspect.iscoroutinefunction(self.fn)
        client_cls = openai.AsyncOpenAI if asynchronous else openai.OpenAI
        client = client_cls(base_url=base_url, api_key=api_key, max_retries=0, timeout=self.timeout_s,
                            **({"http_client": http} if http is not None else {}))
        call = self.fn(client, dict(task)) if asynchronous else _thread_result(self.fn, client, dict(task))
        try:
            return await asyncio.wait_for(call, self.timeout_s)
        except asyncio.TimeoutError:
            raise AgentFailure("timeout", f"agent {self.name} still running after timeout_s={self.timeout_s}") from None
        except AgentFailure:
            raise
        except Exception as err:  # noqa: BLE001 - the agent's own failure, counted
            raise AgentFailure("error", f"agent {self.name} raised {_describe(err)}") from None


class CommandAgent:
    def __init__(self, command: str | list[str], timeout_s: float) -> None:
        self.argv = shlex.split(command) if isinstance(command, str) else [str(c) for c in command]
        if not self.argv:
            raise ConfigError("env.kwargs.command is empty")
        self.name = " ".join(self.argv)
        self.timeout_s = timeout_s

    def shared_http(self) -> None:
        return None

    async def run(self, base_url: str, api_key: str, task: dict, http=None) -> Any:
        env = {**os.environ, "OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": api_key}
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=env, start_new_session=True)
        except OSError as err:
            raise AgentFailure("error", f"agent command {self.name!r} could not start: {err}") from None
        try:
            out, err = await asyncio.wait_for(proc.communicate(json.dumps(task).encode()), self.timeout_s)
        except asyncio.TimeoutError:
            with _quiet():
                os.killpg(proc.pid, signal.SIGKILL)  # its own session: the agent's children go too
            await proc.wait()
            raise AgentFailure("timeout", f"agent {self.name!r} still running after timeout_s={self.timeout_s}") from None
        if proc.returncode != 0:
            tail = err.decode(errors="replace").strip().splitlines()[-1:] or [""]
            raise AgentFailure("error", f"agent {self.name!r} exited with status {proc.returncode}: {tail[0][:300]}")
        lines = [line for line in out.decode(errors="replace").splitlines() if line.strip()]
        try:
            return json.loads(lines[-1])
        except (IndexError, json.JSONDecodeError):
            raise AgentFailure("error", f"agent {self.name!r} did not print a JSON result as its last line") from None


class _quiet:
    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb) -> bool:
        return kind is not None and issubclass(kind, ProcessLookupError)


@ENVS.register("openai_agent")
class OpenAIAgentEnv:
    """Settings of an agent environment; it drives its own rollout (``roles/agent_rollout.py``)."""

    rollout_role = "rlxf.roles.agent_rollout:AgentRolloutRole"

    def __init__(
        self, agent: str | None = None, command: str | list[str] | None = None, reward: str = "arithmetic",
        reward_kwargs: dict[str, Any] | None = None, timeout_s: float = 60.0, max_concurrent: int = 64,
        chat_format: str = "plain", format_kwargs: dict[str, Any] | None = None, max_wait_s: float = 0.02,
        host: str = "127.0.0.1",
    ) -> None:
        if (agent is None) == (command is None):
            raise ConfigError("env openai_agent needs exactly one of env.kwargs.agent (module:function) or env.kwargs.command")
        if timeout_s <= 0 or max_concurrent < 1:
            raise ConfigError(f"env openai_agent needs env.kwargs.timeout_s > 0 and max_concurrent >= 1, got {timeout_s}, {max_concurrent}")
        self.runner = FunctionAgent(agent, timeout_s) if agent is not None else CommandAgent(command, timeout_s)
        self.scorer = AnswerScorer(reward, reward_kwargs)
        if chat_format not in CHAT_FORMATS.names():
            raise ConfigError(f"env.kwargs.chat_format {chat_format!r} is not one of {', '.join(CHAT_FORMATS.names())}")
        self.format_name, self.format_kwargs = chat_format, dict(format_kwargs or {})
        self.max_concurrent, self.max_wait_s, self.host = max_concurrent, max_wait_s, host

    def make_format(self, tokenizer) -> ChatFormat:
        try:
            return CHAT_FORMATS.get(self.format_name)(tokenizer, **self.format_kwargs)
        except (TypeError, ValueError) as err:
            raise ConfigError(f"env.kwargs.format_kwargs of chat format {self.format_name!r}: {err}") from None

    def reset(self, task: dict):
        raise TypeError("env openai_agent runs agent programs; it needs its own rollout role (loop: rl)")

    step = reset

    def score(self, task: dict, result: Any) -> tuple[float, dict[str, float]]:
        """The agent's result -> (reward, components); AgentFailure when it is none of the documented shapes."""
        if isinstance(result, (int, float)) and not isinstance(result, bool):
            return float(result), {}
        if isinstance(result, dict) and "reward" in result:
            try:
                return float(result["reward"]), {k: float(v) for k, v in (result.get("components") or {}).items()}
            except (TypeError, ValueError):
                raise AgentFailure("error", f"agent result {result!r}: reward and components must be numbers") from None
        if isinstance(result, dict) and "answer" in result:
            result = result["answer"]
        if isinstance(result, str):
            return self.scorer.score(task, result)
        raise AgentFailure("error", f"agent returned {type(result).__name__} {str(result)[:80]!r}; expected a number, "
                                    "an answer text, {'reward': x} or {'answer': text}")

    def shared_http(self):
        return self.runner.shared_http()

    async def run(self, base_url: str, api_key: str, task: dict, http=None) -> AgentOutcome:
        try:
            result = await self.runner.run(base_url, api_key, task, http)
            reward, components = self.score(task, result)
        except AgentFailure as failure:
            return AgentOutcome(0.0, {}, failure)
        return AgentOutcome(reward, components)
