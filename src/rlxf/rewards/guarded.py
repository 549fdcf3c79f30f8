"""Calling user reward code safely: a failing, hanging or NaN-returning reward is named."""

from __future__ import annotations

import concurrent.futures as futures
import math

from rlxf.errors import RlxfError
from rlxf.rewards.base import Reward, RewardOutput, call_reward


class RewardError(RlxfError, RuntimeError):
    """The reward function raised, hung, or returned something unusable."""


class GuardedReward:
    """A reward called safely: a time limit (``reward.timeout_seconds``), and any failure, a wrong number of
    scores or a NaN/inf score raised as one :class:`RewardError` that names the reward."""

    def __init__(self, reward: Reward, name: str, timeout_seconds: float | None = 300.0) -> None:
        self.reward = reward
        self.name = name
        self.timeout_seconds = timeout_seconds
        self._pool = futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="reward")

    def score(self, prompts: list[str], responses: list[str], metadata: list[dict]) -> RewardOutput:
        job = self._pool.submit(call_reward, self.reward, prompts, responses, metadata, self.name)
        try:
            out = job.result(timeout=self.timeout_seconds)
        except futures.TimeoutError:
            # The stuck call keeps its thread; a fresh pool keeps later steps from queueing behind it.
            self._pool = futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="reward")
            raise RewardError(
                f"reward {self.name!r} did not return within {self.timeout_seconds}s "
                f"(reward.timeout_seconds) on a batch of {len(responses)} responses"
            ) from None
        except Exception as err:  # noqa: BLE001 - any failure of user code is reported with its name
            raise RewardError(f"reward {self.name!r} raised {type(err).__name__}: {err}") from err
        if not isinstance(out, RewardOutput) or len(out.scores) != len(responses):
            raise RewardError(f"reward {self.name!r} returned {out!r:.200} for {len(responses)} responses")
        bad = [row for row, score in enumerate(out.scores) if not math.isfinite(score)]
        if bad:  # one NaN would turn every advantage of its group (and the update) into NaN
            raise RewardError(
                f"reward {self.name!r} returned {len(bad)} non-finite scores (NaN or inf), first at row {bad[0]}: "
                f"{out.scores[bad[0]]} for response {responses[bad[0]]!r:.120}"
            )
        return out
