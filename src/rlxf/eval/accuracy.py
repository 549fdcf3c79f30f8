"""Held-out evaluation: greedy answers to the eval split, scored by the run's eval reward."""

from __future__ import annotations

from rlxf.eval.protocols import Generates, Scores
from rlxf.eval.verdicts import solved_flags
from rlxf.rollout.sampling import SamplingParams


def evaluate_problems(
    rollout: Generates, reward: Scores, rows: list[dict], batch_size: int, max_new_tokens: int
) -> tuple[dict[str, float], list[dict]]:
    """The metrics of ``evaluate`` and one row per problem: ``problem`` (its index in ``rows``),
    ``prompt``, ``response`` (as the model saw and wrote them: special tokens kept), ``answer`` (when the task has one), ``score``, ``correct`` (1.0 / 0.0), ``length``."""
    params = SamplingParams(n=1, temperature=0.0, max_new_tokens=max_new_tokens)
    problems: list[dict] = []
    components: dict[str, list[float]] = {}
    for start in range(0, len(rows), batch_size):
        chunk = rows[start: start + batch_size]
        batch = rollout.generate(chunk, params)
        prompts, responses = rollout.decode_prompts(batch), rollout.decode_responses(batch)
        out = reward.score(prompts, responses, batch.metadata)
        correct = solved_flags(out)
        shown_prompts, shown_responses = rollout.shown_prompts(batch), rollout.shown_responses(batch)
        for name, values in out.components.items():
            components.setdefault(name, []).extend(float(v) for v in values if isinstance(v, (int, float)))
        for i, length in enumerate(batch.response_lengths.tolist()):
            row = chunk[int(batch.group_ids[i])]
            problems.append({"problem": start + int(batch.group_ids[i]), "prompt": shown_prompts[i],
                             "response": shown_responses[i],
                             **({"answer": row["answer"]} if "answer" in row else {}),
                             "score": out.scores[i], "correct": correct[i], "length": int(length)})
    n = len(problems)
    metrics = {
        "eval/accuracy": sum(p["correct"] for p in problems) / n,
        "eval/reward": sum(p["score"] for p in problems) / n,
        "eval/response_length": sum(p["length"] for p in problems) / n,
        # the reward's components over the held-out split (a pairwise judge's first_bias: its position bias)
        **{f"eval/reward/{name}": sum(values) / len(values) for name, values in components.items() if values},
    }
    return metrics, problems


def evaluate(
    rollout: Generates, reward: Scores, rows: list[dict], batch_size: int, max_new_tokens: int
) -> dict[str, float]:
    """``eval/accuracy``: the fraction of problems solved (eval/verdicts.py: the reward's ``correct``
    component, all tests passed for ``code_tests``, else score > 0); ``eval/reward``: the mean score;
    ``eval/reward/NAME``: the mean of each of the reward's components."""
    return evaluate_problems(rollout, reward, rows, batch_size, max_new_tokens)[0]
