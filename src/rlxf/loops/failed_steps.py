"""Steps whose every trajectory failed before the policy was scored (every agent of an ``openai_agent``
environment crashed or timed out): nothing can be learned from one, and a run of them means the
environment is broken (a missing package in the agent's interpreter, a wrong command), not unlucky.

A failed trajectory carries its reason in its metadata (``agent_failure``: envs/openai_agent.py). After
``env.max_failed_steps`` such steps in a row the run stops with one error that gives the first failure's
reason; the step that tripped it is not trained, the run is saved at the step before. A step with one
trajectory that did not fail resets the count. (A reward server or judge that answers nothing but errors
already stops the run: rewards/remote.py and rewards/judge.py raise once their retries are spent.)
"""

from __future__ import annotations

from rlxf.batch import TrajectoryBatch
from rlxf.errors import RlxfError

FAILURE_KEY = "agent_failure"
REASON_CHARS = 300  # an agent's reason can be a whole stderr; the error stays one readable line


class EveryTrajectoryFailed(RlxfError):
    """``env.max_failed_steps`` steps in a row in which every trajectory failed before it was scored."""


class FailedSteps:
    def __init__(self, limit: int) -> None:
        self.limit = limit  # 0: never stop
        self.in_a_row = 0
        self.first_reason: str | None = None

    def observe(self, batch: TrajectoryBatch, step: int) -> None:
        """Count ``batch`` (the step's trajectories); raise when the limit is reached."""
        reasons = [row.get(FAILURE_KEY) for row in batch.metadata]
        if not reasons or any(reason is None for reason in reasons):
            self.in_a_row, self.first_reason = 0, None
            return
        self.in_a_row += 1
        if self.first_reason is None:
            self.first_reason = " ".join(str(reasons[0]).split())[:REASON_CHARS]
        if self.limit and self.in_a_row >= self.limit:
            raise EveryTrajectoryFailed(
                f"every trajectory failed before it was scored in {self.in_a_row} steps in a row (steps "
                f"{step - self.in_a_row + 1}-{step}, env.max_failed_steps={self.limit}): nothing to learn from, "
                f"the run stops; the first failure: {self.first_reason}")
