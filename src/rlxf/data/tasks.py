"""Registered tasks: each builds seeded train and held-out eval rows.

A row is a dict with ``prompt`` (text) or ``messages`` (chat), plus whatever metadata the reward
needs (``answer``, ``tests``, ...). ``sft_target`` is the reference response used by the SFT stage.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

from rlxf.registry import Registry, keyword_problem


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
    "verifiers": "rlxf.data.verifiers_tasks", "answer_judge": "rlxf.data.answer_judge_task",
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


# name -> a cheap check of the task's arguments (a task registers it beside itself with ``@task_check``):
# the values its function would refuse only after the run has started (an unknown operator, a held-out
# split that leaves no training rows), refused when the recipe loads instead. It takes the task's keywords
# (``eval_size`` and ``data.task_args``) and raises ValueError naming the ``data.task_args`` key.
TASK_CHECKS: dict[str, Callable[..., None]] = {}


# Tasks build every row in memory when the run starts (about 0.5 GB per million arithmetic rows, more once
# tokenized): past this many a value like ``digits=9`` would exhaust the memory, or draw rows for hours, after
# the run had started, so the task's check refuses it when the recipe loads.
MAX_TASK_ROWS = 1_000_000


def check_rows_in_memory(rows: int, what: str) -> None:
    """Refuse (ValueError naming ``what``, the keys that set it) a task of more than ``MAX_TASK_ROWS`` rows."""
    if rows > MAX_TASK_ROWS:
        raise ValueError(f"{what}: {rows:,} rows would be built in memory, more than the {MAX_TASK_ROWS:,} a task "
                         "may build; lower it")


def task_check(name: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    def add(check: Callable[..., None]) -> Callable[..., None]:
        TASK_CHECKS[name] = check
        return check

    return add


def task_args_problem(name: str, task_args: dict, eval_size: int) -> str | None:
    """What the registered task ``name`` would refuse in ``data.task_args`` (a value of the wrong type, or
    one its ``task_check`` refuses), or None."""
    task = TASKS.get(name)  # imports the task's module, which registers its check
    problem = keyword_problem(task, task_args, "data.task_args", skip=KEYWORDS_FROM_CONFIG)
    if problem or name not in TASK_CHECKS:
        return problem
    try:
        TASK_CHECKS[name](eval_size=eval_size, **task_args)
    except ValueError as err:
        return str(err)
    return None
