"""A judge for the real-model recipe's task, asked as a served judge is asked: rows over the sums asked in words
of ``recipes/smollm2_grpo.yaml``, each prompt a plain-words rubric of ``benchmarks/judge_over_server.py``
(``data/math_judge_rubrics.py``) filled with the question and one answer (pointwise) or two (pairwise).

    data:
      task: answer_judge
      task_args: {digits: 2, b_digits: 1, ops: "+", question: "What is {a} {op_word} {b}?", rubric: one_turn}
      chat_template: true

The problems and their train / held-out split are the arithmetic task's (same seed and args: same split), so
with the policy recipe's seed and ``eval_size`` the held-out problems are judge_over_server's and never trained
on. Per split exactly half the answers are right (which ones: seeded), the others near misses a policy writes
(+-1, +-10, the sum with its carries forgotten; never negative, never the sum). Answers are written in the forms
of ``ANSWER_FORMS``, drawn per row: by default the trained policy's ``47 + 8 = 55.`` and prose like SmolLM2's
own; ``rambling`` names another number (the true sum, when the final one is wrong) before its final answer, and
``unfinished`` stops before giving one (always wrong): the two ways a policy games a judge that looks for the right
number anywhere (docs/rewards.md, GRPO against the trained judge, seed 2).

``rubric`` is one name or a list: with a list each row draws its rubric (seeded), so one judge learns several.
``sft_target`` works the sum out, reads the answer's number back, then gives the verdict the ``judge`` reward
and ``judge_agreement`` parse: ``47 + 8 = 55. The answer says 54, which is wrong. Score: 0``; a ``pairwise``
row reads both back and ends ``[[A]]`` or ``[[B]]``. ``label`` is 1 / 0 (pointwise) or ``"A"`` / ``"B"`` (the
right answer's place); per split and rubric exactly half the labels are 1 (pairwise: ``"A"``). ``form`` is
``pointwise`` or ``pairwise``: the row is ``judge_agreement``'s to score directly (one turn, no environment).
``rubric: solve_first`` is not offered: its two turns need the ``simulated_user`` environment and a first-turn
target, which these rows do not carry.
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
from rlxf.data.math_judge_rubrics import NEAR_MISSES, PAIRWISE, RUBRICS, fill_rubric
from rlxf.data.tasks import TASKS, TaskSplits, task_check

QUESTION = "What is {a} {op_word} {b}?"  # smollm2_grpo.yaml's
# the one-message rubrics of judge_over_server this task can train on
TRAINABLE_RUBRICS = ("one_turn", "reference", "pairwise")
# name -> how an answer is written: the trained policy's equation, prose as the shipped model answers, and the
# two forms a gamed policy wrote ({decoy}: another number, the true sum where the final answer is wrong)
ANSWER_FORMS: dict[str, str] = {
    "equation": "{a} + {b} = {claim}.",
    "answer_is": "The answer is {claim}.",
    "working": "To add {a} and {b}, we add the ones and then the tens, so the sum is {claim}.",
    "rambling": "{a} plus {b} is actually {decoy}, but in some places it's written another way, which comes to "
                "{claim}. So, the answer is {claim}.",
    "unfinished": "To add {a} and {b}, we start from {a} and count on; {decoy} is close. So, the answer is",
}
DEFAULT_FORMS = ("equation", "answer_is", "working")  # what smollm2_grm.yaml's measured judge was trained on
NO_ANSWER_FORMS = ("unfinished",)  # forms that state no final answer: only ever a wrong one


def near_miss(a: int, b: int, rng: random.Random) -> int:
    """A wrong sum: one of the ``NEAR_MISSES`` offsets, or the sum with its carries forgotten where there is a
    carry (for a one-digit ``b`` that is the sum - 10 again: forgetting carries is the likelier slip)."""
    truth = a + b
    candidates = [truth + d for d in NEAR_MISSES] + [add_without_carry(a, b)]
    return rng.choice([c for c in candidates if c >= 0 and c != truth])  # a negative sum would be too easy to spot


def read_back(claim: int | None) -> str:
    """What the judge reads in an answer: the number it states, or that it states none."""
    return "gives no final answer" if claim is None else f"says {claim}"


def verdict_target(a: int, b: int, claim: int | None) -> str:
    """The judge's working, the answer read back, the verdict (the ``Score:`` mark appears once: a second one,
    even agreeing, is what a hedging judge writes). ``claim`` None: the answer stated none."""
    right = claim == a + b
    return f"{a} + {b} = {a + b}. The answer {read_back(claim)}, which is {'correct' if right else 'wrong'}. " \
           f"Score: {int(right)}"


def pairwise_target(a: int, b: int, claims: tuple[int | None, int | None]) -> str:
    """Both answers read back in order, then the place of the right one (exactly one of the two is right)."""
    said = [f"Answer {place} {read_back(claim)}, which is {'correct' if claim == a + b else 'wrong'}."
            for place, claim in zip("AB", claims)]
    return f"{a} + {b} = {a + b}. {' '.join(said)} [[{'A' if claims[0] == a + b else 'B'}]]"


def written(form: str, a: int, b: int, claim: int | None, rng: random.Random) -> str:
    """``claim`` in ``form``; a form naming a decoy gets the true sum where the claim is wrong, else a near miss
    (drawn only then: the default forms' rows stay what they were before the decoy forms existed)."""
    needs_decoy = "{decoy}" in ANSWER_FORMS[form]
    decoy = (a + b if claim != a + b else near_miss(a, b, rng)) if needs_decoy else None
    return ANSWER_FORMS[form].format(a=a, b=b, claim=claim, decoy=decoy)


def draw_form(forms: list[str], right: bool, rng: random.Random) -> str:
    return rng.choice([f for f in forms if not (right and f in NO_ANSWER_FORMS)])


def judge_row(a: int, b: int, claim: int | None, form: str, rubric: str, question: str, rng: random.Random) -> dict:
    """One pointwise row: the rubric filled with the question and the answer ``claim`` written in ``form``."""
    asked = arithmetic_row(a, "+", b, question=question)["prompt"]
    response = written(form, a, b, claim, rng)
    return {"prompt": fill_rubric(RUBRICS[rubric], asked, response, str(a + b)), "sft_target": verdict_target(a, b, claim),
            "label": int(claim == a + b), "form": "pointwise", "question": asked, "response": response,
            "answer": str(a + b), "claim": "" if claim is None else str(claim), "answer_form": form,
            "rubric": rubric}


def pairwise_row(a: int, b: int, right_first: bool, forms: list[str], question: str, rng: random.Random) -> dict:
    """One pairwise row: the true sum and a wrong answer, each in a form of its own, the true one as A or B."""
    asked = arithmetic_row(a, "+", b, question=question)["prompt"]
    right_form, wrong_form = draw_form(forms, True, rng), draw_form(forms, False, rng)
    right = (a + b, written(right_form, a, b, a + b, rng))
    wrong_answer = None if wrong_form in NO_ANSWER_FORMS else near_miss(a, b, rng)
    wrong = (wrong_answer, written(wrong_form, a, b, wrong_answer, rng))
    first, second = (right, wrong) if right_first else (wrong, right)
    return {"prompt": PAIRWISE.format(prompt=asked, a=first[1], b=second[1]),
            "sft_target": pairwise_target(a, b, (first[0], second[0])), "label": "A" if right_first else "B",
            "form": "pairwise", "question": asked, "answer": str(a + b), "responses": [first[1], second[1]],
            "answer_form": f"{right_form}/{wrong_form}", "rubric": "pairwise"}


def rubric_names(rubric: str | list[str]) -> list[str]:
    return [rubric] if isinstance(rubric, str) else list(rubric)


@task_check("answer_judge")
def check_answer_judge_args(
    eval_size: int, digits: int = 2, b_digits: int | None = 1, ops: str = "+", question: str | None = QUESTION,
    rubric: str | list[str] = "one_turn", answer_forms: list[str] | None = None, **_,
) -> None:
    """What ``answer_judge_task`` refuses, named by its ``data.task_args`` key (run when the recipe loads)."""
    if ops != "+":
        raise ValueError(f"data.task_args.ops={ops!r}: answer_judge judges sums only; use ops='+'")
    unknown_rubrics = [r for r in rubric_names(rubric) if r not in TRAINABLE_RUBRICS]
    if unknown_rubrics or not rubric_names(rubric):
        raise ValueError(f"data.task_args.rubric={rubric!r}: known: {', '.join(TRAINABLE_RUBRICS)} (solve_first "
                         "is two turns, which this one-turn task does not build)")
    forms = list(DEFAULT_FORMS) if answer_forms is None else list(answer_forms)
    unknown = [f for f in forms if f not in ANSWER_FORMS]
    if unknown or not forms:
        raise ValueError(f"data.task_args.answer_forms={answer_forms!r}: unknown {unknown or 'none given'}; "
                         f"known: {', '.join(ANSWER_FORMS)}")
    if all(f in NO_ANSWER_FORMS for f in forms):
        raise ValueError(f"data.task_args.answer_forms={answer_forms!r}: {', '.join(NO_ANSWER_FORMS)} states no "
                         "answer, so a right answer needs another form beside it")
    check_arithmetic_args(eval_size, digits=digits, ops=ops, b_digits=b_digits, question=question)


@TASKS.register("answer_judge")
def answer_judge_task(
    seed: int, eval_size: int, digits: int = 2, b_digits: int | None = 1, ops: str = "+",
    question: str | None = QUESTION, rubric: str | list[str] = "one_turn", answer_forms: list[str] | None = None,
) -> TaskSplits:
    check_answer_judge_args(eval_size, digits, b_digits, ops, question, rubric, answer_forms)
    forms = list(DEFAULT_FORMS) if answer_forms is None else list(answer_forms)
    rubrics = rubric_names(rubric)
    # the bare `a+b=` prompts: the same problems and split as the policy's task (its question only rewords them)
    problems = arithmetic_task(seed, eval_size, digits=digits, ops="+", b_digits=b_digits)
    rng = random.Random(seed + 5)

    def rows(split: list[dict]) -> list[dict]:
        # one rubric draws nothing, so its rows are the ones written before rubric lists existed
        drawn = [rubrics[0] if len(rubrics) == 1 else rng.choice(rubrics) for _ in split]
        # exactly half of each rubric's rows right (pairwise: the right answer first), whichever the seed
        right: set[int] = set()
        for name in rubrics:
            group = [i for i, r in enumerate(drawn) if r == name]
            right |= {group[j] for j in rng.sample(range(len(group)), len(group) // 2)}
        out = []
        for i, problem in enumerate(split):
            a, b = addends(problem["prompt"])
            if drawn[i] == "pairwise":
                out.append(pairwise_row(a, b, i in right, forms, question, rng))
                continue
            # the miss is drawn before the form (the order of the rows written before unfinished answers existed)
            claim = a + b if i in right else near_miss(a, b, rng)
            form = draw_form(forms, i in right, rng)
            claim = None if form in NO_ANSWER_FORMS else claim
            out.append(judge_row(a, b, claim, form, drawn[i], question, rng))
        return out

    return TaskSplits(train=rows(problems.train), eval=rows(problems.eval))
