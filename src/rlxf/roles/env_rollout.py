"""Multi-turn rollout, token-in/token-out: the policy and an environment take turns on one token sequence.

For each trajectory (one environment instance each): ``reset(row)`` gives the prompt; then, turn by
turn, the engine continues the trajectory's token sequence (the prompt plus every turn so far — the
ids themselves, never a re-tokenized transcript), the new tokens are decoded *on their own* into the
action, ``step(action)`` answers, and the observation's tokens are appended. Policy tokens carry the
engine's log-probs and loss mask 1; observation tokens carry loss mask 0 and log-prob 0.

A trajectory ends when the environment says ``done``, after ``max_turns`` policy turns, or when its
response (all turns and observations) reaches ``max_total_tokens``; ``truncated`` marks the last two.
Metadata per row: the row's fields, ``stopped`` (ended by the environment), ``turn_rewards`` (one per
policy turn), ``env_reward`` (their sum), ``env_components`` (the last step's ``info["components"]``),
``turns``, and ``turn_spans`` (``[start, end)`` response positions of each policy turn).

No turn barrier (``env.turn_barrier: false``): each trajectory advances when its own environment
answers; its ``step`` runs as a task (``env.max_concurrent_steps`` at a time) while the engine decodes
whoever is ready, so a slow tool call delays only its own trajectory. The engine's turn decoding
(``rollout/turn_decoding.py``) keeps each trajectory's KV cache across turns where it can
(``env.keep_kv_cache``, the torch engine's Llama-family decoder: ``rollout/turn_sessions.py``), so a turn
prefills only its new tokens; elsewhere each turn re-prefills the transcript. A synchronous ``step``
runs on the event loop (it holds everything up while it runs): write slow tools as ``async def``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import torch

from rlxf.awaitables import gather, maybe_await, run_coroutine
from rlxf.batch import TrajectoryBatch, left_pad
from rlxf.data.prompt_tokens import encode_prompts
from rlxf.envs.base import Environment, Observation, env_factory
from rlxf.roles.rollout import RolloutRole
from rlxf.rollout.sampling import SamplingParams
from rlxf.rollout.turn_decoding import GenerateTurns, TurnDecoding


@dataclass
class Trajectory:
    row: dict
    group: int
    env: Environment
    prompt: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)  # the response: policy turns and observations
    log_probs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)  # policy version of each token (0 on observations)
    loss_mask: list[int] = field(default_factory=list)
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
    turn_rewards: list[float] = field(default_factory=list)
    components: dict = field(default_factory=dict)
    done: bool = False
    env_done: bool = False
    key: int = 0  # the trajectory's index in the batch

    def append(self, ids: list[int], log_probs: list[float] | None, versions: list[int] | None = None) -> None:
        """Policy tokens (with their log-probs and versions) or observation tokens (``log_probs=None``)."""
        if log_probs is not None:
            self.turn_spans.append((len(self.tokens), len(self.tokens) + len(ids)))
        self.tokens += ids
        self.log_probs += log_probs if log_probs is not None else [0.0] * len(ids)
        self.versions += versions if log_probs is not None else [0] * len(ids)
        self.loss_mask += [int(log_probs is not None)] * len(ids)


class EnvRolloutRole(RolloutRole):
    def __init__(self, engine, tokenizer, chat_template: bool, max_prompt_tokens: int, env_config) -> None:
        super().__init__(engine, tokenizer, chat_template, max_prompt_tokens)
        self.make_env = env_factory(env_config.name, env_config.kwargs)
        self.max_turns = env_config.max_turns
        self.max_total_tokens = env_config.max_total_tokens
        self.keep_kv_cache = env_config.keep_kv_cache
        self.turn_barrier = env_config.turn_barrier
        self.max_concurrent_steps = env_config.max_concurrent_steps

    def encode_observation(self, observation: Observation) -> list[int]:
        if not observation:
            return []
        if isinstance(observation, str):
            return self.tokenizer(observation, add_special_tokens=False)["input_ids"]
        return list(observation)

    def _first_prompts(self, trajectories: list[Trajectory]) -> None:
        observations = gather(t.env.reset(t.row) for t in trajectories)
        for t, obs in zip(trajectories, observations):
            t.prompt = (self.encode_observation(obs) if obs
                        else encode_prompts([t.row], self.tokenizer, self.chat_template, self.max_prompt_tokens)[0])
            if len(t.prompt) > self.max_prompt_tokens:
                raise ValueError(f"first observation of {len(t.prompt)} tokens exceeds data.max_prompt_tokens")

    def _budget(self, t: Trajectory, params: SamplingParams) -> int:
        return min(params.max_new_tokens, self.max_total_tokens - len(t.tokens))

    def _turn_decoding(self, params: SamplingParams) -> TurnDecoding:
        """The engine's turn sessions (KV caches kept across turns) where it has them, else re-prefill."""
        open_sessions = getattr(self.engine, "open_turn_sessions", None)
        sessions = open_sessions(params, keep_cache=self.keep_kv_cache) if open_sessions is not None else None
        return sessions if sessions is not None else GenerateTurns(self.engine, params)

    async def _environment_turn(self, t: Trajectory, action: str, limit: asyncio.Semaphore,
                                turns: TurnDecoding, ready: list[Trajectory]) -> None:
        async with limit:
            observation, reward, done, info = await maybe_await(t.env.step(action))
        t.turn_rewards.append(float(reward))
        t.components = dict((info or {}).get("components", t.components))
        t.env_done = bool(done)
        t.done = t.env_done or len(t.turn_spans) >= self.max_turns
        if not t.done:
            obs_ids = self.encode_observation(observation)[: max(0, self.max_total_tokens - len(t.tokens))]
            t.append(obs_ids, None)
            t.done = len(t.tokens) >= self.max_total_tokens
            turns.append(t.key, obs_ids)
        if t.done:
            turns.close(t.key)
        else:
            ready.append(t)

    async def _run(self, trajectories: list[Trajectory], params: SamplingParams, generator) -> None:
        """Every trajectory advances when its own environment answers: the ready ones join the engine's
        decoding (between any two decode steps where the engine batches continuously), a turn that ends
        starts its environment's ``step`` at once (at most ``max_concurrent_steps`` at a time), and the
        engine keeps decoding the others meanwhile. ``turn_barrier`` restores lockstep turns: nobody
        joins until every environment has answered and every turn has ended."""
        turns = self.last_turns = self._turn_decoding(params)  # kept for its counters (``prefilled``)
        limit = asyncio.Semaphore(self.max_concurrent_steps)
        ready, stepping = list(trajectories), set()
        for t in trajectories:
            turns.open(t.key, t.prompt)
        while ready or stepping or turns.busy:
            if ready and not (self.turn_barrier and (stepping or turns.busy)):
                for t in sorted(ready, key=lambda t: t.key):  # a fixed order: the same noise for the same rows
                    turns.join(t.key, self._budget(t, params))
                ready.clear()
            if turns.busy:
                for out in turns.advance(generator):
                    t = trajectories[out.key]
                    t.append(out.ids, out.log_probs, out.versions)
                    action = self.tokenizer.decode(out.ids, skip_special_tokens=True)
                    stepping.add(asyncio.create_task(self._environment_turn(t, action, limit, turns, ready)))
                await asyncio.sleep(0)  # the environments run while the engine is between decode steps
            elif stepping:
                await asyncio.wait(stepping, return_when=asyncio.FIRST_COMPLETED)
            for task in [task for task in stepping if task.done()]:
                stepping.discard(task)
                task.result()  # an environment that raised stops the rollout with its error

    def generate(
        self, rows: list[dict], params: SamplingParams, generator: torch.Generator | None = None,
        first_group: int = 0,
    ) -> TrajectoryBatch:
        samples = [(i, row) for i, row in enumerate(rows) for _ in range(params.n)]
        trajectories = [Trajectory(row, i, self.make_env(), key=key) for key, (i, row) in enumerate(samples)]
        self._first_prompts(trajectories)
        run_coroutine(self._run(trajectories, params, generator))
        return self._to_batch(trajectories, first_group)

    def _to_batch(self, trajectories: list[Trajectory], first_group: int) -> TrajectoryBatch:
        pad = self.tokenizer.pad_token_id
        prompt_ids, prompt_mask = left_pad([t.prompt for t in trajectories], pad, torch.device("cpu"))
        width = max(1, max(len(t.tokens) for t in trajectories))

        def right_pad(values: list[list], fill, dtype) -> torch.Tensor:
            return torch.tensor([v + [fill] * (width - len(v)) for v in values], dtype=dtype)

        response_ids = right_pad([t.tokens for t in trajectories], pad, torch.long)
        response_mask = right_pad([[1] * len(t.tokens) for t in trajectories], 0, torch.long)
        loss_mask = right_pad([t.loss_mask for t in trajectories], 0, torch.long)
        metadata = [
            {**{k: v for k, v in t.row.items() if k not in ("prompt", "messages")},
             "stopped": t.env_done, "turn_rewards": t.turn_rewards, "env_reward": sum(t.turn_rewards),
             "env_components": t.components, "turns": len(t.turn_spans), "turn_spans": t.turn_spans}
            for t in trajectories
        ]
        return TrajectoryBatch(
            prompt_ids=prompt_ids, prompt_mask=prompt_mask, response_ids=response_ids,
            response_mask=response_mask, loss_mask=loss_mask,
            group_ids=torch.tensor([t.group for t in trajectories]) + first_group,
            rollout_log_probs=right_pad([t.log_probs for t in trajectories], 0.0, torch.float32),
            policy_version=right_pad([t.versions for t in trajectories], 0, torch.long),
            truncated=torch.tensor([not t.env_done for t in trajectories]),
            metadata=metadata,
        )
