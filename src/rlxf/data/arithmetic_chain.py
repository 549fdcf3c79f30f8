"""A chain of additions, one per turn, for the ``arithmetic_chain`` environment (envs/arithmetic_chain.py).

A row starts from ``a`` (up to ``digits`` digits) and adds ``steps`` single digits in turn:
``prompt`` ``47+8=``, then the environment shows the true running value and the next addend
(``\\n55+6=``). ``chain`` holds each step's ``expr`` and ``answer``; ``answer`` is the first step's.

``sft_target`` is the transcript the SFT stage imitates, turns ended by ``eos``:
``55</s>\\n55+6=61</s>\\n61+9=70``. With ``sloppy_teacher=p`` each step that carries is demonstrated,
with probability ``p``, by a teacher that forgets the carry (``55+6=51``), and the demonstration ends
there, as the environment ends an episode at a wrong step (``end_at_mistake=False``: the demonstration goes
on past its mistakes, each next step from the true value, as the environment with ``end_at_mistake: false``
does). RL against the environment's per-step rewards then has to find which turn went wrong: the
intermediate rewards are the signal.
"""

from __future__ import annotations

import random

from rlxf.data.arithmetic import add_without_carry
from rlxf.data.tasks import TASKS, TaskSplits, check_rows_in_memory, task_check


def chain_row(start: int, addends: list[int], sloppy: list[bool], eos: str, end_at_mistake: bool = True) -> dict:
    """One chain: its steps, and the demonstration (up to and including the first sloppy step, or every step)."""
    chain, value, turns, demonstrating = [], start, [], True
    for i, (d, wrong) in enumerate(zip(addends, sloppy, strict=True)):
        expr, true = f"{value}+{d}=", value + d
        chain.append({"expr": expr, "answer": str(true)})
        shown = add_without_carry(value, d) if wrong else true
        if demonstrating:
            turns.append((expr if i else "") + str(shown))
        demonstrating = demonstrating and (shown == true or not end_at_mistake)
        value = true
    return {"prompt": chain[0]["expr"], "answer": chain[0]["answer"], "chain": chain,
            "sft_target": f"{eos}\n".join(turns)}


@task_check("arithmetic_chain")
def check_arithmetic_chain_args(eval_size: int, digits: int = 2, steps: int = 3, size: int = 20000,
                                sloppy_teacher: float = 0.0, **_) -> None:
    """What ``arithmetic_chain_task`` cannot build, named by its ``data.task_args`` key."""
    for key, value in (("digits", digits), ("steps", steps), ("size", size)):
        if value < 1:
            raise ValueError(f"data.task_args.{key}={value}: must be 1 or more")
    if not 0.0 <= sloppy_teacher <= 1.0:
        raise ValueError(f"data.task_args.sloppy_teacher={sloppy_teacher}: must be in [0, 1]")
    check_rows_in_memory(size + eval_size, f"data.task_args.size={size} with data.eval_size={eval_size}")
    distinct = 10**digits * 9**steps
    if eval_size >= distinct:
        raise ValueError(f"data.eval_size={eval_size} holds out all {distinct} chains of data.task_args.digits="
                         f"{digits}, steps={steps}: none would be left to train on")


@TASKS.register("arithmetic_chain")
def arithmetic_chain_task(
    seed: int, eval_size: int, digits: int = 2, steps: int = 3, size: int = 20000,
    sloppy_teacher: float = 0.0, eos: str = "</s>", end_at_mistake: bool = True,
) -> TaskSplits:
    check_arithmetic_chain_args(eval_size, digits, steps, size, sloppy_teacher)
    rng = random.Random(seed)
    problems = sorted({(rng.randrange(10**digits), tuple(rng.randint(1, 9) for _ in range(steps)))
                       for _ in range(size + eval_size)})
    rng.shuffle(problems)
    teacher = random.Random(seed + 1)
    rows = []
    for i, (start, addends) in enumerate(problems):
        values = [start + sum(addends[:k]) for k in range(steps)]
        carries = [v % 10 + d >= 10 for v, d in zip(values, addends)]
        sloppy = [i >= eval_size and c and teacher.random() < sloppy_teacher for c in carries]
        rows.append(chain_row(start, list(addends), sloppy, eos, end_at_mistake))
    return TaskSplits(train=rows[eval_size:], eval=rows[:eval_size])
