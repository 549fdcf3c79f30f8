"""A ``verifiers`` environment, run by its own code, its model client pointed at rlxf's endpoint over the policy.

    data: {task: verifiers, task_args: {environment: my_taskset}}   # the tasks (data/verifiers_tasks.py)
    env:  {name: verifiers}                                         # their episodes

Each trajectory is one episode of the row's task (``verifiers.v1.Env.run_episode``: its harness, its
interception server, its tools, its judges; ``Env.serving()`` held for the step's episodes), with a ``ModelContext`` whose client (``EvalClientConfig``)
points at the trajectory's own session of rlxf's OpenAI-compatible endpoint (``serving/``), which records
the token ids it sampled: those are what is trained (``roles/agent_rollout.py``, as for ``openai_agent``),
the environment's and tools' messages between the policy's turns masked. ``rollout.n_samples`` episodes
run per task. The reward is the episode's own score: the sum of its traces' weighted rewards
(``Trace.reward``), each reward and metric logged as a component under its own name.

An episode that fails (its harness, a tool, the model call: ``Episode.ok`` false) is a failed trajectory
(``agent_error``, the reason in ``agent_failure``; ``env.max_failed_steps`` stops a run of them). A
scoring function that raises is not the policy's failure: it stops the run with one ``rlxf:`` line naming
the environment and the task.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from typing import Any

from rlxf.config_error import ConfigError
from rlxf.envs.base import ENVS
from rlxf.envs.openai_agent import AgentFailure, AgentOutcome, OpenAIAgentEnv
from rlxf.errors import RlxfError
from rlxf.rewards.guarded import RewardError
from rlxf.serving.chat_format import CHAT_FORMATS


def task_name(task) -> str:
    data = task.data
    return str(data.name or data.id or f"#{data.idx}")


def scoring_error(episode) -> str | None:
    """The message of a scoring function's failure (verifiers wraps it as ``TaskError: ... scoring: ...``)."""
    for trace in episode.traces:
        for error in trace.errors:
            if error.type == "TaskError" and "scoring" in error.message:
                return error.message
    return None


def episode_error(episode) -> str:
    errors = list(episode.errors) + [e for trace in episode.traces for e in trace.errors]
    if not errors:
        return "the episode did not complete"
    return f"{errors[0].type}: {errors[0].message}".strip()[:300]


def episode_score(episode) -> tuple[float, dict[str, float]]:
    """The episode's reward (its traces' weighted rewards, as verifiers sums them) and each by name."""
    components: dict[str, float] = {}
    several = len(episode.traces) > 1
    for trace in episode.traces:
        prefix = f"{trace.agent.name}/" if several and getattr(trace.agent, "name", None) else ""
        for name, reward in trace.rewards.items():
            if reward is not None:
                components[prefix + name] = float(reward.score)
        for name, value in trace.metrics.items():
            if value is not None:
                components[prefix + name] = float(value)
    return float(sum(trace.reward for trace in episode.traces)), components


@ENVS.register("verifiers")
class VerifiersEnv(OpenAIAgentEnv):
    """Settings of the adapter; it drives its own rollout (``roles/agent_rollout.py``)."""

    def __init__(
        self, timeout_s: float = 300.0, max_concurrent: int = 64, chat_format: str = "plain",
        format_kwargs: dict[str, Any] | None = None, max_wait_s: float = 0.02, host: str = "127.0.0.1",
        model: str = "policy",
    ) -> None:
        if timeout_s <= 0 or max_concurrent < 1:
            raise ConfigError(f"env verifiers needs env.kwargs.timeout_s > 0 and max_concurrent >= 1, got {timeout_s}, {max_concurrent}")
        if chat_format not in CHAT_FORMATS.names():
            raise ConfigError(f"env.kwargs.chat_format {chat_format!r} is not one of {', '.join(CHAT_FORMATS.names())}")
        from rlxf.data.verifiers_tasks import import_verifiers

        self.vf = import_verifiers()  # a recipe naming it without the package: one line, the install command
        self.format_name, self.format_kwargs = chat_format, dict(format_kwargs or {})
        self.max_concurrent, self.max_wait_s, self.host = max_concurrent, max_wait_s, host
        self.timeout_s, self.model = timeout_s, model

    def shared_http(self) -> None:
        return None

    @contextlib.asynccontextmanager
    async def step_scope(self, rows: list[dict]):
        """Each environment of the step's rows serving (``Env.serving()``: its interception server, shared
        toolsets, ``start``/``stop``) while its episodes run: entered once, as ``vf-eval`` does, since the Env
        keeps those resources on itself and concurrent entries would tear down each other's."""
        from rlxf.data.verifiers_tasks import load_environment

        async with contextlib.AsyncExitStack() as stack:
            serving = {}
            for row in rows:
                if "vf_environment" not in row:
                    continue
                env, _ = load_environment(row["vf_environment"], row.get("vf_config"), row.get("vf_path"))
                if id(env) in serving:
                    continue
                serving[id(env)] = env
                try:
                    await stack.enter_async_context(env.serving())
                except Exception as err:  # noqa: BLE001 - the environment's own resources: named, one line
                    raise RlxfError(f"verifiers environment {row['vf_environment']!r} could not start serving: "
                                      f"{type(err).__name__}: {err}"[:500]) from None
            yield

    async def run(self, base_url: str, api_key: str, task: dict, http=None) -> AgentOutcome:
        from rlxf.data.verifiers_tasks import load_environment

        if "vf_environment" not in task:
            raise ConfigError("env verifiers runs the rows of data.task=verifiers (a row without vf_environment)")
        spec = task["vf_environment"]
        env, tasks = load_environment(spec, task.get("vf_config"), task.get("vf_path"))
        vf_task = tasks[int(task["vf_task"])]
        # verifiers reads the client's key from an environment variable: one of its own per session
        key_var = f"RLXF_VF_SESSION_{secrets.token_hex(6).upper()}"
        os.environ[key_var] = api_key
        context = self.vf.ModelContext(model=self.model, client=self.vf.EvalClientConfig(base_url=base_url, api_key_var=key_var))
        try:
            episode = await asyncio.wait_for(env.run_episode(vf_task, context), self.timeout_s)
        except asyncio.TimeoutError:
            return AgentOutcome(0.0, {}, AgentFailure(
                "timeout", f"verifiers environment {spec} task {task_name(vf_task)}: episode still running after timeout_s={self.timeout_s}"))
        except Exception as err:  # noqa: BLE001 - the environment's own failure: a failed trajectory
            return AgentOutcome(0.0, {}, AgentFailure(
                "error", f"verifiers environment {spec} task {task_name(vf_task)}: {type(err).__name__}: {err}"[:400]))
        finally:
            os.environ.pop(key_var, None)
        raised = scoring_error(episode)
        if raised is not None:
            raise RewardError(f"verifiers environment {spec!r}, task {task_name(vf_task)}: a scoring function raised: {raised}"[:500])
        if not episode.ok:
            return AgentOutcome(0.0, {}, AgentFailure(
                "error", f"verifiers environment {spec} task {task_name(vf_task)}: {episode_error(episode)}"))
        reward, components = episode_score(episode)
        return AgentOutcome(reward, components)
