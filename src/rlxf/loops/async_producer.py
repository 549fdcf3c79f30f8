"""The rollout producer of ``loop: rl_async``: a thread beside the rollout engine that generates scored
batches continuously into a queue.

* One queued item is one step's batch (``prompts_per_step`` prompts x ``n_samples``); item ``s`` is
  trained at step ``s`` and holds the prompts the synchronous loop would train at step ``s``.
* Continuous batching: batches are *admitted* into one running :class:`InterruptibleGeneration` as
  soon as the bounds below allow, so while the long tail of batch ``s`` decodes, batch ``s + 1``
  fills the decoder's free rows. A batch is queued when all its rows are done (batches are queued
  in order).
* Bounds. Batch ``s`` is admitted only when (a) the engine holds version ``>= s - 1 - max_staleness``:
  the trainer at step ``s`` holds version ``s - 1`` and a sample's version is its *oldest* token's, so
  no sample can break the bound and nothing generated is thrown away; (b) ``s <= taken + queue_size
  + 1`` where ``taken`` is the last item the trainer took: at most ``queue_size`` finished batches
  wait, plus the ones decoding.
* Weights. The trainer ``post_weights`` a packed copy (runtime/weight_sync.py); the producer loads the
  newest one between chunks of ``chunk_steps`` decode steps: it pauses the running rows, loads,
  checks the engine's report and re-prefills them under the new version (partial rollouts). With
  ``load_every: k`` it waits until the posted version is ``k`` ahead of the engine's, or until the
  staleness bound holds up the next batch (fewer re-prefills, older tokens). Without
  ``interruptible`` it stops admitting and loads once the running rows have drained.
* ``call_rollout`` lends the engine to a caller (held-out evaluation): the producer stops at the next
  chunk boundary and re-prefills its rows afterwards, because the borrower's batches replace the
  decoder's KV cache.

``start_producer`` builds one beside a rollout role: in the trainer's process (embedded runtime, a
thread) or inside the rollout actor (Ray runtime, ``runtime.attach``), where generation runs in its
own process and truly overlaps training.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial

import torch

from rlxf.batch import TrajectoryBatch
from rlxf.data.prompts import PromptStream
from rlxf.rollout.interruptible import InterruptibleGeneration
from rlxf.rollout.sampling import SamplingParams
from rlxf.runtime.weight_sync import WeightBuckets
from rlxf.train.checkpoint import generator_state_from_json, generator_state_to_json


@dataclass
class ProducedBatch:
    index: int  # trained at step ``index``
    batch: TrajectoryBatch  # scored
    scores: dict[str, float]  # reward/* metrics of the batch
    data_position: int  # prompt stream position after this batch's prompts
    sample_rng: str  # sampling generator state when this batch was queued (for checkpoints)
    interruptions: int  # weight loads while this batch had unfinished rows
    generation_seconds: float  # admission to done
    queued_max: int  # the longest the queue has been so far (right after a put)
    inflight_max: int  # the most batches that have decoded at once so far


@dataclass
class _Admitted:
    """A batch decoding in the generation."""

    batch_id: int
    rows: list[dict]
    prompts: list[list[int]]
    data_position: int
    started: float = field(default_factory=time.perf_counter)
    interruptions: int = 0


class RolloutProducer(threading.Thread):
    def __init__(
        self, rollout, score: Callable[[TrajectoryBatch], dict[str, float]], stream: PromptStream,
        prompts_per_step: int, params: SamplingParams, generator: torch.Generator, max_staleness: int,
        queue_size: int, chunk_steps: int, interruptible: bool, first_index: int, checksum: bool = False,
        admit_below_rows: int | None = None, load_every: int = 1,
    ) -> None:
        super().__init__(name="rlxf-rollout-producer", daemon=True)
        self.rollout, self.score, self.stream = rollout, score, stream
        self.prompts_per_step, self.params, self.generator = prompts_per_step, params, generator
        self.max_staleness, self.queue_size = max_staleness, queue_size
        self.chunk_steps, self.interruptible, self.checksum = chunk_steps, interruptible, checksum
        self.admit_below_rows = admit_below_rows  # admit only while at most this many rows decode (None: any)
        self.load_every = load_every  # versions the posted weights must be ahead before a load
        self.next_index = first_index  # the next batch to admit
        self.taken = first_index - 1  # the last item the trainer took
        self.queue: queue.Queue[ProducedBatch] = queue.Queue()  # bounded by admission (b), not here
        self.max_queued = 0  # the largest queue length seen right after a put
        self.max_inflight = 0  # the most batches decoding at once
        self._inflight: dict[int, _Admitted] = {}  # index -> batch decoding
        self._generation: InterruptibleGeneration | None = None
        self._cv = threading.Condition()
        self._pending: WeightBuckets | None = None
        self._stopping = threading.Event()
        self._engine_lock = threading.Lock()
        self._borrow_wanted = threading.Event()
        self._borrowed = False
        self.error: BaseException | None = None

    # ---------------------------------------------------------------- trainer side
    def post_weights(self, packed: WeightBuckets) -> None:
        with self._cv:
            self._pending = packed
            self._cv.notify_all()

    def get(self) -> ProducedBatch:
        while True:
            try:
                item = self.queue.get(timeout=0.2)
                break
            except queue.Empty:
                if self.error is not None:
                    raise RuntimeError(f"the rollout producer failed: {self.error!r}") from self.error
                if not self.is_alive():
                    raise RuntimeError("the rollout producer stopped") from None
        with self._cv:
            self.taken = item.index
            self._cv.notify_all()
        return item

    def call_rollout(self, method: str, args: tuple = (), kwargs: dict | None = None):
        """``rollout.method(*args, **kwargs)`` with the engine borrowed from the producer."""
        with self.borrow() as rollout:
            return getattr(rollout, method)(*args, **(kwargs or {}))

    @contextmanager
    def borrow(self):
        """The engine for the caller's own generation, holding the weights posted last (a held-out
        evaluation must see the trained policy, not the one the producer happened to hold); the
        producer's rows are re-prefilled afterwards."""
        self._borrow_wanted.set()
        with self._engine_lock:
            self._borrow_wanted.clear()
            self._borrowed = True
            gen = self._generation_for_engine()
            if self._may_load(gen):
                self._load_pending(gen)
            yield self.rollout

    def stop(self) -> None:
        self._stopping.set()
        with self._cv:
            self._cv.notify_all()
        self.join(timeout=60)

    # ---------------------------------------------------------------- producer side
    def run(self) -> None:
        try:
            while not self._stopping.is_set():
                if not self._cycle():
                    with self._cv:  # nothing to decode: wait for weights or the trainer
                        self._cv.wait(timeout=0.05)
                self._queue_finished()
        except BaseException as err:  # handed to the trainer by get()
            self.error = err

    def _cycle(self) -> bool:
        """Load weights, admit batches, decode one chunk; False when there was nothing to decode."""
        while self._borrow_wanted.is_set():  # let a borrower in between chunks
            time.sleep(0.001)
        with self._engine_lock:
            gen = self._generation_for_engine()
            rebuild = self._borrowed  # a borrower replaced the decoder's cache
            self._borrowed = False
            if self._load_due(gen):
                rebuild |= self._load_pending(gen)
            admitted = []
            # rows this cycle admits count as decoding: admit_below_rows bounds them too
            while self._admissible(self.next_index, len(admitted) * self.prompts_per_step * self.params.n):
                admitted.append(self.next_index)
                self.next_index += 1
            if rebuild and not gen.paused:
                gen.suspend()  # resume() re-prefills every unfinished row, the admitted ones with them
            for index in admitted:
                rows = self.stream.take(self.prompts_per_step)
                prompts = self.rollout.encode(rows)
                self._inflight[index] = _Admitted(gen.admit(prompts), rows, prompts, self.stream.position)
            self.max_inflight = max(self.max_inflight, len(self._inflight))
            if gen.paused:
                gen.resume(self.rollout.version)
            if gen.active_rows == 0:
                return False
            gen.run(self.chunk_steps, self.generator)
            return True

    def _generation_for_engine(self) -> InterruptibleGeneration:
        if self._generation is None:  # the engine is an InterruptibleEngine (checked at config load)
            self._generation = self.rollout.engine.start_interruptible(self.params)
        return self._generation

    def _may_load(self, gen: InterruptibleGeneration) -> bool:
        """Weights are waiting and loading them now breaks no sequence (interruptible, or none decoding)."""
        return self._pending is not None and (self.interruptible or gen.active_rows == 0)

    def _load_due(self, gen: InterruptibleGeneration) -> bool:
        """``_may_load``, and the posted weights are ``load_every`` ahead or the staleness bound needs them."""
        if not self._may_load(gen):
            return False
        held_up = self.rollout.version < self.next_index - 1 - self.max_staleness  # the bound stops admission
        return held_up or self._pending.version - self.rollout.version >= self.load_every

    def _admissible(self, index: int, admitting_rows: int = 0) -> bool:
        if self._stopping.is_set() or index > self.taken + self.queue_size + 1:
            return False
        if not self.interruptible and self._pending is not None:
            return False  # drain the running rows so the weights can load
        if self.admit_below_rows is not None and self._generation.unfinished_rows + admitting_rows > self.admit_below_rows:
            return False
        return self.rollout.version >= index - 1 - self.max_staleness

    def _load_pending(self, gen: InterruptibleGeneration) -> bool:
        with self._cv:
            packed, self._pending = self._pending, None
        if packed is None or packed.version <= self.rollout.version:
            return False
        if not gen.paused:
            gen.suspend()
        self.rollout.load_weights(packed, self.checksum)  # verified on load (runtime/weight_sync.py)
        for admitted in self._inflight.values():
            if not gen.batch_finished(admitted.batch_id):
                admitted.interruptions += 1
        return True

    def _queue_finished(self) -> None:
        """Score and queue finished batches, in index order."""
        gen = self._generation
        while self._inflight:
            index = min(self._inflight)
            admitted = self._inflight[index]
            with self._engine_lock:
                if not gen.batch_finished(admitted.batch_id):
                    return
                result = gen.take(admitted.batch_id)
            del self._inflight[index]
            batch = self.rollout.to_batch(admitted.rows, admitted.prompts, result)
            scores = self.score(batch)
            self.max_queued = max(self.max_queued, self.queue.qsize() + 1)  # counting this batch
            self.queue.put(ProducedBatch(
                index=index, batch=batch, scores=scores, data_position=admitted.data_position,
                sample_rng=generator_state_to_json(self.generator), interruptions=admitted.interruptions,
                generation_seconds=time.perf_counter() - admitted.started,
                queued_max=self.max_queued, inflight_max=self.max_inflight,
            ))


