"""The environment protocol, one instance per trajectory.

    env.reset(task)  -> observation                       # the first prompt (text), or None
    env.step(action) -> (observation, reward, done, info)  # action: the policy's turn, decoded

Either method may be ``async def``; the multi-turn rollout (``roles/env_rollout.py``) runs the
environments' steps concurrently (at most ``env.max_concurrent_steps`` at once) and each trajectory
decodes its next turn as soon as its own environment answers (no barrier across the batch, unless
``env.turn_barrier``). ``task`` is the dataset row. An observation is text (tokenized on its own,
never together with the transcript), a list of token ids (used as is), or None/"" (no tokens).
``reset`` returning None means "the row's prompt, rendered as in single-turn runs".
``reward`` is this turn's reward (the row's ``turn_rewards``): sequence-level estimators see their sum,
the turn-level ones (``turn_grpo``, ``gigpo``, ``turn_gae``; ``algos/turns.py``) credit each to the turn
that earned it. ``info["components"]`` (a dict of floats) on the last step is logged as reward
components (e.g. ``correct``, which held-out evaluation reports as accuracy).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from rlxf.registry import Registry

Observation = str | list[int] | None
StepResult = tuple[Observation, float, bool, dict]


class Environment(Protocol):
    def reset(self, task: dict) -> Observation | Awaitable[Observation]: ...

    def step(self, action: str) -> StepResult | Awaitable[StepResult]: ...


# name -> module that registers it, imported on first use
ENV_MODULES = {
    "single_turn": "rlxf.envs.single_turn", "tool_use": "rlxf.envs.tool_use",
    "simulated_user": "rlxf.envs.simulated_user", "openai_agent": "rlxf.envs.openai_agent",
    "arithmetic_chain": "rlxf.envs.arithmetic_chain", "verifiers": "rlxf.envs.verifiers_env",
    "openenv": "rlxf.envs.openenv_env",
}
ENVS: Registry[Callable[..., Environment]] = Registry("environment", modules=ENV_MODULES)


def env_class(name: str) -> Callable[..., Environment]:
    """A registered name or a dotted path ``module:Class``. A class with ``rollout_role`` (``module:Class``)
    drives its own rollout (e.g. ``openai_agent``); the others take turns in ``roles/env_rollout.py``."""
    from rlxf.rewards.registry import import_object

    return ENVS.get(name) if name in ENVS.names() else import_object(name)


def env_problem(name: str, kwargs: dict[str, Any]) -> str | None:
    """What is wrong with ``env.name`` / ``env.kwargs`` (an unknown name, a module that does not import,
    a keyword the class does not take, a value of the wrong type), checked when the recipe loads; or None."""
    from rlxf.registry import keyword_problem

    if name not in ENVS.names() and ":" not in name and "." not in name:
        return f"unknown env.name {name!r}; known: {', '.join(ENVS.names())} (or a dotted path module:Class)"
    if name not in ENVS.names():  # a dotted path is imported when the run builds it (as a reward's is)
        return None
    try:
        cls = env_class(name)
    except (KeyError, ValueError) as err:
        return f"env.name {name!r}: {str(err).strip(chr(34))}"
    return keyword_problem(cls, kwargs, "env.kwargs")


def env_factory(name: str, kwargs: dict[str, Any] | None = None) -> Callable[[], Environment]:
    """A zero-argument constructor: a registered name or a dotted path ``module:Class``. A value the class
    refuses (ValueError, or a KeyError of a name it looks up) is one ConfigError naming ``env.kwargs``."""
    from rlxf.config_error import ConfigError

    cls = env_class(name)
    kwargs = dict(kwargs or {})

    def make() -> Environment:
        try:
            return cls(**kwargs)
        except ConfigError:
            raise
        except (ValueError, KeyError) as err:  # a value it refuses, or a name it looks up (an unknown tool)
            raise ConfigError(f"env.name={name} with env.kwargs {kwargs}: {str(err).strip(chr(34))}") from err

    return make
