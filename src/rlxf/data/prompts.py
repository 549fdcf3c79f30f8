"""Loading a task's rows, and a resumable seeded stream of training prompts (token ids: data/prompt_tokens.py)."""

from __future__ import annotations

import random

from rlxf.config_error import ConfigError
from rlxf.data.tasks import TASKS, TaskSplits
from rlxf.errors import RlxfError


def load_task(data_config, seed: int) -> TaskSplits:
    args = dict(data_config.task_args)
    if data_config.path is not None:  # the file tasks (file, preference_file)
        args.update(path=data_config.path, eval_path=data_config.eval_path)
    try:
        return TASKS.get(data_config.task)(seed=seed, eval_size=data_config.eval_size, **args)
    except RlxfError:
        raise
    except (ValueError, KeyError, IndexError) as err:  # a value the task refuses (or a template field it lacks)
        # that no check at load caught: still the user's, named
        raise ConfigError(f"data.task={data_config.task} with data.task_args {data_config.task_args}: "
                          f"{type(err).__name__ + ' ' if not isinstance(err, ValueError) else ''}{err}") from err
    except MemoryError:  # rows past what a check bounds (data/tasks.py MAX_TASK_ROWS): the user's values, named
        raise ConfigError(f"data.task={data_config.task} with data.task_args {data_config.task_args}: its rows do "
                          "not fit in memory; lower the task's size") from None


class PromptStream:
    """Endless seeded passes over the training rows; ``position`` makes resume exact.

    Pass ``k`` visits the rows in the order of a shuffle seeded by ``(seed, k)``, so the stream is a
    pure function of ``(seed, position)`` — a resumed run draws exactly the prompts the
    uninterrupted run would have drawn.
    """

    def __init__(self, rows: list[dict], seed: int, position: int = 0) -> None:
        if not rows:
            raise ValueError("the training split is empty")
        self.rows = rows
        self.seed = seed
        self.position = position
        self._order_pass = -1
        self._order: list[int] = []

    def _order_for(self, pass_index: int) -> list[int]:
        if pass_index != self._order_pass:
            order = list(range(len(self.rows)))
            random.Random(f"{self.seed}:{pass_index}").shuffle(order)
            self._order, self._order_pass = order, pass_index
        return self._order

    def take(self, count: int) -> list[dict]:
        out = []
        for _ in range(count):
            pass_index, offset = divmod(self.position, len(self.rows))
            out.append(self.rows[self._order_for(pass_index)[offset]])
            self.position += 1
        return out