def start_producer(
    rollout, scorer, rows: list[dict], seed: int, position: int, sample_rng: str, first_index: int,
    prompts_per_step: int, params: SamplingParams, async_cfg, checksum: bool,
) -> RolloutProducer:
    """A started producer beside ``rollout`` (``runtime.attach`` calls this where the rollout role
    lives). ``scorer(rollout, batch)`` scores a batch in place (loops/batch_scorer.py); ``sample_rng`` is the
    sampling generator's state (train/checkpoint.py's JSON form)."""
    generator = torch.Generator(device=rollout.engine.device)
    generator.set_state(generator_state_from_json(sample_rng))
    producer = RolloutProducer(
        rollout, partial(scorer, rollout), PromptStream(rows, seed=seed, position=position), prompts_per_step, params,
        generator, async_cfg.max_staleness, async_cfg.queue_size, async_cfg.chunk_steps,
        async_cfg.interruptible, first_index=first_index, checksum=checksum,
        admit_below_rows=async_cfg.admit_below_rows, load_every=async_cfg.load_every,
    )
    producer.start()
    return producer


class LentRollout:
    """The rollout role as seen through a producer: every call borrows the engine (``call_rollout``)."""

    def __init__(self, producer) -> None:
        self._producer = producer

    def __getattr__(self, method: str):
        if method.startswith("_"):
            raise AttributeError(method)
        return lambda *args, **kwargs: self._producer.call_rollout(method, args, kwargs)


def sample_versions(batch: TrajectoryBatch) -> torch.Tensor:
    """[B] each sample's version: its oldest token's."""
    big = torch.iinfo(torch.long).max
    return batch.policy_version.masked_fill(batch.response_mask == 0, big).min(dim=1).values
