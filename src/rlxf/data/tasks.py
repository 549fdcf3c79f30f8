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


TASKS: Registry = Registry("task")
