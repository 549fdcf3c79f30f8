"""The environment's own reward (multi-turn rollouts): the sum of a trajectory's per-turn rewards.

``reward: {function: env}``. Components: the environment's final ``info["components"]`` (missing
values are 0) and ``turns``. Mix it with other rewards through ``mix``.
"""

from __future__ import annotations

from collections.abc import Sequence

from rlxf.rewards.base import RewardOutput
from rlxf.rewards.registry import REWARDS


@REWARDS.register("env")
class EnvironmentReward:
    def score(self, prompts: Sequence[str], responses: Sequence[str], metadata: Sequence[dict]) -> RewardOutput:
        if any("env_reward" not in row for row in metadata):
            raise ValueError("reward 'env' needs a multi-turn rollout (set env.name in the config)")
        names = sorted({k for row in metadata for k in row.get("env_components", {})})
        components = {k: [float(row["env_components"].get(k, 0.0)) for row in metadata] for k in names}
        components["turns"] = [float(row.get("turns", 0)) for row in metadata]
        return RewardOutput(scores=[float(row["env_reward"]) for row in metadata], components=components)
