"""Merging concurrent small requests of the reward server into fewer reward calls.

``workers`` reward calls run at once (in threads: rewards are synchronous Python). A free worker takes
the oldest waiting request and, behind it, as many further waiting requests as fit in ``max_batch``
samples, scores them with one reward call and hands each request its slice. Nothing waits for company:
under light load every request is scored alone at once; under heavy load the queue that builds up is
what gets merged. A reward that normalises over its batch (``batch_dependent``) is never merged. When a
merged call raises, each request is scored alone again, so an error reaches only the request that
caused it.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures as futures
from collections.abc import Callable
from dataclasses import dataclass, field

from rlxf.rewards.base import RewardOutput

ScoreFn = Callable[[list[str], list[str], list[dict]], RewardOutput]


@dataclass
class PendingRequest:
    prompts: list[str]
    responses: list[str]
    metadata: list[dict]
    done: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())


def split(out: RewardOutput, sizes: list[int]) -> list[RewardOutput]:
    """The inverse of ``concatenate``: consecutive slices of ``sizes`` samples."""
    parts, start = [], 0
    for n in sizes:
        parts.append(RewardOutput(out.scores[start: start + n],
                                  {k: v[start: start + n] for k, v in out.components.items()}))
        start += n
    return parts


class MicroBatcher:
    def __init__(self, score: ScoreFn, workers: int, max_batch: int, merge: bool,
                 on_call: Callable[[], None] = lambda: None) -> None:
        self.score, self.workers, self.max_batch, self.merge, self.on_call = score, workers, max_batch, merge, on_call
        self.pending: collections.deque[PendingRequest] = collections.deque()
        self.executor = futures.ThreadPoolExecutor(workers, thread_name_prefix="reward-call")
        self._ready: asyncio.Event | None = None
        self._tasks: list[asyncio.Task] = []

    def start(self) -> None:
        self._ready = asyncio.Event()
        self._tasks = [asyncio.create_task(self._work(), name=f"reward-worker-{i}") for i in range(self.workers)]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for request in self.pending:
            if not request.done.done():
                request.done.set_exception(RuntimeError("the reward server is shutting down"))
        # A call still running in a thread (a hung reward) cannot be interrupted: do not wait for it.
        self.executor.shutdown(wait=False, cancel_futures=True)

    async def submit(self, prompts: list[str], responses: list[str], metadata: list[dict]) -> RewardOutput:
        request = PendingRequest(prompts, responses, metadata)
        self.pending.append(request)
        assert self._ready is not None, "start() runs in the server's start-up"
        self._ready.set()
        return await request.done

    def _take_group(self) -> list[PendingRequest]:
        group, samples = [], 0
        while self.pending:
            head = self.pending[0]
            if head.done.done():  # its client gave up (timeout): skip it
                self.pending.popleft()
                continue
            if group and (not self.merge or samples + len(head.responses) > self.max_batch):
                break
            group.append(self.pending.popleft())
            samples += len(head.responses)
        return group

    async def _work(self) -> None:
        assert self._ready is not None
        while True:
            group = self._take_group()
            if not group:
                self._ready.clear()
                await self._ready.wait()
                continue
            try:
                await self._score_group(group)
            except asyncio.CancelledError:
                for request in group:
                    if not request.done.done():
                        request.done.set_exception(RuntimeError("the reward server is shutting down"))
                raise

    async def _call(self, prompts: list[str], responses: list[str], metadata: list[dict]) -> RewardOutput:
        self.on_call()
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, self.score, prompts, responses, metadata)

    async def _score_group(self, group: list[PendingRequest]) -> None:
        if len(group) > 1:
            try:
                out = await self._call([p for r in group for p in r.prompts], [x for r in group for x in r.responses],
                                       [m for r in group for m in r.metadata])
                for request, part in zip(group, split(out, [len(r.responses) for r in group])):
                    if not request.done.done():
                        request.done.set_result(part)
                return
            except Exception:  # noqa: BLE001 - find whose request it was: score each alone below
                pass
        for request in group:
            try:
                result = await self._call(request.prompts, request.responses, request.metadata)
            except Exception as err:  # noqa: BLE001 - the request's own error goes back to its client
                if not request.done.done():
                    request.done.set_exception(err)
                continue
            if not request.done.done():
                request.done.set_result(result)

