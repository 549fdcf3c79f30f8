"""Concurrent agents' requests batched into the rollout engine: one ``engine.generate`` call at a time.

Requests wait in a queue; whenever the engine is free, everything queued (up to ``max_batch`` rows) becomes
one batch — as soon as every running agent has a request waiting (``expected()``: the sessions whose agent
is running), or ``max_wait_s`` after the oldest waiting request arrived, whichever comes first. So N agents
that ask at about the same time cost one batched decode, not N, and an agent busy with its own work (a slow
tool) holds the others back by ``max_wait_s`` at most. All rows of a batch sample with the rollout's parameters (temperature, top-p,
top-k: the trainer's log-probs assume them; an agent's own sampling arguments are ignored); each row's own
token limit is applied by cutting it after the batch (sampling is autoregressive, so a cut row's tokens
and log-probs are what a shorter budget would have given).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import torch

from rlxf.rollout.sampling import SamplingParams


@dataclass
class Turn:
    ids: list[int]
    log_probs: list[float]
    stopped: bool  # ended with a stop token (else it ran into its limit)


@dataclass
class _Request:
    context: list[int]
    limit: int
    future: asyncio.Future = field(repr=False)
    arrived: float = 0.0


class GenerationBatcher:
    def __init__(self, engine, max_batch: int = 256, max_wait_s: float = 0.02, expected=lambda: 1) -> None:
        self.engine, self.expected = engine, expected
        self.max_batch, self.max_wait_s = max_batch, max_wait_s
        self.params = SamplingParams()
        self.generator: torch.Generator | None = None
        self.queue: list[_Request] = []
        self.wake: asyncio.Event | None = None
        self.task: asyncio.Task | None = None
        self.batches: list[int] = []  # rows per engine call, for metrics and tests

    def start(self) -> None:
        self.wake = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._run())

    def poke(self) -> None:
        """Look again (e.g. an agent finished, so fewer requests are to be waited for); the server's loop only."""
        if self.wake is not None:
            self.wake.set()

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()

    async def generate(self, context: list[int], limit: int) -> Turn:
        if limit <= 0:
            return Turn([], [], False)
        loop = asyncio.get_running_loop()
        request = _Request(context, limit, loop.create_future(), loop.time())
        self.queue.append(request)
        self.wake.set()
        return await request.future

    async def _gathered(self) -> None:
        """Until every running agent waits, or the oldest request has waited ``max_wait_s``."""
        loop = asyncio.get_running_loop()
        while self.queue and len(self.queue) < min(self.expected(), self.max_batch):
            left = self.queue[0].arrived + self.max_wait_s - loop.time()
            if left <= 0:
                return
            self.wake.clear()
            try:
                await asyncio.wait_for(self.wake.wait(), left)
            except asyncio.TimeoutError:
                return

    async def _run(self) -> None:
        while True:
            if not self.queue:
                self.wake.clear()
                await self.wake.wait()
            await self._gathered()
            batch, self.queue = self.queue[: self.max_batch], self.queue[self.max_batch:]
            if not batch:
                continue
            try:
                turns = await asyncio.to_thread(self._decode, [r.context for r in batch], [r.limit for r in batch])
            except Exception as err:  # noqa: BLE001 - every waiting request gets the failure
                for r in batch:
                    if not r.future.done():
                        r.future.set_exception(err)
                continue
            for r, turn in zip(batch, turns):
                if not r.future.done():  # a cancelled request (its agent timed out) is dropped
                    r.future.set_result(turn)

    def _decode(self, contexts: list[list[int]], limits: list[int]) -> list[Turn]:
        p = self.params
        params = SamplingParams(n=1, temperature=p.temperature, top_p=p.top_p, top_k=p.top_k, max_new_tokens=max(limits))
        self.batches.append(len(contexts))
        gen = self.engine.generate(contexts, params, self.generator)
        turns = []
        for row, limit in enumerate(limits):
            length = int(gen.response_mask[row].sum())
            kept = min(length, limit)
            turns.append(Turn(gen.response_ids[row, :kept].tolist(), gen.log_probs[row, :kept].tolist(),
                              bool(gen.stopped[row]) and kept == length))
        return turns
