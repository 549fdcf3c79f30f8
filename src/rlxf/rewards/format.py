"""Format checks: an expected pattern, a "did not stop" penalty and an over-length penalty.

* ``pattern``: a regex the whole response must match (``re.fullmatch``, DOTALL); ``format_weight`` pays it.
* ``not_stopped_penalty``: added (use a negative number) when the response hit the length budget
  without end-of-sequence (``metadata["stopped"]`` is False).
* over-length (DAPO's soft overlong punishment): with ``max_tokens`` L and ``overlong_buffer`` B, a
  response of n tokens gets ``overlong_penalty * clip((n - (L - B)) / B, 0, 1)``; the token count is
  ``metadata["response_tokens"]`` (set by the reward role), else the response's character count.

Components: ``format``, ``not_stopped``, ``overlong`` (the penalty's fraction in [0, 1]).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rlxf.rewards.base import RewardOutput
from rlxf.rewards.registry import REWARDS


def overlong_fraction(length: int, max_tokens: int | None, buffer: int) -> float:
    if max_tokens is None:
        return 0.0
    if buffer <= 0:
        return float(length > max_tokens)
    return min(1.0, max(0.0, (length - (max_tokens - buffer)) / buffer))


@REWARDS.register("format")
class FormatReward:
    def __init__(
        self, pattern: str | None = None, format_weight: float = 1.0, not_stopped_penalty: float = -1.0,
        max_tokens: int | None = None, overlong_buffer: int = 0, overlong_penalty: float = -1.0,
    ) -> None:
        self.pattern = re.compile(pattern, re.DOTALL) if pattern else None
        self.format_weight = format_weight
        self.not_stopped_penalty = not_stopped_penalty
        self.max_tokens = max_tokens
        self.overlong_buffer = overlong_buffer
        self.overlong_penalty = overlong_penalty

    def score(self, prompts: Sequence[str], responses: Sequence[str], metadata: Sequence[dict]) -> RewardOutput:
        fmt, not_stopped, overlong, scores = [], [], [], []
        for response, row in zip(responses, metadata):
            f = float(self.pattern.fullmatch(response) is not None) if self.pattern else 0.0
            ns = float(not row.get("stopped", True))
            ol = overlong_fraction(int(row.get("response_tokens", len(response))), self.max_tokens, self.overlong_buffer)
            fmt.append(f)
            not_stopped.append(ns)
            overlong.append(ol)
            scores.append(self.format_weight * f + self.not_stopped_penalty * ns + self.overlong_penalty * ol)
        return RewardOutput(scores=scores, components={"format": fmt, "not_stopped": not_stopped, "overlong": overlong})
