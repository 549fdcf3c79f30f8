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
from rlxf.loops import LOOPS, steps_key
from rlxf.loops.refusals import refusal_of
from rlxf.rollout.engine import ROLLOUT_ENGINES, engine_options_problem
from rlxf.runtime import RUNTIMES

__all__ = ["build_config", "check_config", "load_config", "refuse_foreign_steps", "resume_changes"]


def check_config(config: Config) -> Config:
    """``config`` itself when its loop is known and runs with its settings; else one ConfigError."""
    if config.loop not in LOOPS.names():
        raise ConfigError(f"config key 'loop': unknown loop {config.loop!r}; known: {LOOPS.names()}")
    for key, value, registry in (("rollout.engine", config.rollout.engine, ROLLOUT_ENGINES),
                                 ("runtime.kind", config.runtime.kind, RUNTIMES)):
        if value not in registry.names():
            raise ConfigError(f"unknown {key} {value!r}; known: {registry.names()}")
    problem = refusal_of(config) or engine_options_problem(config.rollout.engine, config.rollout.engine_options)
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


def refuse_foreign_steps(config: Config, overrides: list[str] | tuple[str, ...]) -> None:
    """``train.steps=N`` on the command line of a loop that counts its steps with another key (``sft.steps``,
    ``preference.steps``) would be ignored: refused, naming the key that counts. Only the command line is
    read: a recipe or a saved ``config.yaml`` spells out every key, ``train.steps`` among them."""
    key = steps_key(config.loop)
    for text in overrides:
        name, _, value = text.partition("=")
        if name == "train.steps" and key != "train.steps":
            raise ConfigError(f"train.steps={value}: loop {config.loop} counts its steps with {key} "
                              f"(train.steps is the RL loops'): write {key}={value}")


# Loops whose checkpoints hold the same states (the RL loops: actor, critic, the prompt stream), so one can
# continue the other's run; any other pair would fail on a file the other loop never wrote.
SAME_CHECKPOINTS = {"rl_async": "rl"}


def _checkpoint_kind(loop: str) -> str:
    return SAME_CHECKPOINTS.get(loop, loop)


def resume_changes(saved: Config, config: Config) -> list[str]:
    """What a resume with overrides changes in what trains: one line naming every changed key (none when
    nothing but the step count changed). A change the checkpoint cannot carry is refused: a critic the
    checkpoint does not hold; another loop (each loop's checkpoint holds its own trainers' states)."""
    if _checkpoint_kind(config.loop) != _checkpoint_kind(saved.loop):
        raise ConfigError(f"--resume {config.run_dir}: the run was trained by loop {saved.loop}, and its checkpoints "
                          f"cannot continue as loop {config.loop}: start a new run from its policy (loop={config.loop} "
                          "model.path=RUN/checkpoints/step_N/policy)")
    if config.algorithm.use_critic and not saved.algorithm.use_critic and config.loop in ("rl", "rl_async"):
        raise ConfigError(f"--resume {config.run_dir}: algorithm.name={config.algorithm.name} trains a critic "
                          f"(use_critic=true), and the run ({saved.algorithm.name}) has none in its checkpoints: "
                          "start a new run from its policy (model.path=RUN/checkpoints/step_N/policy) instead")
    old, new = _flat(saved.model_dump(mode="json")), _flat(config.model_dump(mode="json"))
    ignored = {"run_dir", steps_key(config.loop)}
    changed = [f"{k} {old.get(k)} -> {new.get(k)}" for k in sorted(old.keys() | new.keys())
               if k not in ignored and old.get(k) != new.get(k)]
    return [f"resuming with changed settings (the steps from the checkpoint on train with these): "
            f"{', '.join(changed)}"] if changed else []


def _flat(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out
