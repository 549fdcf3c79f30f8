"""The scorer of a ``reasoning-gym`` row (see ``data/reasoning_gym.py``): the dataset's own ``score_answer``.

The answer is the text inside the last ``<answer>...</answer>`` tag when there is one, else the whole
response, stripped. Component ``correct`` is 1 where the dataset's score is 1.

``reasoning_gym.get_score_answer_fn`` builds a default-config dataset on every call (~50 ms for
``spell_backward``, which loads a word list); the scorer is looked up once per dataset name and kept.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from rlxf.rewards.base import RewardOutput
from rlxf.rewards.math_answer import ANSWER_TAG
from rlxf.rewards.registry import REWARDS


def reasoning_gym_answer(response: str) -> str:
    tags = ANSWER_TAG.findall(response)
    return (tags[-1] if tags else response).strip()


@functools.cache
def score_answer_fn(dataset: str) -> Callable[[str, dict], float]:
    """The dataset's ``score_answer`` (cached per process: building it is the expensive part)."""
    from rlxf.data.reasoning_gym import import_reasoning_gym

    return import_reasoning_gym().get_score_answer_fn(dataset)


@REWARDS.register("reasoning_gym")
class ReasoningGymReward:
    def score(self, prompts: Sequence[str], responses: Sequence[str], metadata: Sequence[dict]) -> RewardOutput:
        scores = []
        for response, row in zip(responses, metadata):
            entry = row["rg_entry"]
            score_fn = score_answer_fn(entry["metadata"]["source_dataset"])
            scores.append(float(score_fn(reasoning_gym_answer(response), entry)))
        return RewardOutput(scores=scores, components={"correct": [float(s >= 1.0) for s in scores]})
