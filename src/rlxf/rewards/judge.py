"""A generative reward model / LLM judge: a model reads a rubric and the trajectory, writes a rationale,
then a score in a parseable form.

    reward:
      function: judge
      kwargs:
        backend: openai                       # or engine (the built-in engine on a local model), or module:attr
        backend_kwargs: {url: http://127.0.0.1:8000/v1, model: qwen2.5-7b-instruct, temperature: 0.7}
        min_score: 0
        max_score: 10
        samples: 5                            # k judgments per response (backend temperature > 0) ...
        aggregate: vote                       # ... combined by majority vote, or mean

The judge must end with ``Score: N`` (also accepted: ``<score>N</score>``, ``[[N]]``, ``N/10``-style
values); the last such mark counts (``rewards/judge_parsing.py``). Scores are mapped to [0, 1]. A reply
without a parseable score in range, or a request that failed after its retries, scores ``default_score``
and is counted (components ``judge_malformed``, ``judge_failed``); only a batch whose every request failed
(the endpoint is down) stops the run, with an error naming the endpoint. With ``samples: k`` the k scores
of a response are averaged or voted (``rewards/judge_votes.py``), their spread is the component
``judge_spread``.

``rubric`` may be a list: one user message per turn, the judge answering each, its score read from its last
reply. ``["Solve this yourself first:\\n{prompt}", "Now grade this answer: {response} ..."]`` is
reference-guided judging: the judge works the question out before it reads the response, so a wrong
response cannot anchor its working (``data/judge_task.py``, ``protocol: solve_first``). Each of the k
samples is its own conversation.

``{prompt}`` is the prompt as the rollout decodes it (``prompt_from: rollout``): under a chat template that is
the whole rendered conversation, system prompt and role names included, with the special tokens dropped.
``prompt_from: row`` puts the task row's own prompt there instead (its ``prompt`` text, or the last user
message of its ``messages``; a batch carries it as ``prompt_text``): the question as a judge trained on the task's rows saw it
(``data/answer_judge_task.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlxf.data.judge_fields import reference_text
from rlxf.data.prompt_tokens import row_prompt_text
from rlxf.rewards.base import RewardOutput
from rlxf.rewards.judge_backends import build_judge_backend
from rlxf.rewards.judge_parsing import parse_judge_score
from rlxf.rewards.judge_votes import JUDGE_AGGREGATES, combine_samples
from rlxf.rewards.registry import REWARDS

DEFAULT_RUBRIC = (
    "You are grading an assistant's response.\n"
    "Rubric: the response is correct, complete and concise.\n"
    "{reference}"
    "Prompt:\n{prompt}\n\nResponse:\n{response}\n\n"
    "First explain your reasoning briefly, then finish with a line 'Score: N' where N is an integer "
    "from {min_score} to {max_score}."
)


def row_prompt(_decoded: str, row: dict) -> str:
    """The task row's own prompt: a batch's ``prompt_text`` (``RolloutRole.to_batch``), or a raw row's."""
    text = row.get("prompt_text") or row_prompt_text(row)
    if text is None:
        raise ValueError(f"judge: prompt_from=row, but the row has no `prompt` text or user message: {str(row)[:120]}")
    return text


# what `{prompt}` is: the rollout's decoded prompt, or the row's own
PROMPT_SOURCES = {"rollout": lambda decoded, _row: decoded, "row": row_prompt}


@REWARDS.register("judge")
class JudgeReward:
    def __init__(
        self, backend: str = "engine", backend_kwargs: dict[str, Any] | None = None,
        rubric: str | list[str] = DEFAULT_RUBRIC,
        min_score: float = 0.0, max_score: float = 10.0, default_score: float = 0.0, samples: int = 1,
        aggregate: str = "mean", prompt_from: str = "rollout",
    ) -> None:
        if prompt_from not in PROMPT_SOURCES:
            raise ValueError(f"judge: unknown prompt_from {prompt_from!r}; known: {sorted(PROMPT_SOURCES)}")
        self.prompt_from = prompt_from
        if max_score <= min_score:
            raise ValueError(f"judge: max_score ({max_score}) must exceed min_score ({min_score})")
        if samples < 1:
            raise ValueError(f"judge: samples must be >= 1, got {samples}")
        if aggregate not in JUDGE_AGGREGATES:
            raise ValueError(f"judge: unknown aggregate {aggregate!r}; known: {sorted(JUDGE_AGGREGATES)}")
        self.backend = build_judge_backend(backend, backend_kwargs)
        if samples > 1 and getattr(self.backend, "temperature", None) == 0:
            raise ValueError(f"judge: samples={samples} at backend temperature 0 asks {samples} times for the same "
                             "reply; set backend_kwargs.temperature > 0")
        self.samples, self.aggregate = samples, aggregate
        self.turns = [rubric] if isinstance(rubric, str) else list(rubric)
        if not self.turns or not all(isinstance(turn, str) for turn in self.turns):
            raise ValueError("judge: rubric must be a text or a non-empty list of texts (one per turn)")
        self.min_score, self.max_score, self.default_score = min_score, max_score, default_score

    def judge_prompt(self, prompt: str, response: str, row: dict, turn: int = 0) -> str:
        prompt = PROMPT_SOURCES[self.prompt_from](prompt, row)
        return self.turns[turn].format(prompt=prompt, response=response, reference=reference_text(row),
                                       min_score=self.min_score, max_score=self.max_score)

    def converse(self, cases: list[tuple[str, str, dict]]) -> list[str | None]:
        """The judge's last reply to each case's turns (None: a request failed, and its later turns are skipped)."""
        if len(self.turns) == 1:
            return self.backend.generate([self.judge_prompt(*case) for case in cases])
        conversations: list[list[dict] | None] = [[] for _ in cases]
        replies: list[str | None] = [None] * len(cases)
        for turn in range(len(self.turns)):
            live = [i for i, c in enumerate(conversations) if c is not None]
            for i in live:
                conversations[i].append({"role": "user", "content": self.judge_prompt(*cases[i], turn=turn)})
            for i, reply in zip(live, self.backend.generate([conversations[i] for i in live])):
                replies[i] = reply
                if reply is None:
                    conversations[i] = None
                else:
                    conversations[i].append({"role": "assistant", "content": reply})
        return replies

    def normalized(self, reply: str | None) -> float | None:
        parsed = parse_judge_score(reply, self.min_score, self.max_score)
        return None if parsed is None else (parsed - self.min_score) / (self.max_score - self.min_score)

    def score(self, prompts: Sequence[str], responses: Sequence[str], metadata: Sequence[dict]) -> RewardOutput:
        k = self.samples
        replies = self.converse([(p, r, m) for p, r, m in zip(prompts, responses, metadata) for _ in range(k)])
        scores, malformed, failed, spread = [], [], [], []
        for start in range(0, len(replies), k):
            samples = replies[start: start + k]
            parsed = [self.normalized(reply) for reply in samples]
            combined, deviation = combine_samples(parsed, self.aggregate)
            scores.append(self.default_score if combined is None else combined)
            failed.append(sum(reply is None for reply in samples) / k)
            malformed.append(sum(r is not None and p is None for r, p in zip(samples, parsed)) / k)
            spread.append(deviation)
        return RewardOutput(scores=scores, components={"judge_malformed": malformed, "judge_failed": failed,
                                                       "judge_spread": spread})
