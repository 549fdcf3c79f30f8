"""Where a Bradley-Terry reward model can be gamed: wrong answers it scores above the true sum.

    python benchmarks/reward_model_blind_spots.py --seed 3 \
        --model rm0=RUNS/reward_model/seed_0/checkpoints/step_000500/reward_model --model rm1=... [--ensemble]

On the held-out problems of the reward-model chain's task (``grpo_reward_model.yaml``: ``a+b=``, a up to
3 digits, b one digit, seed ``--seed``), each reward model (scored as GRPO scores: ``reward.function:
reward_model``) is asked two things:

* pair accuracy per kind of wrong answer (``rlxf.data.wrong_answers``: teacher, carry, digit, length, random),
  ``--per-kind`` answers of each kind a problem;
* ``exploitable``: the share of problems where some answer one edit from the truth (every digit changed,
  every digit dropped or inserted: ~60 answers) outscores the truth, i.e. where a policy exploring near
  the right answer finds a wrong one the reward prefers; ``edits_above_truth``: how many do, on average;
  ``worst``: the highest-scoring such answer of each of the first 3 problems.

``--ensemble`` adds the mean of the models' scores, each z-scored (``grpo_reward_model.yaml``'s reward).

``--recipe`` asks the same of a reward model on a chat task instead: the recipe's held-out sums (e.g.
recipes/smollm2_grpo.yaml, "What is 47 plus 8?"), each prompt as a rollout decodes it for the reward (the
chat template rendered, special tokens dropped), each answer written into ``--format`` (default
``{a} + {b} = {answer}.``, the answer a trained policy gives), and ``--problems`` of them.

Prints one JSON object per reward model (and the ensemble).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import emit, operands  # noqa: E402
from rlxf.data.arithmetic import addends, arithmetic_task  # noqa: E402
from rlxf.data.wrong_answers import WRONG_ANSWERS  # noqa: E402
from rlxf.rewards.mix import zscore  # noqa: E402
from rlxf.rewards.reward_model import SequenceClassifierReward  # noqa: E402

KINDS = ["teacher", "carry", "digit", "length", "random"]


def one_edit_away(truth: str) -> list[str]:
    """Every answer one digit changed, dropped or inserted away from ``truth`` (no leading zeros)."""
    edits = {truth[:i] + d + truth[i + 1:] for i in range(len(truth)) for d in "0123456789"}
    edits |= {truth[:i] + truth[i + 1:] for i in range(len(truth))}
    edits |= {truth[:i] + d + truth[i:] for i in range(len(truth) + 1) for d in "0123456789"}
    return sorted(e for e in edits if e and e != truth and (e == "0" or not e.startswith("0")))


def candidates(problems: list[tuple[int, int]], per_kind: int) -> list[tuple[int, str, str]]:
    """(problem, answer, tag): each true sum ("truth"), ``per_kind`` wrong answers of each kind (tag: the
    kind), and every answer one edit away ("edit")."""
    rng, rows = random.Random(0), []
    for i, (a, b) in enumerate(problems):
        rows.append((i, str(a + b), "truth"))
        rows += [(i, WRONG_ANSWERS.get(kind)(a, b, rng), kind) for kind in KINDS for _ in range(per_kind)]
        rows += [(i, edit, "edit") for edit in one_edit_away(str(a + b))]
    return rows


def blind_spots(rows: list[tuple[int, str, str]], scores: list[float], prompts: list[str]) -> dict:
    truth = {i: s for (i, _, tag), s in zip(rows, scores) if tag == "truth"}
    accuracy = {kind: round(statistics.fmean(truth[i] > s for (i, _, tag), s in zip(rows, scores) if tag == kind), 3)
                for kind in KINDS}
    above, best = {i: 0 for i in truth}, {}
    for (i, answer, tag), s in zip(rows, scores):
        if tag == "edit":
            above[i] += s > truth[i]
            best[i] = max(best.get(i, (s, answer)), (s, answer))
    worst = [{"prompt": prompts[i], "truth": round(truth[i], 2), "best_wrong": best[i][1],
              "its_score": round(best[i][0], 2)} for i in list(truth)[:3]]
    return {"pair_accuracy": accuracy, "exploitable": round(statistics.fmean(n > 0 for n in above.values()), 3),
            "edits_above_truth": round(statistics.fmean(above.values()), 2), "worst": worst}


def chat_task(recipe: str, problems: int) -> tuple[list[tuple[int, int]], list[str]]:
    """(a, b) and the prompt text the reward is given, for the first held-out problems of ``recipe``."""
    from rlxf.checked_config import load_config
    from rlxf.data.prompt_tokens import reward_prompt_texts
    from rlxf.loops.setup import build_run_context

    config = load_config(recipe, [])
    context = build_run_context(config)
    rows = context.task.eval[:problems]
    texts = reward_prompt_texts(rows, context.tokenizer, config.data.chat_template, config.data.max_prompt_tokens)
    return [operands(row["prompt"]) for row in rows], texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", required=True, help="NAME=PATH of a saved reward model")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-kind", type=int, default=2)
    parser.add_argument("--problems", type=int, default=200, help="the first N held-out problems")
    parser.add_argument("--ensemble", action="store_true", help="also the mean of the models' z-scores")
    parser.add_argument("--recipe", help="a chat task's recipe (its held-out sums) instead of the tiny chain's task")
    parser.add_argument("--format", default=None, help="the response around {answer} ({a}, {b} too) with --recipe")
    parser.add_argument("--batch-size", type=int, default=256)
    ns = parser.parse_args()
    if ns.recipe:
        problems, prompts = chat_task(ns.recipe, ns.problems)
    else:
        held_out = arithmetic_task(ns.seed, 200, digits=3, b_digits=1, ops="+", sloppy_teacher=0.7).eval[:ns.problems]
        problems, prompts = [addends(row["prompt"]) for row in held_out], [row["prompt"] for row in held_out]
    form = ns.format or ("{a} + {b} = {answer}." if ns.recipe else "{answer}")
    rows = candidates(problems, ns.per_kind)
    texts = [prompts[i] for i, _, _ in rows]
    responses = [form.format(a=problems[i][0], b=problems[i][1], answer=answer) for i, answer, _ in rows]
    every = {}
    for spec in ns.model:
        name, _, path = spec.partition("=")
        every[name] = SequenceClassifierReward(path, batch_size=ns.batch_size).score(texts, responses,
                                                                                     [{}] * len(rows)).scores
        emit({"model": name, "seed": ns.seed, **blind_spots(rows, every[name], prompts)})
    if ns.ensemble:  # z-scored over all the texts by `mix`'s own `zscore`, as it does over a step's samples
        mean = [statistics.fmean(column) for column in zip(*(zscore(s) for s in every.values()))]
        emit({"model": f"ensemble of {len(every)} (mean z-score)", "seed": ns.seed, **blind_spots(rows, mean, prompts)})


if __name__ == "__main__":
    main()
