"""Rollouts whose environment is an agent program talking to the policy over the OpenAI API (``env: openai_agent``).

The agent drives: it asks, the endpoint (``serving/openai_app.py``, started on first use on a free loopback
port and kept for the role's life) batches the questions of all running agents into the engine and
records every session's token ids and log-probs as generated. When the agents of a step are done (or
cancelled at ``timeout_s``), each session's trained segment becomes one trajectory in the very layout of
the built-in environments (``EnvRolloutRole._to_batch``): the prompt is what preceded the policy's first
turn; the response is the policy's turns (loss mask 1, their sampling log-probs) and what the agent said in
between (loss mask 0, log-prob 0); ``turn_spans`` mark the policy's turns and ``turn_rewards`` hold the
agent's reward on its last turn (0 before), or one per turn where the outcome has them (``env: openenv``). A session in which the policy never spoke has the row's prompt,
an empty response and reward 0: nothing of the policy's to credit.

Components per trajectory (logged as reward components by ``reward: env``): ``agent_error`` and
``agent_timeout`` (1 for a failed agent), ``history_mismatch`` (how often the agent's transcript did not
extend what was recorded: ``serving/session.py``), ``dropped_tokens`` (policy tokens of the segments left
out), ``requests``, plus the verifier's own (e.g. ``correct``). Metadata adds ``agent_session`` (the session id,
the middle part of its API key) and, for a failed agent, ``agent_failure`` (why).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter

import torch

from rlxf.awaitables import run_coroutine
from rlxf.batch import TrajectoryBatch
from rlxf.config_error import ConfigError
from rlxf.data.prompt_tokens import encode_prompts
from rlxf.envs.openai_agent import AgentOutcome, OpenAIAgentEnv
from rlxf.roles.env_rollout import EnvRolloutRole, Trajectory
from rlxf.rollout.sampling import SamplingParams
from rlxf.serving.openai_app import Endpoint, RunningEndpoint
from rlxf.serving.session import Budget, Session

log = logging.getLogger(__name__)


class AgentRolloutRole(EnvRolloutRole):
    def __init__(self, engine, tokenizer, chat_template: bool, max_prompt_tokens: int, env_config) -> None:
        super().__init__(engine, tokenizer, chat_template, max_prompt_tokens, env_config)
        try:
            self.agent: OpenAIAgentEnv = self.make_env()
        except TypeError as err:  # an unknown or missing constructor argument
            raise ConfigError(f"env.kwargs of openai_agent: {err}") from None
        self.chat_format = self.agent.make_format(tokenizer)
        self.server: RunningEndpoint | None = None
        self.last_failures: Counter = Counter()

    @property
    def endpoint(self) -> Endpoint:
        if self.server is None:
            endpoint = Endpoint(self.engine, self.tokenizer, self.chat_format, max_wait_s=self.agent.max_wait_s)
            self.server = RunningEndpoint(endpoint, host=self.agent.host)
        return self.server.endpoint

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def generate(
        self, rows: list[dict], params: SamplingParams, generator: torch.Generator | None = None,
        first_group: int = 0,
    ) -> TrajectoryBatch:
        endpoint = self.endpoint
        endpoint.batcher.params, endpoint.batcher.generator = params, generator
        budget = Budget(self.max_prompt_tokens, self.max_total_tokens, self.max_turns, params.max_new_tokens)
        jobs = [(group, row, endpoint.open_session(budget)) for group, row in enumerate(rows) for _ in range(params.n)]
        version = self.engine.version
        try:
            outcomes = run_coroutine(self._run_all(endpoint, jobs))
        finally:
            for _, _, session in jobs:
                endpoint.close_session(session)
        trajectories = [self._trajectory(row, group, session, outcome, version)
                        for (group, row, session), outcome in zip(jobs, outcomes)]
        for _, _, session in jobs:
            endpoint.forget(session)
        self._report(outcomes)
        return self._to_batch(trajectories, first_group)

    async def _run_all(self, endpoint: Endpoint, jobs: list[tuple[int, dict, Session]]) -> list[AgentOutcome]:
        slots = asyncio.Semaphore(self.agent.max_concurrent)
        shared = self.agent.shared_http()  # one connection pool for the step's agents

        async def one(row: dict, session: Session) -> AgentOutcome:
            async with slots:
                session.running = True
                outcome = await self.agent.run(endpoint.base_url(session), session.key, row, shared)
                endpoint.close_session(session)  # a cancelled agent's later requests are refused
                return outcome

        # what the step's agents share while they run (env verifiers: each environment's serving resources)
        scope = getattr(self.agent, "step_scope", None)
        try:
            async with scope([row for _, row, _ in jobs]) if scope is not None else contextlib.nullcontext():
                return list(await asyncio.gather(*(one(row, session) for _, row, session in jobs)))
        finally:
            if shared is not None:
                shared.close()

    def _trajectory(self, row: dict, group: int, session: Session, outcome: AgentOutcome, version: int) -> Trajectory:
        t = Trajectory({**row, "agent_session": session.sid}, group, env=None)
        segment, dropped = session.trained_segment()
        if segment is None:  # the policy was never asked
            t.prompt = encode_prompts([row], self.tokenizer, self.chat_template, self.max_prompt_tokens)[0]
        else:
            t.prompt = list(segment.prompt)
            for piece in segment.pieces:
                versions = None if piece.log_probs is None else [version] * len(piece.ids)
                t.append(piece.ids, piece.log_probs, versions)
        failed = outcome.failure is not None
        reward = 0.0 if failed or not t.turn_spans else outcome.reward
        t.turn_rewards = [0.0] * len(t.turn_spans)
        if not failed and outcome.turn_rewards is not None and len(outcome.turn_rewards) == len(t.turn_spans):
            t.turn_rewards = [float(r) for r in outcome.turn_rewards]  # each step's reward on its own turn
        elif t.turn_rewards:
            t.turn_rewards[-1] = reward
        t.components = {
            **({} if failed else outcome.components),
            "agent_error": float(failed and outcome.failure.kind == "error"),
            "agent_timeout": float(failed and outcome.failure.kind == "timeout"),
            "history_mismatch": float(session.mismatches), "dropped_tokens": float(dropped),
            "requests": float(session.requests),
        }
        t.env_done = not failed and not session.truncated
        if failed:
            t.row["agent_failure"] = outcome.failure.reason
        return t

    def _report(self, outcomes: list[AgentOutcome]) -> None:
        failures = [o.failure for o in outcomes if o.failure is not None]
        self.last_failures = Counter(f.kind for f in failures)
        if failures:
            kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(self.last_failures.items()))
            log.warning("warning: %d of %d agents failed (%s), scored 0; e.g. %s", len(failures), len(outcomes),
                        kinds, failures[0].reason)
