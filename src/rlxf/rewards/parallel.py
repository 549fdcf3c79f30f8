"""Scoring one batch in parallel: a per-sample reward split into contiguous chunks, scored concurrently.

    reward:
      function: parallel
      kwargs:
        reward: {function: math, kwargs: {use_math_verify: true}}   # any reward, as in `reward:`
        workers: 4          # processes (default: the CPU count), or requests in flight with executor: thread
        executor: process   # process: Python scorers that hold the GIL (math-verify, reasoning-gym, ...)
                            # thread: I/O-bound rewards (a judge endpoint, a remote reward server)
        chunk_size: 64      # samples per task (default: the batch split evenly over the workers)

Each worker process builds the inner reward once from its spec (nothing is pickled but the spec and
the samples) and keeps it for later batches. Chunks are put back in input order, so the result is the
same for any worker count and chunk size — provided the reward scores each sample on its own. A reward
that normalises over the batch (``mix`` with ``normalize`` other than ``none``) would see a chunk
instead of the batch: it is refused. With ``executor: thread`` the inner reward is shared by the
threads, so it must be thread-safe (``remote`` and the ``openai`` judge backend are).
"""

from __future__ import annotations

import concurrent.futures as futures
import math
import multiprocessing
import os
from collections.abc import Sequence
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from rlxf.rewards.base import Reward, RewardOutput, call_reward
from rlxf.rewards.registry import REWARDS, build_reward

_worker_reward: Reward | None = None  # the inner reward, built once in each worker process


def _build_worker_reward(function: str, kwargs: dict[str, Any] | None) -> None:
    global _worker_reward
    _worker_reward = build_reward(function, kwargs)


def _score_in_worker(prompts: list[str], responses: list[str], metadata: list[dict]) -> RewardOutput:
    assert _worker_reward is not None, "the pool's initializer builds the reward"
    return call_reward(_worker_reward, prompts, responses, metadata)


def chunk_bounds(n: int, workers: int, chunk_size: int | None) -> list[tuple[int, int]]:
    """Contiguous ``[start, end)`` ranges covering ``range(n)``: ``chunk_size`` each, or n split over the workers."""
    size = chunk_size or max(1, math.ceil(n / workers))
    return [(start, min(n, start + size)) for start in range(0, n, size)]


def concatenate(outputs: Sequence[RewardOutput]) -> RewardOutput:
    """One output from per-chunk outputs in order; every chunk must carry the same components."""
    names = list(outputs[0].components) if outputs else []
    for out in outputs:
        if list(out.components) != names:
            raise ValueError(f"parallel: chunks returned different components ({names} vs {list(out.components)})")
    return RewardOutput(
        scores=[s for out in outputs for s in out.scores],
        components={name: [v for out in outputs for v in out.components[name]] for name in names},
    )


@REWARDS.register("parallel")
class ParallelReward:
    def __init__(
        self, reward: dict[str, Any], workers: int | None = None, executor: str = "process",
        chunk_size: int | None = None,
    ) -> None:
        if not isinstance(reward, dict) or "function" not in reward or set(reward) - {"function", "kwargs"}:
            raise ValueError(f"parallel: `reward` must be {{function: NAME, kwargs: {{...}}}}, got {reward!r}")
        if executor not in ("process", "thread"):
            raise ValueError(f"parallel: executor must be 'process' or 'thread', got {executor!r}")
        if chunk_size is not None and chunk_size < 1:
            raise ValueError(f"parallel: chunk_size must be >= 1, got {chunk_size}")
        self.spec = (reward["function"], reward.get("kwargs"))
        self.workers = int(workers or os.cpu_count() or 1)
        if self.workers < 1:
            raise ValueError(f"parallel: workers must be >= 1, got {workers}")
        self.executor, self.chunk_size = executor, chunk_size
        # Built here too: a bad spec fails at start-up, the thread executor scores with it, and a
        # batch-level reward is recognised before it gives chunk-dependent scores.
        self.local = build_reward(*self.spec)
        if getattr(self.local, "batch_dependent", False):
            raise ValueError(f"parallel: reward {self.spec[0]!r} normalises over the batch; chunks would change its scores")
        self._pool: futures.Executor | None = None

    def _executor(self) -> futures.Executor:
        if self._pool is None:
            if self.executor == "thread":
                self._pool = futures.ThreadPoolExecutor(self.workers, thread_name_prefix="reward-io")
            else:
                # spawn: the caller may hold threads (torch, the reward role's) that fork would copy mid-state.
                self._pool = futures.ProcessPoolExecutor(
                    self.workers, mp_context=multiprocessing.get_context("spawn"),
                    initializer=_build_worker_reward, initargs=self.spec,
                )
        return self._pool

    def score(self, prompts: Sequence[str], responses: Sequence[str], metadata: Sequence[dict]) -> RewardOutput:
        bounds = chunk_bounds(len(responses), self.workers, self.chunk_size)
        if len(bounds) <= 1 and self.executor == "process":
            return call_reward(self.local, prompts, responses, metadata)  # nothing to spread
        pool = self._executor()
        if self.executor == "thread":
            jobs = [pool.submit(call_reward, self.local, prompts[a:b], responses[a:b], metadata[a:b])
                    for a, b in bounds]
        else:
            jobs = [pool.submit(_score_in_worker, list(prompts[a:b]), list(responses[a:b]), list(metadata[a:b]))
                    for a, b in bounds]
        try:
            return concatenate([job.result() for job in jobs])
        except BrokenProcessPool:
            self._pool = None  # a fresh pool for the next batch
            raise RuntimeError(
                "parallel: a worker process died. Workers are spawned and re-import the main module: a script "
                "that starts training must do so under `if __name__ == \"__main__\":` (rlxf's own commands do)"
            ) from None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_pool": None}  # a pool does not travel; the copy starts its own
