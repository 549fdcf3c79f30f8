"""The held-out metrics each loop writes to ``metrics.jsonl``, so that ``rlxf sweep --metric`` is checked
before any seed runs: a misspelt name would otherwise cost every seed's run and then a table of nothing.

The task metrics come from greedy held-out answers (eval/accuracy.py), which every loop but the reward
model's computes; ``eval/reward/NAME`` is one of the reward's components (which depend on the reward).
"""

from __future__ import annotations

TASK = ("eval/accuracy", "eval/reward", "eval/response_length")
FLIPS = ("eval/flipped_to_correct", "eval/flipped_to_wrong")  # RL loops: problems that changed since the last eval
HELD_OUT: dict[str, tuple[str, ...]] = {
    "rl": (*TASK, *FLIPS),
    "rl_async": (*TASK, *FLIPS),
    "sft": TASK,
    "online_dpo": TASK,
    "dpo": (*TASK, "eval/preference_accuracy", "eval/reward_margin", "eval/preference_loss"),
    "reward_model": ("eval/accuracy", "eval/margin", "eval/loss"),  # held-out pairs, not answers
}
COMPONENT_PREFIX = "eval/reward/"


def unknown_metric(metric: str, loop: str) -> str | None:
    """Why ``metric`` is not one ``loop`` writes (naming the ones it does), or None when it is."""
    known = HELD_OUT.get(loop)
    component = metric.startswith(COMPONENT_PREFIX) and len(metric) > len(COMPONENT_PREFIX)
    if known is None or metric in known or (component and "eval/reward" in known):
        return None
    extra = f", or {COMPONENT_PREFIX}NAME (a component of the reward)" if "eval/reward" in known else ""
    return f"--metric {metric}: loop {loop!r} writes no such held-out metric; it writes {', '.join(known)}{extra}"
