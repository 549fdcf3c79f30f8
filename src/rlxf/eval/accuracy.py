"""Held-out evaluation: greedy answers to the eval split, scored by the run's reward."""

from __future__ import annotations

from rlxf.roles.reward import RewardRole
from rlxf.roles.rollout import RolloutRole
from rlxf.rollout.sampling import SamplingParams


def evaluate(
    rollout: RolloutRole, reward: RewardRole, rows: list[dict], batch_size: int, max_new_tokens: int
) -> dict[str, float]:
    """``eval/accuracy``: mean of the reward's ``correct`` component (or of the score, if it has none)."""
    params = SamplingParams(n=1, temperature=0.0, max_new_tokens=max_new_tokens)
    scores, correct, lengths = [], [], []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start: start + batch_size]
        batch = rollout.generate(chunk, params)
        out = reward.score(rollout.decode_prompts(batch), rollout.decode_responses(batch), batch.metadata)
        scores += out.scores
        correct += out.components.get("correct", out.scores)
        lengths += batch.response_lengths.tolist()
    n = len(rows)
    return {
        "eval/accuracy": sum(correct) / n,
        "eval/reward": sum(scores) / n,
        "eval/response_length": sum(lengths) / n,
    }
