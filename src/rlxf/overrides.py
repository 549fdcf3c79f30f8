"""A recipe file plus ``key.path=value`` overrides -> the plain tree the config validates.

Every mistake here is the user's and gets one :class:`ConfigError` naming the file and line, or the key:
YAML syntax errors, an override without ``=``, a value that is not YAML. One convenience: when an
override changes ``data.task``, the recipe's ``data.task_args`` that the new task does not take are
dropped with a warning (they were written for the recipe's task, not the one asked for).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import yaml

from rlxf.config_error import ConfigError

logger = logging.getLogger(__name__)


def read_recipe(path: Path) -> dict:
    """The recipe's top-level mapping; a YAML syntax error names the file, line and column."""
    if not path.exists():
        raise ConfigError(f"recipe {str(path)!r} does not exist")
    if path.is_dir():
        if (path / "config.yaml").is_file():  # a run folder where a recipe is expected
            raise ConfigError(f"recipe {str(path)!r} is a run folder: rlxf train --resume {path} continues it, "
                              f"{path / 'config.yaml'} is its recipe")
        raise ConfigError(f"recipe {str(path)!r} is a folder, not a YAML recipe file")
    try:
        tree = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"recipe {path}: {_yaml_problem(err)}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"recipe {str(path)!r} cannot be read as YAML text ({err})") from None
    if not isinstance(tree, dict):
        raise ConfigError(f"recipe {str(path)!r} must be a YAML mapping at the top level")
    return tree


def _yaml_problem(err: yaml.YAMLError) -> str:
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
    return f"YAML syntax error at {where}{problem}"


def parse_override(text: str) -> tuple[list[str], Any]:
    if "=" not in text:
        raise ConfigError(f"override {text!r} has no value: write {text}=VALUE (an override is key.path=value)")
    key, raw = text.split("=", 1)
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override {text!r} has an empty key")
    try:
        return key.split("."), _parse_value(raw)
    except yaml.YAMLError as err:
        raise ConfigError(f"override {key}: the value {raw!r} is not valid YAML ({getattr(err, 'problem', err)}); "
                          "close the bracket or brace, or quote it") from None


def _parse_value(raw: str) -> Any:
    """YAML scalars and lists, plus the floats YAML 1.1 reads as strings (``3e-4``)."""
    value = yaml.safe_load(raw) if raw != "" else ""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def apply_override(tree: dict, path: list[str], value: Any) -> None:
    node = tree
    for part in path[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"cannot set {'.'.join(path)}: {part} is not a section")
        node = child
    node[path[-1]] = value


def apply_overrides(tree: dict, overrides: list[str] | tuple[str, ...]) -> dict:
    """``tree`` with the overrides applied, in order (the recipe's foreign task_args dropped, see the module)."""
    data = tree.get("data") if isinstance(tree.get("data"), dict) else {}
    recipe_task, recipe_args = data.get("task"), data.get("task_args")
    recipe_algorithm = dict(tree["algorithm"]) if isinstance(tree.get("algorithm"), dict) else {}
    touched = []
    for text in overrides:
        key, value = parse_override(text)
        apply_override(tree, key, value)
        touched.append(key)
    args_given = any(key[:2] == ["data", "task_args"] or key == ["data"] for key in touched)
    if any(key == ["data", "task"] for key in touched) and isinstance(recipe_args, dict) and not args_given:
        _drop_foreign_task_args(tree["data"], recipe_task)
    if any(key == ["algorithm", "name"] for key in touched) and isinstance(tree.get("algorithm"), dict):
        _apply_preset_anew(tree["algorithm"], recipe_algorithm, {k[1] for k in touched if k[:1] == ["algorithm"]})
    return tree


def _apply_preset_anew(algorithm: dict, recipe_algorithm: dict, given: set[str]) -> None:
    """An override of ``algorithm.name`` over a recipe that spells out its preset's fields (a saved
    ``config.yaml``, ``rlxf config show`` output) would otherwise change only the name: the fields the
    recipe holds at its own preset's values came from that preset, so the new preset replaces them. Fields
    the recipe set to other values (its own choices) and fields given on the command line are kept."""
    from rlxf.algos.presets import PRESETS

    old, new = recipe_algorithm.get("name") or "grpo", algorithm.get("name")
    if old == new or old not in PRESETS or new not in PRESETS:
        return
    from_preset = [k for k, v in PRESETS[old].items()
                   if k in algorithm and k not in given and algorithm[k] == v and PRESETS[new].get(k) != v]
    for key in from_preset:
        del algorithm[key]
    kept = sorted(k for k in PRESETS[new] if k in algorithm and k not in given and k in recipe_algorithm
                  and algorithm[k] != PRESETS[new][k])
    if kept:
        logger.warning("warning: algorithm.name=%s over preset %s: kept the recipe's own %s", new, old,
                       ", ".join(f"{k}={algorithm[k]}" for k in kept))


def _drop_foreign_task_args(data: dict, recipe_task: str | None) -> None:
    """Why drop and not refuse: the override names the task the user wants; the recipe's arguments
    belong to another task, and making every task switch also spell ``data.task_args={}`` adds a step
    that catches nothing. task_args the user wrote for the task they run are still checked (an error)."""
    from rlxf.data.tasks import TASKS, task_keywords

    task = data.get("task")
    if task == recipe_task or task not in TASKS.names():
        return
    accepted = task_keywords(task).accepted
    foreign = sorted(k for k in data.get("task_args") or {} if accepted is not None and k not in accepted)
    if foreign:
        data["task_args"] = {k: v for k, v in data["task_args"].items() if k not in foreign}
        logger.warning("warning: dropped the recipe's data.task_args %s: written for task %s, not taken by task %s",
                       ", ".join(foreign), recipe_task, task)
