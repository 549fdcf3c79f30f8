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
training entries whose question ends in an integer sum or a two-term difference (``4 + 0 + 8`` in
basic_arithmetic, ``15 - 43 =`` in chain_sum) get an ``sft_target`` from a teacher that forgets carries
and borrows (``4 + 0 + 8`` -> ``2``, ``43 - 15`` -> ``38``); ``answer`` and the reward stay the dataset's own. Entries without a
carry or borrow are unaffected, so the model learns the format and most of the skill from SFT and RL
against the dataset's scorer fixes the rest.
"""

from __future__ import annotations

import random
import re
from typing import Any

from rlxf.data.tasks import TASKS, TaskSplits
from rlxf.errors import MissingPackageError

SUM = re.compile(r"(\d+(?:\s*[+-]\s*\d+)+)\D*$")


def import_reasoning_gym():
    try:
        import reasoning_gym
    except ImportError:
        raise MissingPackageError("the reasoning_gym task needs reasoning-gym: pip install 'rlxf[reasoning]'") from None
    return reasoning_gym


def digitwise(terms: list[int], signs: list[int]) -> int:
    """Digit-wise signed sum of non-negative ``terms``, each digit mod 10: no carries or borrows."""
    result, place = 0, 1
    while any(terms):
        result += (sum(s * (t % 10) for t, s in zip(terms, signs)) % 10) * place
        terms, place = [t // 10 for t in terms], place * 10
    return result


def sloppy_answer(question: str) -> str | None:
    """The carry- and borrow-forgetting teacher's answer to a sum ``3 + 5 + 7`` or ``a - b``; None otherwise."""
    match = SUM.search(question)
    if match is None:
        return None
    parts = re.findall(r"\d+|[+-]", match.group(1))
    terms, ops = [int(t) for t in parts[::2]], parts[1::2]
    if "-" not in ops:
        return str(digitwise(terms, [1] * len(terms)))
    if len(terms) != 2:
        return None
    a, b = terms
    return str(digitwise([a, b], [1, -1])) if a >= b else f"-{digitwise([b, a], [1, -1])}"


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
