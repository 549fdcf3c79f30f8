"""Registered tasks: each builds seeded train and held-out eval rows.

A row is a dict with ``prompt`` (text) or ``messages`` (chat), plus whatever metadata the reward
needs (``answer``, ``tests``, ...). ``sft_target`` is the reference response used by the SFT stage.
"""

from __future__ import annotations

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
}
TASKS: Registry = Registry("task", modules=TASK_MODULES)
