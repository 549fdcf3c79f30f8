"""Scoring a rollout batch in the RL loops: the reward, then DAPO's overlong shaping.

A picklable object rather than a closure: the asynchronous loop's producer may score inside the
rollout actor (Ray runtime), where the reward role is called through its own proxy.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlxf.algos import AlgorithmConfig
from rlxf.batch import TrajectoryBatch
from rlxf.loops.overlong import shape_overlong_rewards


@dataclass
class BatchScorer:
    reward: object  # RewardRole, or a proxy to one
    algo: AlgorithmConfig
    max_new_tokens: int

    def __call__(self, rollout, batch: TrajectoryBatch) -> dict[str, float]:
        """Fill ``batch.rewards`` in place; returns the reward/* metrics."""
        scored = self.reward.score_batch(batch, rollout.decode_prompts(batch), rollout.decode_responses(batch))
        scored.update(shape_overlong_rewards(self.algo, batch, self.max_new_tokens))
        return scored
