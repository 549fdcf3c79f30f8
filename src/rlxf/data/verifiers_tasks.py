"""A ``verifiers`` environment's tasks as rlxf rows (``pip install 'rlxf[verifiers]'``).

    data:
      task: verifiers
      task_args: {environment: my_taskset}      # as verifiers' loader names it: an installed taskset package
    env:
      name: verifiers                           # runs each row's episode (envs/verifiers_env.py)

``environment`` is a taskset id (an installed environment package, ``owner/name`` from the Environments Hub
installs as ``name``) or ``module:function`` returning a ``verifiers.v1.Env``; ``config`` is merged into
the environment's own config (``verifiers.v1.EnvConfig``: e.g. ``{agent: {runtime: {type: subprocess}}}``,
the taskset's own knobs under ``taskset``); ``package_dir`` is a folder of environment packages that are not
installed (a checkout), put on ``sys.path``. The taskset has no split of its own in ``verifiers.v1``: the
last ``eval_size`` tasks are held out (``data.eval_size``), the others are trained on, in the taskset's
order (rlxf's sampler shuffles them).

A row: ``prompt`` (the task's prompt text, used only for a trajectory in which the policy never spoke and by
an SFT stage), ``answer`` and ``sft_target`` where the task's data has an ``answer`` field,
``vf_environment``/``vf_config`` (what the env adapter loads) and ``vf_task`` (the task's position).
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import sys
from typing import Any

from rlxf.config_error import ConfigError
from rlxf.data.tasks import TASKS, TaskSplits
from rlxf.errors import MissingPackageError

INSTALL = "pip install 'rlxf[verifiers]'"


def import_verifiers():
    try:
        import verifiers.v1 as vf
    except ImportError:
        raise MissingPackageError(f"the verifiers environment needs the verifiers package: {INSTALL}") from None
    return vf


@functools.lru_cache(maxsize=8)
def _loaded(environment: str, config_json: str):
    vf = import_verifiers()
    config = json.loads(config_json)
    try:
        if ":" in environment:  # module:function returning a verifiers Env
            module, _, attr = environment.partition(":")
            env = getattr(importlib.import_module(module), attr)(**config)
        else:
            data = {**config, "taskset": {**config.get("taskset", {}), "id": environment}}
            env = vf.load_environment(vf.resolve_env_config(data))
    except ConfigError:
        raise
    except Exception as err:  # noqa: BLE001 - the package's own refusal, named
        raise ConfigError(f"verifiers environment {environment!r} did not load: {type(err).__name__}: {err}"[:500]) from None
    if not isinstance(env, vf.Env):
        raise ConfigError(f"verifiers environment {environment!r}: {type(env).__name__} is not a verifiers.v1.Env")
    return env, list(env.taskset)


def on_path(path: str | None) -> None:
    """A folder holding environment packages that are not installed (a checkout), importable from now on."""
    if path:
        folder = os.path.abspath(path)
        if not os.path.isdir(folder):
            raise ConfigError(f"environment path {path!r} is not a folder")
        if folder not in sys.path:
            sys.path.insert(0, folder)


def load_environment(environment: str, config: dict[str, Any] | None = None, path: str | None = None):
    """(the ``verifiers.v1.Env``, its tasks in the taskset's order), loaded once per process."""
    on_path(path)
    return _loaded(environment, json.dumps(config or {}, sort_keys=True))


def reference_answer(data) -> dict[str, str]:
    """A task whose data carries an ``answer`` (the common convention of verifiers tasksets) gives it to the
    row: ``answer``, and ``sft_target`` for an SFT stage (``sft.steps``); the reward stays the environment's."""
    answer = getattr(data, "answer", None)
    return {} if answer is None else {"answer": str(answer), "sft_target": str(answer)}


@TASKS.register("verifiers")
def verifiers_task(seed: int, eval_size: int, environment: str, config: dict[str, Any] | None = None,
                   package_dir: str | None = None) -> TaskSplits:
    _, tasks = load_environment(environment, config, package_dir)
    if len(tasks) <= eval_size:
        raise ConfigError(f"verifiers environment {environment!r} has {len(tasks)} tasks: data.eval_size={eval_size} "
                          "leaves none to train on")
    rows = [{"prompt": task.data.prompt_text, "vf_environment": environment, "vf_config": dict(config or {}),
             "vf_path": package_dir, "vf_task": i, "id": task.data.id if task.data.id is not None else str(i),
             **reference_answer(task.data)}
            for i, task in enumerate(tasks)]
    return TaskSplits(train=rows[: len(rows) - eval_size], eval=rows[len(rows) - eval_size:])
