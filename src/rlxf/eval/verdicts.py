"""Whether a scored response solved its problem: the verdict behind accuracy, pass@k and maj@k.

The first reward component named in ``SOLVED_BY`` that the reward reports decides (``correct`` from
the answer rewards, ``pass_fraction`` == 1 from ``code_tests``: every test passed, whatever the score's
partial credit); a reward with neither is judged by its score > 0.
"""

from __future__ import annotations

from collections.abc import Callable

from rlxf.rewards.base import RewardOutput

SOLVED_BY: dict[str, Callable[[float], bool]] = {
    "correct": lambda value: value > 0,
    "pass_fraction": lambda value: value >= 1.0,
}


def solved_flags(out: RewardOutput) -> list[float]:
    """1.0 / 0.0 per response of ``out``."""
    for name, rule in SOLVED_BY.items():
        if name in out.components:
            return [float(rule(v)) for v in out.components[name]]
    return [float(score > 0) for score in out.scores]
