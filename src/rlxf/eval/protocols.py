"""What evaluation needs of the roles, as small protocols: eval/ never imports roles/ (layers point down),
and anything with these methods (a rollout role, a proxy to one, a test double) can be evaluated."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch

from rlxf.batch import TrajectoryBatch
from rlxf.rewards.base import RewardOutput
from rlxf.rollout.sampling import SamplingParams


class Generates(Protocol):
    """Rows in, a trajectory batch out, and the batch's prompts and responses as text."""

    def generate(self, rows: list[dict], params: SamplingParams, generator: torch.Generator | None = None,
                 first_group: int = 0) -> TrajectoryBatch: ...

    def decode_prompts(self, batch: TrajectoryBatch) -> list[str]: ...

    def decode_responses(self, batch: TrajectoryBatch) -> list[str]: ...

    def shown_prompts(self, batch: TrajectoryBatch) -> list[str]: ...  # for logs: special tokens kept

    def shown_responses(self, batch: TrajectoryBatch) -> list[str]: ...


class Scores(Protocol):
    """A reward role: one score per response, plus named components (``correct``, ...)."""

    def score(self, prompts: Sequence[str], responses: Sequence[str], metadata: Sequence[dict]) -> RewardOutput: ...
