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
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from rlxf.awaitables import gather
from rlxf.batch import TrajectoryBatch, left_pad
from rlxf.data.prompt_tokens import encode_prompts
from rlxf.envs.base import Environment, Observation, env_factory
from rlxf.roles.rollout import RolloutRole
from rlxf.rollout.sampling import SamplingParams


@dataclass
class Trajectory:
    row: dict
    group: int
    env: Environment
    prompt: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)  # the response: policy turns and observations
    log_probs: list[float] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
    turn_rewards: list[float] = field(default_factory=list)
    components: dict = field(default_factory=dict)
    done: bool = False
    env_done: bool = False

    def append(self, ids: list[int], log_probs: list[float] | None) -> None:
        """Policy tokens (with their log-probs) or observation tokens (``log_probs=None``)."""
        if log_probs is not None:
            self.turn_spans.append((len(self.tokens), len(self.tokens) + len(ids)))
        self.tokens += ids
        self.log_probs += log_probs if log_probs is not None else [0.0] * len(ids)
        self.loss_mask += [int(log_probs is not None)] * len(ids)


class EnvRolloutRole(RolloutRole):
    def __init__(self, engine, tokenizer, chat_template: bool, max_prompt_tokens: int, env_config) -> None:
        super().__init__(engine, tokenizer, chat_template, max_prompt_tokens)
        self.make_env = env_factory(env_config.name, env_config.kwargs)
        self.max_turns = env_config.max_turns
        self.max_total_tokens = env_config.max_total_tokens

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

    def _policy_turn(self, active: list[Trajectory], params: SamplingParams, generator) -> list[str]:
        room = max(self.max_total_tokens - len(t.tokens) for t in active)
        turn_params = SamplingParams(
            n=1, temperature=params.temperature, top_p=params.top_p, top_k=params.top_k,
            max_new_tokens=min(params.max_new_tokens, room),
        )
        gen = self.engine.generate([t.prompt + t.tokens for t in active], turn_params, generator)
        actions = []
        for row, t in enumerate(active):
            length = min(int(gen.response_mask[row].sum()), self.max_total_tokens - len(t.tokens))
            ids = gen.response_ids[row, :length].tolist()
            t.append(ids, gen.log_probs[row, :length].tolist())
            actions.append(self.tokenizer.decode(ids, skip_special_tokens=True))
        return actions

    def _environment_turn(self, active: list[Trajectory], actions: list[str], last_turn: bool) -> None:
        results = gather(t.env.step(action) for t, action in zip(active, actions))
        for t, (observation, reward, done, info) in zip(active, results):
            t.turn_rewards.append(float(reward))
            t.components = dict((info or {}).get("components", t.components))
            t.env_done = bool(done)
            t.done = t.env_done or last_turn
            if not t.done:
                obs_ids = self.encode_observation(observation)
                t.append(obs_ids[: max(0, self.max_total_tokens - len(t.tokens))], None)
                t.done = len(t.tokens) >= self.max_total_tokens

    def generate(
        self, rows: list[dict], params: SamplingParams, generator: torch.Generator | None = None,
        first_group: int = 0,
    ) -> TrajectoryBatch:
        trajectories = [Trajectory(row, i, self.make_env()) for i, row in enumerate(rows) for _ in range(params.n)]
        self._first_prompts(trajectories)
        version = self.engine.version
        for turn in range(self.max_turns):
            active = [t for t in trajectories if not t.done]
            if not active:
                break
            actions = self._policy_turn(active, params, generator)
            self._environment_turn(active, actions, last_turn=turn == self.max_turns - 1)
        return self._to_batch(trajectories, first_group, version)

    def _to_batch(self, trajectories: list[Trajectory], first_group: int, version: int) -> TrajectoryBatch:
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
            policy_version=loss_mask * version,
            truncated=torch.tensor([not t.env_done for t in trajectories]),
            metadata=metadata,
        )
