"""Loading a recipe with every check: the typed tree (``rlxf.config``) plus what only the loops can say.

``rlxf.config`` is the typed tree and imports no loop, so every layer may use its types. What needs the
loop registry to decide — is ``loop`` a known controller, can this loop run with this rollout engine,
runtime and train backend (``rlxf.loops.LOOP_NEEDS``) — sits here, above the loops it consults, and
runs when a recipe loads: the cli, the studio and any caller of :func:`load_config` get it, so a run
never builds its models and then dies on a pair it cannot run. So do the environment's name and keyword
arguments (``rlxf.envs``).
"""

from __future__ import annotations

from pathlib import Path

from rlxf.config import Config, ConfigError, build_config_tree, read_config_tree
from rlxf.envs.base import env_problem
from rlxf.loops import LOOPS
from rlxf.loops.refusals import refusal_of
from rlxf.rollout.engine import ROLLOUT_ENGINES
from rlxf.runtime import RUNTIMES

__all__ = ["build_config", "check_config", "load_config"]


def check_config(config: Config) -> Config:
    """``config`` itself when its loop is known and runs with its settings; else one ConfigError."""
    if config.loop not in LOOPS.names():
        raise ConfigError(f"config key 'loop': unknown loop {config.loop!r}; known: {LOOPS.names()}")
    for key, value, registry in (("rollout.engine", config.rollout.engine, ROLLOUT_ENGINES),
                                 ("runtime.kind", config.runtime.kind, RUNTIMES)):
        if value not in registry.names():
            raise ConfigError(f"unknown {key} {value!r}; known: {registry.names()}")
    problem = refusal_of(config)
    if not problem and config.env.name:
        problem = env_problem(config.env.name, config.env.kwargs)
    if problem:
        raise ConfigError(problem)
    return config


def build_config(tree: dict) -> Config:
    """The checked config of a plain tree (a recipe already read, a saved ``config.yaml``)."""
    return check_config(build_config_tree(tree))


def load_config(recipe: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """The checked config of ``recipe`` (the default recipe when None) with dotted ``key=value`` overrides."""
    return build_config(read_config_tree(recipe, overrides))
