"""The rollout producer of ``loop: rl_async``: a thread that generates scored batches into a bounded queue.

* One queued item is one step's batch (``prompts_per_step`` prompts x ``n_samples``); item ``s`` is
  trained at step ``s``. The queue holds at most ``queue_size`` items; the producer blocks when full.
* Staleness. A sample's version is its *oldest* token's version; the trainer at step ``s`` holds
  version ``s - 1``, so the sample's staleness is ``s - 1 - version``. Before it starts item ``s`` the
  producer **waits** until its engine holds version ``>= s - 1 - max_staleness`` (it never generates
  a sample that would be too old; the trainer still checks and drops any that are, as a guard).
  Tokens of an interrupted response are newer than its first token, so they are within the bound too.
* Weights. The trainer ``post_weights`` a packed copy (runtime/weight_sync.py); the producer loads the
  newest one between chunks of ``chunk_steps`` decode steps: it pauses the in-flight generation, loads,
  checks the engine's report and resumes under the new version (rollout/interruptible.py). Without
  ``interruptible`` it loads only between batches.
* ``borrow()`` lends the engine to the trainer thread (held-out evaluation): the producer stops at the
  next chunk boundary and re-prefills its rows afterwards, because the borrower's batches replace the
  decoder's KV cache.

Embedded runtime only: the producer drives the rollout role's decoder directly.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from rlxf.batch import TrajectoryBatch
from rlxf.data.prompts import PromptStream, encode_prompts
from rlxf.rollout.engine import left_pad
from rlxf.rollout.interruptible import InterruptibleGeneration, VersionedGeneration
from rlxf.rollout.sampling import SamplingParams
from rlxf.runtime.weight_sync import WeightBuckets, check_report
from rlxf.train.checkpoint import generator_state_to_json


@dataclass
class ProducedBatch:
    index: int  # trained at step ``index``
    batch: TrajectoryBatch  # scored
    scores: dict[str, float]  # reward/* metrics of the batch
    data_position: int  # prompt stream position after this batch's prompts
    sample_rng: str  # sampling generator state after this batch (for checkpoints)
    interruptions: int  # weight loads in the middle of this batch
    generation_seconds: float


class RolloutProducer(threading.Thread):
    def __init__(
        self, rollout, score: Callable[[TrajectoryBatch], dict[str, float]], stream: PromptStream,
        prompts_per_step: int, params: SamplingParams, generator: torch.Generator, max_staleness: int,
        queue_size: int, chunk_steps: int, interruptible: bool, first_index: int, checksum: bool = False,
    ) -> None:
        super().__init__(name="rlxf-rollout-producer", daemon=True)
        self.rollout, self.score, self.stream = rollout, score, stream
        self.prompts_per_step, self.params, self.generator = prompts_per_step, params, generator
        self.max_staleness, self.chunk_steps, self.interruptible = max_staleness, chunk_steps, interruptible
        self.next_index, self.checksum = first_index, checksum
        self.queue: queue.Queue[ProducedBatch] = queue.Queue(maxsize=queue_size)
        self.max_queued = 0  # the largest queue length seen right after a put
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
                return self.queue.get(timeout=0.2)
            except queue.Empty:
                if self.error is not None:
                    raise RuntimeError("the rollout producer failed") from self.error
                if not self.is_alive():
                    raise RuntimeError("the rollout producer stopped") from None

    @contextmanager
    def borrow(self):
        """The engine for the caller's own generation; the producer's rows are re-prefilled afterwards."""
        self._borrow_wanted.set()
        with self._engine_lock:
            self._borrow_wanted.clear()
            self._borrowed = True
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
                item = self._produce(self.next_index)
                if item is None:
                    return
                while not self._stopping.is_set():
                    try:
                        self.queue.put(item, timeout=0.2)
                        break
                    except queue.Full:
                        continue
                self.max_queued = max(self.max_queued, self.queue.qsize())
                self.next_index += 1
        except BaseException as err:  # handed to the trainer by get()
            self.error = err

    def _load_pending(self) -> bool:
        with self._cv:
            packed, self._pending = self._pending, None
        if packed is None or packed.version <= self.rollout.version:
            return False
        check_report(packed, self.rollout.load_weights(packed, self.checksum))
        return True

    def _wait_for_version(self, index: int) -> bool:
        """Block until the engine's version keeps item ``index`` within the staleness bound."""
        needed = index - 1 - self.max_staleness
        while not self._stopping.is_set():
            with self._engine_lock:
                self._load_pending()
            if self.rollout.version >= needed:
                return True
            with self._cv:
                if self._pending is None:
                    self._cv.wait(timeout=0.2)
        return False

    def _acquire_engine(self) -> None:
        while self._borrow_wanted.is_set():  # let a borrower in between chunks
            time.sleep(0.001)
        self._engine_lock.acquire()

    def _produce(self, index: int) -> ProducedBatch | None:
        if not self._wait_for_version(index):
            return None
        start = time.perf_counter()
        rows = self.stream.take(self.prompts_per_step)
        rollout = self.rollout
        prompts = encode_prompts(rows, rollout.tokenizer, rollout.chat_template, rollout.max_prompt_tokens)
        engine = rollout.engine
        self._acquire_engine()
        try:
            self._borrowed = False
            session = InterruptibleGeneration(
                engine.decoder, prompts, self.params, engine.version, engine.eos_id, engine.pad_id, engine.device
            )
            interruptions = 0
            while not session.run(self.chunk_steps, self.generator):
                if self._stopping.is_set():
                    return None
                self._engine_lock.release()
                self._acquire_engine()
                new_weights = self.interruptible and self._pending is not None
                if new_weights or self._borrowed:
                    session.pause()
                    if new_weights and self._load_pending():
                        interruptions += 1
                    self._borrowed = False
                    session.resume(engine.version)
        finally:
            self._engine_lock.release()
        batch = to_trajectory_batch(rows, prompts, session.result(), rollout.tokenizer.pad_token_id)
        scores = self.score(batch)
        return ProducedBatch(
            index=index, batch=batch, scores=scores, data_position=self.stream.position,
            sample_rng=generator_state_to_json(self.generator), interruptions=interruptions,
            generation_seconds=time.perf_counter() - start,
        )


def to_trajectory_batch(rows: list[dict], prompts: list[list[int]], gen: VersionedGeneration, pad_id: int) -> TrajectoryBatch:
    """Like ``RolloutRole.generate``'s batch, with a policy version per token."""
    index = gen.prompt_index
    prompt_ids, prompt_mask = left_pad([prompts[i] for i in index.tolist()], pad_id, torch.device("cpu"))
    metadata = [
        {**{k: v for k, v in rows[i].items() if k not in ("prompt", "messages")}, "stopped": bool(s)}
        for i, s in zip(index.tolist(), gen.stopped.tolist())
    ]
    return TrajectoryBatch(
        prompt_ids=prompt_ids, prompt_mask=prompt_mask, response_ids=gen.response_ids,
        response_mask=gen.response_mask, loss_mask=gen.response_mask.clone(), group_ids=index,
        rollout_log_probs=gen.log_probs, policy_version=gen.token_versions, truncated=~gen.stopped,
        metadata=metadata,
    )


def sample_versions(batch: TrajectoryBatch) -> torch.Tensor:
    """[B] each sample's version: its oldest token's."""
    big = torch.iinfo(torch.long).max
    return batch.policy_version.masked_fill(batch.response_mask == 0, big).min(dim=1).values
