"""Interruptible, continuously batched generation (partial rollouts).

An :class:`InterruptibleGeneration` samples ``n`` responses for each prompt like the built-in engine
(identical prefixes prefilled once, finished rows leave the decoder's batch), but only ``run(steps)``
decode steps at a time, and it may hold rows of several *batches*:

* ``admit(prompts)`` adds a batch (``n`` rows per prompt) while others are still decoding, so the
  decoder's batch is refilled as rows finish instead of shrinking to the long tail (continuous
  batching). ``batch_finished(b)`` / ``take(b)`` hand a finished batch back and drop its rows.
* ``pause()``: the unfinished sequences come back (prompt ids, tokens so far, their log-probs and
  policy versions) and the decoder's KV cache is given up, e.g. for a weight load. ``resume(version)``
  prefills prompt + partial tokens of every unfinished row under the decoder's current weights
  (recomputing their KV cache) and decoding continues. Every token records the version of the
  weights that produced it, so one response may mix versions (``token_versions``, which becomes
  ``TrajectoryBatch.policy_version``).

Admitting a batch into a running generation prefills only the new prompts and adds their rows to the
decoder's batch (``LlamaDecoder.extend``: a KV cache of their own, so their attention does not read
the long tail's width). A decoder without ``extend`` re-prefills every unfinished row instead, counted
in ``refills``: a forward over the survivors' tokens, which grows with a long tail.

Paused and resumed with unchanged weights and the same generator, one batch samples the tokens of an
uninterrupted generation: the active rows are the same, in the same order, so every sampling call
draws the same noise; only the logits differ by float rounding (prefill vs incremental decode). This
holds while the rows' lengths are alike: a resume puts rows of very different lengths in caches of
their own (``length_groups``), which reorders them, so they draw other (equally valid) noise.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlxf.batch import left_pad
from rlxf.rollout.decoders.base import Decoder, prefill_expanded
from rlxf.rollout.generation import Generation, response_mask_from_lengths
from rlxf.rollout.sampling import SamplingParams, sample_tokens
from rlxf.rollout.stops import is_stop, stop_ids_tensor


@dataclass
class PartialSequence:
    """An unfinished row at a pause (``row`` indexes the generation's current rows)."""

    row: int
    prompt: list[int]
    tokens: list[int]
    log_probs: list[float]
    versions: list[int]


@dataclass
class VersionedGeneration(Generation):
    """A :class:`Generation` whose tokens may come from several versions: ``token_versions`` [N, R]
    (0 on padding); ``version`` is the oldest version in it."""

    token_versions: torch.Tensor


class InterruptibleGeneration:
    def __init__(
        self, decoder: Decoder, prompts: list[list[int]], params: SamplingParams, version: int,
        eos_id: int | list[int], pad_id: int, device: torch.device | str,
    ) -> None:
        self.decoder, self.params = decoder, params
        self.version, self.eos_id, self.pad_id = version, eos_id, pad_id
        self.device = torch.device(device)
        self.stop_ids = stop_ids_tensor(eos_id, self.device)
        self.batch_prompts: dict[int, list[list[int]]] = {}
        self._next_batch = 0
        budget = params.max_new_tokens
        # One row per sample; rows of a batch are contiguous, in prompt-major order (i * n + j).
        self.row_batch = torch.zeros(0, dtype=torch.long, device=self.device)
        self.row_prompt = torch.zeros(0, dtype=torch.long, device=self.device)
        self.ids = torch.zeros((0, budget), dtype=torch.long, device=self.device)
        self.log_probs = torch.zeros((0, budget), dtype=torch.float32, device=self.device)
        self.versions = torch.zeros((0, budget), dtype=torch.long, device=self.device)
        self.lengths = torch.zeros(0, dtype=torch.long, device=self.device)
        self.stopped = torch.zeros(0, dtype=torch.bool, device=self.device)
        self.done = torch.zeros(0, dtype=torch.bool, device=self.device)
        self.interruptions = 0  # pauses
        self.refills = 0  # re-prefills of running rows caused by admit()
        self.active: torch.Tensor | None = torch.zeros(0, dtype=torch.long, device=self.device)  # None: paused
        self.logits: torch.Tensor | None = None  # next-token logits of the active rows
        if prompts:
            self.admit(prompts)

    # ------------------------------------------------------------------ state
    @property
    def finished(self) -> bool:
        return bool(self.done.all())

    @property
    def paused(self) -> bool:
        return self.active is None

    @property
    def active_rows(self) -> int:
        """Rows still decoding (0 while paused)."""
        return 0 if self.active is None else len(self.active)

    @property
    def unfinished_rows(self) -> int:
        return int((~self.done).sum())

    def batch_finished(self, batch: int) -> bool:
        return bool(self.done[self.row_batch == batch].all())

    # ------------------------------------------------------------------ admission
    @torch.no_grad()
    def admit(self, prompts: list[list[int]]) -> int:
        """Add ``n`` rows for each prompt as a new batch; returns its id. While running, the
        unfinished rows are re-prefilled along with the new ones; while paused, ``resume`` does it."""
        batch, n = self._next_batch, self.params.n
        self._next_batch += 1
        self.batch_prompts[batch] = prompts
        total, budget = len(prompts) * n, self.params.max_new_tokens

        def grow(store: torch.Tensor, fill) -> torch.Tensor:
            return torch.cat([store, torch.full((total, *store.shape[1:]), fill, dtype=store.dtype, device=self.device)])

        self.row_batch = grow(self.row_batch, batch)
        self.row_prompt = torch.cat([self.row_prompt, torch.arange(len(prompts), device=self.device).repeat_interleave(n)])
        self.ids, self.log_probs, self.versions = grow(self.ids, self.pad_id), grow(self.log_probs, 0.0), grow(self.versions, 0)
        self.lengths, self.stopped, self.done = grow(self.lengths, 0), grow(self.stopped, False), grow(self.done, False)
        assert self.ids.shape[1] == budget
        if self.active is not None:
            self._join(prompts, len(self.row_batch) - total)
        return batch

    def _join(self, prompts: list[list[int]], first_row: int) -> None:
        """Start the rows from ``first_row`` on (the batch just admitted) beside the running ones."""
        extend = getattr(self.decoder, "extend", None)
        if not len(self.active) or extend is None:
            self.refills += bool(len(self.active))
            self._prefill_unfinished()
            return
        ids, mask = left_pad(prompts, self.pad_id, self.device)
        expand = torch.arange(len(prompts), device=self.device).repeat_interleave(self.params.n)
        logits = extend(ids, mask, self.params.max_new_tokens, expand)
        self.active = torch.cat([self.active, torch.arange(first_row, len(self.row_batch), device=self.device)])
        self.logits = torch.cat([self.logits, logits])

    def take(self, batch: int) -> VersionedGeneration:
        """The finished ``batch`` (rows in prompt-major order); its rows leave the generation."""
        rows = (self.row_batch == batch).nonzero().squeeze(-1)
        if len(rows) == 0 or not bool(self.done[rows].all()):
            raise RuntimeError(f"batch {batch} has unfinished rows: run() it to the end first")
        out = self._generation(rows)
        keep = self.row_batch != batch
        new_index = keep.long().cumsum(0) - 1  # the active rows are unfinished, so all are kept
        if self.active is not None:
            self.active = new_index[self.active]
        for name in ("row_batch", "row_prompt", "ids", "log_probs", "versions", "lengths", "stopped", "done"):
            setattr(self, name, getattr(self, name)[keep])
        del self.batch_prompts[batch]
        return out

    def result(self) -> VersionedGeneration:
        """The only batch, finished (single-batch use)."""
        if not self.finished:
            raise RuntimeError("generation has unfinished rows: run() it to the end first")
        (batch,) = self.batch_prompts
        return self.take(batch)

    # ------------------------------------------------------------------ decoding
    @torch.no_grad()
    def run(self, steps: int | None = None, generator: torch.Generator | None = None) -> bool:
        """Sample up to ``steps`` more tokens per active row (None: until no row is active); returns
        ``finished``. A row finishes at end-of-sequence or at ``max_new_tokens``."""
        if self.active is None:
            raise RuntimeError("generation is paused: resume() it first")
        budget = self.params.max_new_tokens
        for _ in range(budget if steps is None else steps):
            if len(self.active) == 0:
                break
            tokens, logp = sample_tokens(self.logits, self.params, generator)
            rows, cols = self.active, self.lengths[self.active]
            self.ids[rows, cols] = tokens
            self.log_probs[rows, cols] = logp
            self.versions[rows, cols] = self.version
            self.lengths[rows] += 1
            eos = is_stop(tokens, self.stop_ids)
            self.stopped[rows[eos]] = True
            finished = eos | (cols + 1 >= budget)
            if finished.any():
                self.done[rows[finished]] = True
                keep = (~finished).nonzero().squeeze(-1)
                self.active, tokens = rows[keep], tokens[keep]
                if keep.numel() == 0:
                    self.logits = None
                    break
                self.decoder.keep(keep)
            self.logits = self.decoder.step(tokens)
        return self.finished

    def suspend(self) -> None:
        """Stop decoding (the decoder and its KV cache are free for other work); ``resume`` continues."""
        if self.active is None:
            raise RuntimeError("generation is already paused")
        self.active, self.logits = None, None

    def pause(self) -> list[PartialSequence]:
        """``suspend``, counted as an interruption; returns the unfinished sequences."""
        self.suspend()
        self.interruptions += 1
        rows = self._unfinished()
        return [
            PartialSequence(
                row=row, prompt=self._prompt(row), tokens=self.ids[row, :length].tolist(),
                log_probs=self.log_probs[row, :length].tolist(), versions=self.versions[row, :length].tolist(),
            )
            for row, length in zip(rows.tolist(), self.lengths[rows].tolist())
        ]

    @torch.no_grad()
    def resume(self, version: int) -> None:
        """Re-prefill prompt + tokens so far of the unfinished rows with the decoder's current weights;
        tokens sampled from now on record ``version``."""
        if self.active is not None:
            raise RuntimeError("resume() without pause()")
        self.version = version
        self._prefill_unfinished()

    # ------------------------------------------------------------------ internals
    def _prompt(self, row: int) -> list[int]:
        return self.batch_prompts[int(self.row_batch[row])][int(self.row_prompt[row])]

    def _unfinished(self) -> torch.Tensor:
        return (~self.done).nonzero().squeeze(-1)

    def _prefill_unfinished(self) -> None:
        """KV cache and next-token logits for every unfinished row; identical sequences (the ``n``
        samples of a fresh prompt) are prefilled once and their cache expanded. With a decoder that has
        cohorts (``extend``), rows of very different lengths get caches of their own (``length_groups``),
        so the short rows' attention does not read the long tail's width."""
        rows = self._unfinished()
        if rows.numel() == 0:
            self.active, self.logits = rows, None
            return
        lengths = self.lengths[rows].tolist()
        sequences = [tuple(self._prompt(row) + self.ids[row, :n].tolist()) for row, n in zip(rows.tolist(), lengths)]
        extend = getattr(self.decoder, "extend", None)
        groups = length_groups([len(s) for s in sequences]) if extend is not None else [list(range(len(rows)))]
        parts = []
        for i, group in enumerate(groups):
            unique: dict[tuple, int] = {}
            expand = torch.tensor([unique.setdefault(sequences[j], len(unique)) for j in group], device=self.device)
            ids, mask = left_pad([list(s) for s in unique], self.pad_id, self.device)
            budget = self.params.max_new_tokens - min(lengths[j] for j in group)
            if i:
                parts.append(extend(ids, mask, budget, expand))
            else:
                parts.append(prefill_expanded(self.decoder, ids, mask, budget, expand if len(unique) < len(group) else None))
        self.active = rows[torch.tensor([j for group in groups for j in group], device=self.device)]
        self.logits = parts[0] if len(parts) == 1 else torch.cat(parts)

    def _generation(self, rows: torch.Tensor) -> VersionedGeneration:
        lengths = self.lengths[rows]
        ids = self.ids[rows]
        response_mask = response_mask_from_lengths(ids, lengths)
        width = int(lengths.max())
        versions = (self.versions[rows] * response_mask)[:, :width].cpu()
        return VersionedGeneration(
            prompt_index=self.row_prompt[rows].cpu(),
            response_ids=ids.masked_fill(response_mask == 0, self.pad_id)[:, :width].cpu(),
            response_mask=response_mask[:, :width].cpu(),
            log_probs=(self.log_probs[rows] * response_mask)[:, :width].cpu(),
            stopped=self.stopped[rows].cpu(),
            version=int(versions[response_mask[:, :width].bool().cpu()].min()),
            token_versions=versions,
        )


def length_groups(lengths: list[int], ratio: float = 2.0, slack: int = 32) -> list[list[int]]:
    """Positions of ``lengths`` in groups of similar length (shortest group first, positions in order
    within a group): a group ends where a length exceeds both ``ratio`` x its shortest and its shortest
    + ``slack``. One group when the lengths are alike, so the rows keep their order (and sampling its
    noise)."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    groups: list[list[int]] = []
    for position in order:
        shortest = lengths[groups[-1][0]] if groups else None
        if shortest is None or (lengths[position] > ratio * shortest and lengths[position] > shortest + slack):
            groups.append([position])
        else:
            groups[-1].append(position)
    return [sorted(group) for group in groups]
