"""Rewards by name (``reward.function: arithmetic``) or by dotted path (``my_pkg.rewards:score``)."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from rlxf.registry import Registry
from rlxf.rewards.base import Reward, as_reward

# name -> module that registers it, imported on first use (heavy imports stay lazy)
REWARD_MODULES = {
    "arithmetic": "rlxf.rewards.arithmetic", "math": "rlxf.rewards.math_answer", "format": "rlxf.rewards.format",
    "length": "rlxf.rewards.length", "mix": "rlxf.rewards.mix", "code_tests": "rlxf.rewards.code_reward",
    "reward_model": "rlxf.rewards.reward_model", "judge": "rlxf.rewards.judge", "remote": "rlxf.rewards.remote",
    "env": "rlxf.rewards.env_reward", "reasoning_gym": "rlxf.rewards.reasoning_gym",
    "parallel": "rlxf.rewards.parallel", "judge_agreement": "rlxf.rewards.judge_agreement",
}
REWARDS: Registry = Registry("reward", modules=REWARD_MODULES)


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


def build_reward(name: str, kwargs: dict | None = None) -> Reward:
    kwargs = kwargs or {}
    factory = REWARDS.get(name) if name in REWARDS.names() else import_object(name)
    if isinstance(factory, type) or kwargs:
        _check_kwargs(factory, kwargs)
        return as_reward(factory(**kwargs))
    return as_reward(factory)


def _check_kwargs(factory, kwargs: dict) -> None:
    """A ``reward.kwargs`` key the factory does not take is a ValueError naming it (not a TypeError from deep inside)."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # no signature to check against (a builtin): the call will tell
        return
    try:
        signature.bind(**kwargs)
    except TypeError as err:
        raise ValueError(f"reward.kwargs {sorted(kwargs)}: {err}") from None
