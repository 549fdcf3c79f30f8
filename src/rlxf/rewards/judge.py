"""A generative reward model / LLM judge: a model reads a rubric and the trajectory, writes a rationale,
then a score in a parseable form.

    reward:
      function: judge
      kwargs:
        backend: openai                       # or engine (the built-in engine on a local model), or module:attr
        backend_kwargs: {url: http://127.0.0.1:8000/v1, model: qwen2.5-7b-instruct}
        min_score: 0
        max_score: 10

The judge must end with ``Score: N`` (also accepted: ``<score>N</score>``, ``[[N]]``, ``N/10``-style
values); the last such mark counts. Scores are mapped to [0, 1]. A reply without a parseable score in
range, or a request that failed after its retries, scores ``default_score`` and is counted (components
``judge_malformed``, ``judge_failed``); only a batch whose every request failed (the endpoint is down)
stops the run, with an error naming the endpoint.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from rlxf.rewards.base import RewardOutput
from rlxf.rewards.judge_backends import build_judge_backend
from rlxf.rewards.registry import REWARDS

DEFAULT_RUBRIC = (
    "You are grading an assistant's response.\n"
    "Rubric: the response is correct, complete and concise.\n"
    "{reference}"
    "Prompt:\n{prompt}\n\nResponse:\n{response}\n\n"
    "First explain your reasoning briefly, then finish with a line 'Score: N' where N is an integer "
    "from {min_score} to {max_score}."
)

_NUMBER = r"(-?\d+(?:\.\d+)?)(?:\s*/\s*(\d+(?:\.\d+)?))?"
SCORE_PATTERNS = (
    re.compile(r"<score>\s*" + _NUMBER + r"\s*</score>", re.IGNORECASE),
    re.compile(r"\[\[\s*" + _NUMBER + r"\s*\]\]"),
    re.compile(r"\bscore\s*[:=]?\s*\**\s*" + _NUMBER, re.IGNORECASE),
)


def parse_judge_score(text: str | None, min_score: float = 0.0, max_score: float = 10.0) -> float | None:
    """The judge's score (the last mark of the first pattern kind that occurs), or None when missing,
    unparseable or out of ``[min_score, max_score]``. ``7/10`` is rescaled to the range's top."""
    if not text:
        return None
    for pattern in SCORE_PATTERNS:
        matches = pattern.findall(text)
        if not matches:
            continue
        value, denominator = matches[-1]
        score = float(value)
        if denominator:
            if float(denominator) == 0:
                return None
            score = score / float(denominator) * max_score
        return score if min_score <= score <= max_score else None
    return None


@REWARDS.register("judge")
class JudgeReward:
    def __init__(
        self, backend: str = "engine", backend_kwargs: dict[str, Any] | None = None, rubric: str = DEFAULT_RUBRIC,
        min_score: float = 0.0, max_score: float = 10.0, default_score: float = 0.0,
    ) -> None:
        if max_score <= min_score:
            raise ValueError(f"judge: max_score ({max_score}) must exceed min_score ({min_score})")
        self.backend = build_judge_backend(backend, backend_kwargs)
        self.rubric = rubric
        self.min_score, self.max_score, self.default_score = min_score, max_score, default_score

    def judge_prompt(self, prompt: str, response: str, row: dict) -> str:
        reference = f"Reference answer: {row['answer']}\n" if "answer" in row else ""
        return self.rubric.format(prompt=prompt, response=response, reference=reference,
                                  min_score=self.min_score, max_score=self.max_score)

    def score(self, prompts: Sequence[str], responses: Sequence[str], metadata: Sequence[dict]) -> RewardOutput:
        requests = [self.judge_prompt(p, r, m) for p, r, m in zip(prompts, responses, metadata)]
        replies = self.backend.generate(requests)
        scores, malformed, failed = [], [], []
        for reply in replies:
            parsed = parse_judge_score(reply, self.min_score, self.max_score)
            failed.append(float(reply is None))
            malformed.append(float(reply is not None and parsed is None))
            scores.append(self.default_score if parsed is None
                          else (parsed - self.min_score) / (self.max_score - self.min_score))
        return RewardOutput(scores=scores, components={"judge_malformed": malformed, "judge_failed": failed})
