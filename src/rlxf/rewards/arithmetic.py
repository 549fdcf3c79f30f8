"""Rule rewards for tasks with a known answer: correctness and format.

The expected format is the bare answer followed by end-of-sequence. ``metadata[i]["answer"]`` holds
the reference; ``metadata[i]["stopped"]`` (set by the rollout) says whether the model ended its
response itself rather than running into the length budget.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rlxf.rewards.base import RewardOutput
from rlxf.rewards.registry import REWARDS

NUMBER = re.compile(r"-?\d+")
BARE_NUMBER = re.compile(r"\s*-?\d+\s*")


def extract_answer(response: str) -> str | None:
    """The first integer in the response, or None."""
    match = NUMBER.search(response)
    return match.group(0) if match else None


def is_correct(response: str, answer: str) -> bool:
    found = extract_answer(response)
    return found is not None and int(found) == int(answer)


def is_well_formatted(response: str, stopped: bool) -> bool:
    return stopped and BARE_NUMBER.fullmatch(response) is not None


@REWARDS.register("arithmetic")
class AnswerReward:
    """score = correct_weight * [answer right] + format_weight * [bare number, then stop]."""

    metadata_fields = {"answer": int}  # what a client of the reward server must send per sample (server_rows.py)

    def __init__(self, correct_weight: float = 1.0, format_weight: float = 0.1) -> None:
        self.correct_weight = correct_weight
        self.format_weight = format_weight

    def score(
        self, prompts: Sequence[str], responses: Sequence[str], metadata: Sequence[dict]
    ) -> RewardOutput:
        correct = [float(is_correct(r, m["answer"])) for r, m in zip(responses, metadata)]
        formatted = [
            float(is_well_formatted(r, m.get("stopped", True))) for r, m in zip(responses, metadata)
        ]
        scores = [self.correct_weight * c + self.format_weight * f for c, f in zip(correct, formatted)]
        return RewardOutput(scores=scores, components={"correct": correct, "format": formatted})
