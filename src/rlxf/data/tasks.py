"""Registered tasks: each builds seeded train and held-out eval rows.

A row is a dict with ``prompt`` (text) or ``messages`` (chat), plus whatever metadata the reward
needs (``answer``, ``tests``, ...). ``sft_target`` is the reference response used by the SFT stage.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from rlxf.registry import Registry


@dataclass
class TaskSplits:
    train: list[dict]
    eval: list[dict]


# name -> module that registers it, imported on first use
TASK_MODULES = {
    "arithmetic": "rlxf.data.arithmetic", "arithmetic_preferences": "rlxf.data.preferences",
    "preference_file": "rlxf.data.preferences", "file": "rlxf.data.files", "humaneval": "rlxf.data.humaneval",
    "tool_arithmetic": "rlxf.data.tool_arithmetic", "reasoning_gym": "rlxf.data.reasoning_gym",
    "repeat": "rlxf.data.repeat", "arithmetic_judge": "rlxf.data.judge_task",
    "preference_judge": "rlxf.data.judge_preferences", "arithmetic_chain": "rlxf.data.arithmetic_chain",
}
TASKS: Registry = Registry("task", modules=TASK_MODULES)


# Keywords a task gets from the config itself (seed, data.eval_size, data.path, data.eval_path), not from
# data.task_args.
KEYWORDS_FROM_CONFIG = ("seed", "eval_size", "path", "eval_path")


@dataclass(frozen=True)
class TaskKeywords:
    """What ``data.task_args`` may hold for a task: ``accepted`` (None: any keyword) and ``required``."""

    accepted: frozenset[str] | None
    required: frozenset[str]
    reads_file: bool  # takes ``path``: ``data.path`` feeds it


def task_keywords(name: str) -> TaskKeywords:
    """The keywords of the registered task ``name``'s function (its module is imported)."""
    params = inspect.signature(TASKS.get(name)).parameters.values()
    named = [p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    any_keyword = any(p.kind == p.VAR_KEYWORD for p in params)
    own = [p for p in named if p.name not in KEYWORDS_FROM_CONFIG]
    return TaskKeywords(
        accepted=None if any_keyword else frozenset(p.name for p in own),
        required=frozenset(p.name for p in named if p.default is p.empty and p.name not in ("seed", "eval_size")),
        reads_file=any(p.name == "path" for p in named),
    )
