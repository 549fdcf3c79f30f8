"""Turning rows into prompt token ids, and a resumable seeded stream of training prompts."""

from __future__ import annotations

import random

from transformers import PreTrainedTokenizerBase

from rlxf.data.tasks import TASKS, TaskSplits


def load_task(data_config, seed: int) -> TaskSplits:
    # Importing the modules registers their tasks.
    from rlxf.data import (  # noqa: F401
        arithmetic,
        files,
        humaneval,
        judge_task,
        preferences,
        reasoning_gym,
        repeat,
        tool_arithmetic,
    )

    args = dict(data_config.task_args)
    if data_config.path is not None:  # the file tasks (file, preference_file)
        args.update(path=data_config.path, eval_path=data_config.eval_path)
    return TASKS.get(data_config.task)(seed=seed, eval_size=data_config.eval_size, **args)


def render_prompt(row: dict, tokenizer: PreTrainedTokenizerBase, chat_template: bool) -> str:
    if "messages" in row:
        return tokenizer.apply_chat_template(row["messages"], tokenize=False, add_generation_prompt=True)
    if chat_template:
        messages = [{"role": "user", "content": row["prompt"]}]
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return row["prompt"]


def encode_prompts(
    rows: list[dict], tokenizer: PreTrainedTokenizerBase, chat_template: bool, max_tokens: int
) -> list[list[int]]:
    texts = [render_prompt(row, tokenizer, chat_template) for row in rows]
    encoded = tokenizer(texts, add_special_tokens=False)["input_ids"]
    for text, ids in zip(texts, encoded):
        if len(ids) > max_tokens:
            raise ValueError(
                f"prompt of {len(ids)} tokens exceeds data.max_prompt_tokens={max_tokens}: {text[:80]!r}"
            )
    return encoded


class PromptStream:
    """Endless seeded passes over the training rows; ``position`` makes resume exact.

    Pass ``k`` visits the rows in the order of a shuffle seeded by ``(seed, k)``, so the stream is a
    pure function of ``(seed, position)`` — a resumed run draws exactly the prompts the
    uninterrupted run would have drawn.
    """

    def __init__(self, rows: list[dict], seed: int, position: int = 0) -> None:
        if not rows:
            raise ValueError("the training split is empty")
        self.rows = rows
        self.seed = seed
        self.position = position
        self._order_pass = -1
        self._order: list[int] = []

    def _order_for(self, pass_index: int) -> list[int]:
        if pass_index != self._order_pass:
            order = list(range(len(self.rows)))
            random.Random(f"{self.seed}:{pass_index}").shuffle(order)
            self._order, self._order_pass = order, pass_index
        return self._order

    def take(self, count: int) -> list[dict]:
        out = []
        for _ in range(count):
            pass_index, offset = divmod(self.position, len(self.rows))
            out.append(self.rows[self._order_for(pass_index)[offset]])
            self.position += 1
        return out
