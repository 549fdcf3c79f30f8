"""Multi-digit arithmetic with verifiable answers: the default recipe's task.

Problems ``a+b=`` (and ``-``, ``*`` when asked) with operands of up to ``digits`` digits. The held-out
eval split is a seeded sample of the problem space, removed from the train split, so evaluation
never sees a trained problem. The reference response is the bare number.
"""

from __future__ import annotations

import operator
import random

from rlxf.data.tasks import TASKS, TaskSplits

OPERATORS = {"+": operator.add, "-": operator.sub, "*": operator.mul}


def arithmetic_row(a: int, op: str, b: int) -> dict:
    answer = OPERATORS[op](a, b)
    return {"prompt": f"{a}{op}{b}=", "answer": str(answer), "sft_target": str(answer)}


@TASKS.register("arithmetic")
def arithmetic_task(
    seed: int, eval_size: int, digits: int = 2, ops: str = "+", min_digits: int = 1
) -> TaskSplits:
    unknown = set(ops) - set(OPERATORS)
    if unknown:
        raise ValueError(f"arithmetic task: unknown operators {sorted(unknown)}; known: {sorted(OPERATORS)}")
    low, high = (10 ** (min_digits - 1) if min_digits > 1 else 0), 10**digits
    problems = [(a, op, b) for op in ops for a in range(low, high) for b in range(low, high)]
    if eval_size >= len(problems):
        raise ValueError(f"arithmetic task: eval_size {eval_size} leaves no training problems")
    rng = random.Random(seed)
    held_out = set(rng.sample(range(len(problems)), eval_size))
    train = [arithmetic_row(*p) for i, p in enumerate(problems) if i not in held_out]
    evals = [arithmetic_row(*problems[i]) for i in sorted(held_out)]
    return TaskSplits(train=train, eval=evals)
