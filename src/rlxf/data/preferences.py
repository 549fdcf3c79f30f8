"""Preference datasets: pairs of a chosen and a rejected response to one prompt.

A row takes one of three shapes (plus any metadata, e.g. ``answer`` for a held-out task reward):

* ``{"prompt": str, "chosen": str, "rejected": str}``;
* ``{"messages": [...], "chosen": str, "rejected": str}`` — the chat so far, then two replies;
* ``{"chosen": [...], "rejected": [...]}`` — two whole chats that end in different assistant turns
  (the shared earlier turns are the prompt).

:func:`normalise_pair` turns each into ``(prompt row, chosen text, rejected text)``; the pair's
token batch (:func:`pair_batch`) is the SFT batch of the chosen and the rejected response.
``arithmetic_preferences`` builds pairs locally from the arithmetic task: the true result chosen,
a wrong one rejected (by default the no-carry answer of the sloppy teacher where it differs, else off by
one; ``rejected`` mixes in other kinds of wrong answer, :mod:`rlxf.data.wrong_answers`).
"""

from __future__ import annotations

import random

from rlxf.batch import TrajectoryBatch
from rlxf.data.arithmetic import addends, arithmetic_task, check_arithmetic_args
from rlxf.data.files import DatasetError, read_records, split_files, validate_row
from rlxf.data.sft_examples import sft_batch
from rlxf.data.tasks import KEYWORDS_FROM_CONFIG, TASKS, TaskSplits, task_check
from rlxf.data.wrong_answers import wrong_answer_picker
from rlxf.registry import keyword_problem


def _is_chat(value) -> bool:
    return isinstance(value, list) and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in value
    )


def normalise_pair(row: dict, where: str = "row") -> tuple[dict, str, str]:
    """(the row as a prompt row, chosen text, rejected text); a malformed row raises naming ``where``."""
    chosen, rejected = row.get("chosen"), row.get("rejected")
    if chosen is None or rejected is None:
        raise DatasetError(f"{where}: a preference row needs `chosen` and `rejected`")
    meta = {k: v for k, v in row.items() if k not in ("chosen", "rejected")}
    if isinstance(chosen, str) and isinstance(rejected, str):
        try:
            validate_row(meta, where)
        except DatasetError:
            raise DatasetError(f"{where}: text `chosen`/`rejected` need a `prompt` (text) or `messages` (chat)") from None
        return meta, chosen, rejected
    if _is_chat(chosen) and _is_chat(rejected):
        if not chosen or not rejected or chosen[-1]["role"] != "assistant" or rejected[-1]["role"] != "assistant":
            raise DatasetError(f"{where}: chat `chosen`/`rejected` must each end with an assistant turn")
        if chosen[:-1] != rejected[:-1]:
            raise DatasetError(f"{where}: chat `chosen` and `rejected` must share every turn but the last")
        return {**meta, "messages": chosen[:-1]}, chosen[-1]["content"], rejected[-1]["content"]
    raise DatasetError(f"{where}: `chosen` and `rejected` must both be text or both be chats ({{role, content}} lists)")


def read_preference_rows(path: str) -> list[dict]:
    """Rows of a JSONL / Parquet preference file, each checked (errors name ``file:line``)."""
    rows = read_records(path)
    for number, row in enumerate(rows, start=1):
        normalise_pair(row, f"{path}:{number}")
    return rows


def pair_batch(rows: list[dict], tokenizer, chat_template: bool, max_prompt_tokens: int) -> TrajectoryBatch:
    """2B rows: the B chosen responses, then the B rejected ones (same prompts, same order).

    Prompt tokens are masked out (``loss_mask`` covers the response and its end-of-sequence only).
    """
    pairs = [normalise_pair(r) for r in rows]
    as_targets = [{**p, "sft_target": c} for p, c, _ in pairs] + [{**p, "sft_target": r} for p, _, r in pairs]
    return sft_batch(as_targets, tokenizer, chat_template, max_prompt_tokens)


@task_check("arithmetic_preferences")
def check_arithmetic_preferences_args(eval_size: int, rejected: dict[str, float] | None = None, **task_args) -> None:
    """What ``arithmetic_preferences`` passes on to the arithmetic task is checked as that task's own
    ``data.task_args`` are (it takes any keyword, so the generic check cannot see a wrong one)."""
    if set(task_args.get("ops", "+")) != {"+"} or task_args.get("reverse"):
        raise ValueError("arithmetic_preferences: only forward addition (ops '+') is supported")
    problem = keyword_problem(arithmetic_task, task_args, "data.task_args", skip=KEYWORDS_FROM_CONFIG)
    if problem:
        raise ValueError(problem)
    check_arithmetic_args(eval_size, **task_args)


@TASKS.register("arithmetic_preferences")
def arithmetic_preferences(seed: int, eval_size: int, rejected: dict[str, float] | None = None,
                           **task_args) -> TaskSplits:
    """The arithmetic task (same split, same ``sft_target``) with ``chosen`` / ``rejected`` added.

    ``rejected``: weights of the kinds of wrong answer (:mod:`rlxf.data.wrong_answers`); default
    ``{teacher: 1}``, the sloppy teacher's mistakes."""
    if set(task_args.get("ops", "+")) != {"+"} or task_args.get("reverse"):
        raise ValueError("arithmetic_preferences: only forward addition (ops '+') is supported")
    splits = arithmetic_task(seed, eval_size, **task_args)
    wrong_answer = wrong_answer_picker(rejected or {"teacher": 1.0}, random.Random(seed + 2))

    def with_pair(row: dict) -> dict:
        a, b = addends(row["prompt"])
        return {**row, "chosen": row["answer"], "rejected": wrong_answer(a, b)}

    return TaskSplits(train=[with_pair(r) for r in splits.train], eval=[with_pair(r) for r in splits.eval])


@TASKS.register("preference_file")
def preference_file(seed: int, eval_size: int, path: str, eval_path: str | None = None) -> TaskSplits:
    """Preference pairs from ``path`` (see ``files.split_files`` for the held-out split)."""
    return split_files(read_preference_rows, path, eval_path, eval_size)
