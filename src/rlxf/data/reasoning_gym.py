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
"""

from __future__ import annotations

from typing import Any

from rlxf.data.tasks import TASKS, TaskSplits


def import_reasoning_gym():
    try:
        import reasoning_gym
    except ImportError:
        raise ImportError("the reasoning_gym task needs reasoning-gym: pip install 'rlxf[reasoning]'") from None
    return reasoning_gym


def entry_row(entry: dict, prompt_template: str) -> dict:
    return {
        "prompt": prompt_template.format(question=entry["question"]),
        "answer": str(entry["answer"]),
        "sft_target": str(entry["answer"]),
        "rg_entry": entry,
    }


@TASKS.register("reasoning_gym")
def reasoning_gym_task(
    seed: int, eval_size: int, dataset: str, size: int = 2000, dataset_args: dict[str, Any] | None = None,
    prompt_template: str = "{question}\n",
) -> TaskSplits:
    rg = import_reasoning_gym()
    args = dataset_args or {}
    train = rg.create_dataset(dataset, size=size, seed=seed, **args)
    held_out = rg.create_dataset(dataset, size=eval_size, seed=seed + 1_000_003, **args)
    held_out_questions = {entry["question"] for entry in held_out}
    rows = [entry_row(e, prompt_template) for e in train if e["question"] not in held_out_questions]
    if not rows:
        raise ValueError(f"reasoning_gym task {dataset!r}: every training entry is also held out")
    return TaskSplits(train=rows, eval=[entry_row(e, prompt_template) for e in held_out])
