"""ReMax's baseline: the reward of the greedy (argmax) response to each prompt.

Estimators named in ``algos.config.GREEDY_BASELINE_ESTIMATORS`` get ``batch.baseline_rewards`` filled: one greedy
rollout per prompt, scored by the same reward (and the same overlong shaping) as the samples.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from rlxf.algos import AlgorithmConfig
from rlxf.batch import TrajectoryBatch
from rlxf.loops.overlong import shape_overlong_rewards
from rlxf.roles.reward import RewardRole
from rlxf.roles.rollout import RolloutRole
from rlxf.rollout.sampling import SamplingParams


def needs_greedy_baseline(algo: AlgorithmConfig) -> bool:
    return algo.needs_greedy_baseline


def greedy_baseline_rewards(
    rollout: RolloutRole, reward: RewardRole, algo: AlgorithmConfig, rows: list[dict],
    params: SamplingParams, batch: TrajectoryBatch, first_group: int,
) -> torch.Tensor:
    """[B] for each row of ``batch`` (answering ``rows``), the score of the greedy answer to its prompt."""
    greedy = rollout.generate(rows, replace(params, n=1, temperature=0.0))
    out = reward.score(rollout.decode_prompts(greedy), rollout.decode_responses(greedy), greedy.metadata)
    greedy.rewards = torch.tensor(out.scores, dtype=torch.float32)
    shape_overlong_rewards(algo, greedy, params.max_new_tokens)
    per_prompt = greedy.rewards[torch.argsort(greedy.group_ids)]
    return per_prompt[batch.group_ids - first_group]
