"""Rewards by name (``reward.function: arithmetic``) or by dotted path (``my_pkg.rewards:score``)."""

from __future__ import annotations

import importlib
from typing import Any

from rlxf.registry import Registry
from rlxf.rewards.base import Reward, as_reward

REWARDS: Registry = Registry("reward")

# Modules whose import registers the built-in rewards (imported on first use; heavy imports stay lazy).
BUILTIN_REWARD_MODULES = (
    "arithmetic", "math_answer", "format", "length", "mix", "code_reward", "reward_model", "judge",
    "remote", "env_reward", "reasoning_gym", "parallel", "judge_agreement",
)


def import_object(dotted: str) -> Any:
    """``package.module:attr`` or ``package.module.attr`` -> the object."""
    module_name, sep, attr = dotted.partition(":")
    if not sep:
        module_name, _, attr = dotted.rpartition(".")
    if not module_name or not attr:
        raise ValueError(f"{dotted!r} is not a registered name or a dotted path module:attr")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(f"cannot import {module_name!r} for {dotted!r}: {err}") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ValueError(f"module {module_name!r} has no attribute {attr!r}") from None


def register_builtin_rewards() -> None:
    for module in BUILTIN_REWARD_MODULES:
        importlib.import_module(f"rlxf.rewards.{module}")


def build_reward(name: str, kwargs: dict | None = None) -> Reward:
    register_builtin_rewards()
    kwargs = kwargs or {}
    factory = REWARDS.get(name) if name in REWARDS else import_object(name)
    if isinstance(factory, type):
        return as_reward(factory(**kwargs))
    if kwargs:
        return as_reward(factory(**kwargs))
    return as_reward(factory)
