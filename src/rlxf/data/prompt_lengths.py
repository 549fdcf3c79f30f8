"""Over-long prompts are found when the dataset loads, not mid-run: each named by file and row, or
dropped with a count when ``data.long_prompts: drop``."""

from __future__ import annotations

import logging

from rlxf.data.files import DatasetError
from rlxf.data.prompt_tokens import encode_prompt_lengths
from rlxf.data.tasks import TaskSplits

logger = logging.getLogger(__name__)


def row_sources(data_config, splits: TaskSplits) -> dict[str, list[str]]:
    """Where each row of each split comes from: ``file:row`` for file tasks, ``task split row N`` else."""
    if data_config.path is None:
        return {
            split: [f"task {data_config.task!r} {split} row {i + 1}" for i in range(len(rows))]
            for split, rows in (("train", splits.train), ("eval", splits.eval))
        }
    train = [f"{data_config.path}:{i + 1}" for i in range(len(splits.train))]
    if data_config.eval_path:
        held_out = [f"{data_config.eval_path}:{i + 1}" for i in range(len(splits.eval))]
    else:  # the last rows of the same file (data/files.py split_files)
        held_out = [f"{data_config.path}:{len(splits.train) + i + 1}" for i in range(len(splits.eval))]
    return {"train": train, "eval": held_out}


def as_prompt(row: dict) -> dict:
    """The part of a row that becomes the prompt: an SFT chat's final assistant turn is its target."""
    messages = row.get("messages")
    if messages and messages[-1].get("role") == "assistant":
        return {**row, "messages": messages[:-1]}
    return row if "messages" in row or "prompt" in row else {"prompt": ""}


def check_prompt_lengths(splits: TaskSplits, tokenizer, data_config) -> TaskSplits:
    """``splits`` with every prompt within ``data.max_prompt_tokens``: raises naming the first rows
    that are longer (``long_prompts: error``) or drops them, logging how many (``drop``)."""
    limit, sources = data_config.max_prompt_tokens, row_sources(data_config, splits)
    kept = {}
    for split, rows in (("train", splits.train), ("eval", splits.eval)):
        lengths = [len(ids) for ids in encode_prompt_lengths([as_prompt(r) for r in rows], tokenizer, data_config.chat_template)[1]] if rows else []
        long = [i for i, n in enumerate(lengths) if n > limit]
        if long and data_config.long_prompts == "error":
            named = ", ".join(f"{sources[split][i]} ({lengths[i]} tokens)" for i in long[:3])
            raise DatasetError(
                f"{len(long)} {split} prompt(s) exceed data.max_prompt_tokens={limit}: {named}"
                f"{' ...' if len(long) > 3 else ''} (raise the limit, or set data.long_prompts=drop)"
            )
        if long:
            logger.warning("dropped %d of %d %s prompts longer than data.max_prompt_tokens=%d",
                           len(long), len(rows), split, limit)
        skip = set(long)
        kept[split] = [row for i, row in enumerate(rows) if i not in skip]
    if not kept["train"]:
        raise DatasetError(f"no training prompt fits data.max_prompt_tokens={limit}")
    return TaskSplits(train=kept["train"], eval=kept["eval"])
