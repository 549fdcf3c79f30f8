"""Scoring a rollout batch in the RL loops: the reward, then DAPO's overlong shaping.

A picklable object rather than a closure: the asynchronous loop's producer may score inside the
rollout's process: on Ray through the reward actor's proxy, in the process runtime with a reward
role it builds there from the config (``runtime.portable``).
"""

from __future__ import annotations

from dataclasses import dataclass

from rlxf.algos import AlgorithmConfig
from rlxf.batch import TrajectoryBatch
from rlxf.config import RewardConfig
from rlxf.loops.overlong import shape_overlong_rewards


@dataclass
class BatchScorer:
    reward: object  # RewardRole, a proxy to one, or a RewardConfig: built where the scorer first runs
    algo: AlgorithmConfig
    max_new_tokens: int

    def __call__(self, rollout, batch: TrajectoryBatch) -> dict[str, float]:
        """Fill ``batch.rewards`` in place; returns the reward/* metrics."""
        if isinstance(self.reward, RewardConfig):
            from rlxf.loops.setup import build_reward_role

            self.reward = build_reward_role(self.reward)
        scored = self.reward.score_batch(batch, rollout.decode_prompts(batch), rollout.decode_responses(batch))
        scored.update(shape_overlong_rewards(self.algo, batch, self.max_new_tokens))
        return scored
