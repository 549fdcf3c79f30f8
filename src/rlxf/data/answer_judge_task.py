"""A judge for the real-model recipe's task, asked as a served judge is asked: pointwise rows over the sums
asked in words of ``recipes/smollm2_grpo.yaml``, each prompt the plain-words rubric of
``benchmarks/judge_over_server.py`` (``data/math_judge_rubrics.py``) filled with the question and one answer.

    data:
      task: answer_judge
      task_args: {digits: 2, b_digits: 1, ops: "+", question: "What is {a} {op_word} {b}?", rubric: one_turn}
      chat_template: true

The problems and their train / held-out split are the arithmetic task's (same seed and args: same split), so
with the policy recipe's seed and ``eval_size`` the held-out problems are judge_over_server's and never trained
on. Per split exactly half the answers are right (which ones: seeded), the others near misses a policy writes
(+-1, +-10, the sum with its carries forgotten; never negative, never the sum). Answers are written in the forms
of ``ANSWER_FORMS`` (the trained policy's ``47 + 8 = 55.`` and prose like SmolLM2's own), drawn per row.

``sft_target`` works the sum out, reads the answer's number back, then gives the verdict the ``judge`` reward
and ``judge_agreement`` parse: ``47 + 8 = 55. The answer says 54, which is wrong. Score: 0``. ``label`` is
1 (right) or 0 (wrong), ``form`` ``pointwise``: the row is ``judge_agreement``'s to score directly (one turn,
no environment). ``rubric: solve_first`` is not offered: its two turns need the ``simulated_user`` environment
and a first-turn target, which these rows do not carry.
"""

from __future__ import annotations

import random

from rlxf.data.arithmetic import (
    add_without_carry,
    addends,
    arithmetic_row,
    arithmetic_task,
    check_arithmetic_args,
)
from rlxf.data.math_judge_rubrics import NEAR_MISSES, RUBRICS, fill_rubric
from rlxf.data.tasks import TASKS, TaskSplits, task_check

QUESTION = "What is {a} {op_word} {b}?"  # smollm2_grpo.yaml's
# the one-message rubrics of judge_over_server this task can train on
TRAINABLE_RUBRICS = ("one_turn", "reference")
# name -> how an answer is written: the trained policy's equation, and prose as the shipped model answers
ANSWER_FORMS: dict[str, str] = {
    "equation": "{a} + {b} = {claim}.",
    "answer_is": "The answer is {claim}.",
    "working": "To add {a} and {b}, we add the ones and then the tens, so the sum is {claim}.",
}


def near_miss(a: int, b: int, rng: random.Random) -> int:
    """A wrong sum: one of the ``NEAR_MISSES`` offsets, or the sum with its carries forgotten where there is a
    carry (for a one-digit ``b`` that is the sum - 10 again: forgetting carries is the likelier slip)."""
    truth = a + b
    candidates = [truth + d for d in NEAR_MISSES] + [add_without_carry(a, b)]
    return rng.choice([c for c in candidates if c >= 0 and c != truth])  # a negative sum would be too easy to spot


def verdict_target(a: int, b: int, claim: int) -> str:
    """The judge's working, the answer read back, the verdict (the ``Score:`` mark appears once: a second one,
    even agreeing, is what a hedging judge writes)."""
    right = claim == a + b
    return f"{a} + {b} = {a + b}. The answer says {claim}, which is {'correct' if right else 'wrong'}. " \
           f"Score: {int(right)}"


def judge_row(a: int, b: int, claim: int, form: str, rubric: str, question: str) -> dict:
    asked = arithmetic_row(a, "+", b, question=question)["prompt"]
    response = ANSWER_FORMS[form].format(a=a, b=b, claim=claim)
    return {"prompt": fill_rubric(RUBRICS[rubric], asked, response, str(a + b)), "sft_target": verdict_target(a, b, claim),
            "label": int(claim == a + b), "form": "pointwise", "question": asked, "response": response,
            "answer": str(a + b), "claim": str(claim), "answer_form": form}


@task_check("answer_judge")
def check_answer_judge_args(
    eval_size: int, digits: int = 2, b_digits: int | None = 1, ops: str = "+", question: str | None = QUESTION,
    rubric: str = "one_turn", answer_forms: list[str] | None = None, **_,
) -> None:
    """What ``answer_judge_task`` refuses, named by its ``data.task_args`` key (run when the recipe loads)."""
    if ops != "+":
        raise ValueError(f"data.task_args.ops={ops!r}: answer_judge judges sums only; use ops='+'")
    if rubric not in TRAINABLE_RUBRICS:
        raise ValueError(f"data.task_args.rubric={rubric!r}: known: {', '.join(TRAINABLE_RUBRICS)} (solve_first "
                         "is two turns, which this one-turn task does not build)")
    forms = list(ANSWER_FORMS) if answer_forms is None else list(answer_forms)
    unknown = [f for f in forms if f not in ANSWER_FORMS]
    if unknown or not forms:
        raise ValueError(f"data.task_args.answer_forms={answer_forms!r}: unknown {unknown or 'none given'}; "
                         f"known: {', '.join(ANSWER_FORMS)}")
    check_arithmetic_args(eval_size, digits=digits, ops=ops, b_digits=b_digits, question=question)


@TASKS.register("answer_judge")
def answer_judge_task(
    seed: int, eval_size: int, digits: int = 2, b_digits: int | None = 1, ops: str = "+",
    question: str | None = QUESTION, rubric: str = "one_turn", answer_forms: list[str] | None = None,
) -> TaskSplits:
    check_answer_judge_args(eval_size, digits, b_digits, ops, question, rubric, answer_forms)
    forms = list(ANSWER_FORMS) if answer_forms is None else list(answer_forms)
    # the bare `a+b=` prompts: the same problems and split as the policy's task (its question only rewords them)
    problems = arithmetic_task(seed, eval_size, digits=digits, ops="+", b_digits=b_digits)
    rng = random.Random(seed + 5)

    def rows(split: list[dict]) -> list[dict]:
        right = set(rng.sample(range(len(split)), len(split) // 2))  # exactly half right, whichever the seed
        out = []
        for i, problem in enumerate(split):
            a, b = addends(problem["prompt"])
            claim = a + b if i in right else near_miss(a, b, rng)
            out.append(judge_row(a, b, claim, rng.choice(forms), rubric, question))
        return out

    return TaskSplits(train=rows(problems.train), eval=rows(problems.eval))
