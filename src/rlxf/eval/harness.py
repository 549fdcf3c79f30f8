"""Evaluating one checkpoint on a task: greedy accuracy, mean reward, pass@k and maj@k, with intervals.

Two passes over the problems with the rollout engine: one greedy answer each (``evaluate_problems``, the
held-out evaluation of a run), then ``n`` sampled answers each, scored by the eval reward. The verdict
(eval/verdicts.py: ``correct``; all tests passed for code; else score > 0) says whether a sample solved
its problem; the task's answer extraction (eval/answers.py) gives the answers that vote for maj@k.
Nothing here is task-specific: a task is its rows, its reward, its verdict and its extraction.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from rlxf.eval.accuracy import evaluate_problems
from rlxf.eval.intervals import mean_with_interval
from rlxf.eval.majority import maj_at_k
from rlxf.eval.pass_at_k import pass_at_k
from rlxf.eval.protocols import Generates, Scores
from rlxf.eval.verdicts import solved_flags
from rlxf.rollout.sampling import SamplingParams


@dataclass
class EvalSettings:
    n: int = 8  # samples per problem
    ks: list[int] = field(default_factory=lambda: [1, 4, 8])  # pass@k and maj@k for each k <= n
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 16
    batch_size: int = 256  # trajectories per generate call
    seed: int = 0

    def __post_init__(self) -> None:
        if self.n < 1:  # before the k's: their default is derived from n, and the user never gave one
            raise ValueError(f"--n {self.n}: samples per problem must be at least 1")
        bad = [k for k in self.ks if not 1 <= k <= self.n]
        if bad:
            raise ValueError(f"--k {bad}: every k must be between 1 and --n {self.n}")


def sample_problems(rollout: Generates, reward: Scores, rows: list[dict], settings: EvalSettings, extract,
                    generator: torch.Generator | None = None, progress: bool = True) -> list[dict]:
    """``settings.n`` sampled answers per problem: their scores, solved flags and extracted answers."""
    from tqdm import tqdm

    params = SamplingParams(n=settings.n, temperature=settings.temperature, top_p=settings.top_p,
                            top_k=settings.top_k, max_new_tokens=settings.max_new_tokens)
    per_call = max(1, settings.batch_size // settings.n)
    results: list[dict] = [{"scores": [], "solved": [], "answers": []} for _ in rows]
    bar = tqdm(total=len(rows), desc=f"sampling {settings.n} per problem", unit="problem", leave=False,
               disable=None if progress else True)  # None: shown on a terminal only
    for start in range(0, len(rows), per_call):
        chunk = rows[start: start + per_call]
        batch = rollout.generate(chunk, params, generator)
        responses = rollout.decode_responses(batch)
        out = reward.score(rollout.decode_prompts(batch), responses, batch.metadata)
        flags = solved_flags(out)
        for i, response in enumerate(responses):
            result = results[start + int(batch.group_ids[i])]
            result["scores"].append(out.scores[i])
            result["solved"].append(flags[i])
            result["answers"].append(extract(response))
        bar.update(len(chunk))
    bar.close()
    return results


def problem_row(greedy: dict, sampled: dict, ks: list[int]) -> dict:
    """One problem's line of ``eval_problems.jsonl``."""
    flags = [float(s) for s in sampled["solved"]]
    n, c = len(flags), int(sum(flags))
    return {
        "problem": greedy["problem"], "prompt": greedy["prompt"],
        **({"answer": greedy["answer"]} if "answer" in greedy else {}),
        "greedy_response": greedy["response"], "greedy_score": greedy["score"],
        "greedy_correct": greedy["correct"], "samples": n, "solved_samples": c,
        "mean_reward": sum(sampled["scores"]) / n,
        **{f"pass@{k}": pass_at_k(n, c, k) for k in ks},
        **{f"maj@{k}": maj_at_k(sampled["answers"], flags, k) for k in ks},
        "answers": sampled["answers"],
    }


def summarize(problems: list[dict], ks: list[int], seed: int = 0) -> dict:
    """Each metric's mean over problems with its 95% bootstrap interval."""
    keys = ["greedy_correct", "mean_reward", *(f"pass@{k}" for k in ks), *(f"maj@{k}" for k in ks)]
    names = {"greedy_correct": "greedy_accuracy"}
    return {names.get(k, k): mean_with_interval([p[k] for p in problems], seed) for k in keys}


def evaluate_checkpoint(rollout: Generates, reward: Scores, rows: list[dict], settings: EvalSettings, extract,
                        progress: bool = True) -> tuple[dict, list[dict]]:
    """(summary with intervals, one row per problem) of the policy behind ``rollout`` on ``rows``."""
    _, greedy = evaluate_problems(rollout, reward, rows, settings.batch_size, settings.max_new_tokens)
    generator = torch.Generator().manual_seed(settings.seed)
    sampled = sample_problems(rollout, reward, rows, settings, extract, generator, progress)
    problems = [problem_row(g, s, settings.ks) for g, s in zip(sorted(greedy, key=lambda g: g["problem"]), sampled)]
    return summarize(problems, settings.ks, settings.seed), problems
