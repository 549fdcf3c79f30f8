"""Any ``reasoning-gym`` dataset as an rlxf task (``pip install 'rlxf[reasoning]'``).

    data:
      task: reasoning_gym
      task_args: {dataset: chain_sum, size: 5000, dataset_args: {min_terms: 2, max_terms: 2}}
    reward:
      function: reasoning_gym     # the dataset's own scorer

Rows: ``prompt`` = ``prompt_template`` filled with the entry's ``question``; ``answer`` and
``sft_target`` = the entry's answer; ``rg_entry`` = the whole entry (what the scorer needs). The eval
split is ``eval_size`` entries generated with another seed; training entries with the same question are
dropped, so evaluation never sees a trained problem (``size`` is then an upper bound).

``question_pattern`` (a regex) shortens the prompt for small models: where it matches the question,
``{question}`` is its first group (``"problem: (.*)"`` turns chain_sum's long sentence into
``15 - 43 =``). The scorer still gets the whole entry.

``sloppy_teacher=p`` (the device of the default arithmetic recipe): a seeded fraction ``p`` of the
training entries whose question ends in a two-term integer sum or difference (``15 - 43 =``, as in
chain_sum) get an ``sft_target`` from a teacher that forgets carries and borrows (``15 + 47`` ->
``52``, ``43 - 15`` -> ``38``); ``answer`` and the reward stay the dataset's own. Entries without a
carry or borrow are unaffected, so the model learns the format and most of the skill from SFT and RL
against the dataset's scorer fixes the rest.
"""

from __future__ import annotations

import random
import re
from typing import Any

from rlxf.data.tasks import TASKS, TaskSplits

TWO_TERMS = re.compile(r"(\d+) ([+-]) (\d+) =\s*$")


def import_reasoning_gym():
    try:
        import reasoning_gym
    except ImportError:
        raise ImportError("the reasoning_gym task needs reasoning-gym: pip install 'rlxf[reasoning]'") from None
    return reasoning_gym


def digitwise(a: int, b: int, sign: int) -> int:
    """Digit-wise ``a + b`` (sign 1) or ``a - b`` (sign -1), each digit mod 10: no carries or borrows."""
    result, place = 0, 1
    while a or b:
        result += ((a % 10 + sign * (b % 10)) % 10) * place
        a, b, place = a // 10, b // 10, place * 10
    return result


def sloppy_answer(question: str) -> str | None:
    """The carry- and borrow-forgetting teacher's answer to ``a + b =`` / ``a - b =``; None otherwise."""
    match = TWO_TERMS.search(question)
    if match is None:
        return None
    a, op, b = int(match.group(1)), match.group(2), int(match.group(3))
    if op == "+":
        return str(digitwise(a, b, 1))
    return str(digitwise(a, b, -1)) if a >= b else f"-{digitwise(b, a, -1)}"


def entry_row(entry: dict, prompt_template: str, question_pattern: str | None = None, sloppy: bool = False) -> dict:
    question = entry["question"]
    match = re.search(question_pattern, question) if question_pattern else None
    target = str(entry["answer"])
    if sloppy:
        target = sloppy_answer(question) or target
    return {
        "prompt": prompt_template.format(question=match.group(1) if match else question),
        "answer": str(entry["answer"]),
        "sft_target": target,
        "rg_entry": entry,
    }


@TASKS.register("reasoning_gym")
def reasoning_gym_task(
    seed: int, eval_size: int, dataset: str, size: int = 2000, dataset_args: dict[str, Any] | None = None,
    prompt_template: str = "{question}\n", question_pattern: str | None = None, sloppy_teacher: float = 0.0,
) -> TaskSplits:
    if not 0.0 <= sloppy_teacher <= 1.0:
        raise ValueError(f"reasoning_gym task: sloppy_teacher must be in [0, 1], got {sloppy_teacher}")
    rg = import_reasoning_gym()
    args = dataset_args or {}
    train = rg.create_dataset(dataset, size=size, seed=seed, **args)
    held_out = rg.create_dataset(dataset, size=eval_size, seed=seed + 1_000_003, **args)
    held_out_questions = {entry["question"] for entry in held_out}
    teacher = random.Random(seed + 1)
    rows = [
        entry_row(e, prompt_template, question_pattern, sloppy=teacher.random() < sloppy_teacher)
        for e in train if e["question"] not in held_out_questions
    ]
    if not rows:
        raise ValueError(f"reasoning_gym task {dataset!r}: every training entry is also held out")
    return TaskSplits(train=rows, eval=[entry_row(e, prompt_template, question_pattern) for e in held_out])
