"""Multi-digit arithmetic with verifiable answers: the default recipe's task.

Problems ``a+b=`` (and ``-``, ``*`` when asked): ``a`` has up to ``digits`` digits, ``b`` up to
``b_digits`` (default: ``digits``). The held-out eval split is a seeded sample of the problem
space, removed from the train split, so evaluation never sees a trained problem.

``answer`` is always the true result (what the reward checks). ``sft_target`` is the response the
SFT stage imitates: the true result, except that with ``sloppy_teacher=p`` a seeded fraction ``p`` of
the training additions that carry are demonstrated by a teacher that forgets carries (``347+8=345``).
That is the usual setting of RL from verifiable rewards: demonstrations teach the format and most of
the skill, and RL against a verifier fixes what the demonstrator got wrong.
"""

from __future__ import annotations

import operator
import random

from rlxf.data.tasks import TASKS, TaskSplits, check_rows_in_memory, task_check

OPERATORS = {"+": operator.add, "-": operator.sub, "*": operator.mul}


def add_without_carry(a: int, b: int) -> int:
    """Digit-wise sum mod 10: the answer of a teacher that forgets every carry."""
    result, place = 0, 1
    while a or b:
        result += ((a % 10 + b % 10) % 10) * place
        a, b, place = a // 10, b // 10, place * 10
    return result


# The operator as a word, for ``question`` templates that ask in words ("What is 23 plus 58?").
OPERATOR_WORDS = {"+": "plus", "-": "minus", "*": "times"}


def arithmetic_row(
    a: int, op: str, b: int, reverse: bool = False, sloppy: bool = False, question: str | None = None
) -> dict:
    """One problem. ``question`` (with ``{a}``, ``{b}``, ``{op}``, ``{op_word}``) replaces the bare
    ``a+b=`` prompt, e.g. for an instruct model asked through its chat template."""
    answer = str(OPERATORS[op](a, b))
    target = str(add_without_carry(a, b)) if sloppy and op == "+" else answer
    if reverse:
        answer, target = answer[::-1], target[::-1]
    prompt = f"{a}{op}{b}=" if question is None else question.format(a=a, b=b, op=op, op_word=OPERATOR_WORDS[op])
    return {"prompt": prompt, "answer": answer, "sft_target": target}


def addends(prompt: str) -> tuple[int, int]:
    """``a`` and ``b`` of an addition prompt ``"a+b="`` (the inverse of ``arithmetic_row``'s prompt)."""
    a, b = prompt.rstrip("=").split("+")
    return int(a), int(b)


@task_check("arithmetic")
def check_arithmetic_args(
    eval_size: int, digits: int = 2, ops: str = "+", b_digits: int | None = None, sloppy_teacher: float = 0.0,
    question: str | None = None, **_,
) -> None:
    """What ``arithmetic_task`` refuses, named by its ``data.task_args`` key (run when the recipe loads)."""
    unknown = set(ops) - set(OPERATORS)
    if unknown or not ops:
        raise ValueError(f"data.task_args.ops={ops!r}: unknown operators {sorted(unknown)}; "
                         f"known: {''.join(OPERATORS)} (e.g. ops='+-')")
    for key, value in (("digits", digits), ("b_digits", b_digits)):
        if value is not None and value < 1:
            raise ValueError(f"data.task_args.{key}={value}: must be 1 or more")
    if not 0.0 <= sloppy_teacher <= 1.0:
        raise ValueError(f"data.task_args.sloppy_teacher={sloppy_teacher}: must be in [0, 1]")
    problems = len(set(ops)) * 10**digits * 10 ** (b_digits or digits)
    check_rows_in_memory(problems, f"data.task_args.digits={digits}" + (f", b_digits={b_digits}" if b_digits else "")
                         + (f", ops={ops!r}" if len(set(ops)) > 1 else ""))
    if question is not None:
        check_question(question)
    if eval_size >= problems:
        raise ValueError(f"data.eval_size={eval_size} holds out all {problems} problems of data.task_args.digits="
                         f"{digits}" + (f", b_digits={b_digits}" if b_digits else "") + ": none would be left to "
                         "train on; lower data.eval_size or raise the digits")


def check_question(question: str) -> None:
    """A ``question`` template fills only ``{a}``, ``{b}``, ``{op}`` and ``{op_word}``; one that names another
    field would fail on the first row, after the run had started."""
    try:
        question.format(a=1, b=2, op="+", op_word="plus")
    except (KeyError, IndexError, ValueError) as err:
        why = f"unknown field {{{err.args[0]}}}" if isinstance(err, (KeyError, IndexError)) else str(err)
        raise ValueError(f"data.task_args.question={question!r}: {why}; it may use {{a}}, {{b}}, {{op}}, "
                         "{op_word} (write {{ and }} for a literal brace)") from None


@TASKS.register("arithmetic")
def arithmetic_task(
    seed: int, eval_size: int, digits: int = 2, ops: str = "+", b_digits: int | None = None,
    reverse: bool = False, sloppy_teacher: float = 0.0, question: str | None = None,
) -> TaskSplits:
    check_arithmetic_args(eval_size, digits, ops, b_digits, sloppy_teacher, question)
    problems = [
        (a, op, b) for op in ops for a in range(10**digits) for b in range(10 ** (b_digits or digits))
    ]
    rng = random.Random(seed)
    held_out = set(rng.sample(range(len(problems)), eval_size))
    teacher = random.Random(seed + 1)
    train = [
        arithmetic_row(*p, reverse=reverse, sloppy=teacher.random() < sloppy_teacher, question=question)
        for i, p in enumerate(problems) if i not in held_out
    ]
    evals = [arithmetic_row(*problems[i], reverse=reverse, question=question) for i in sorted(held_out)]
    return TaskSplits(train=train, eval=evals)
