"""Interruptible generation (partial rollouts): sample a batch in chunks, pause, swap weights, resume.

A :class:`InterruptibleGeneration` samples ``n`` responses for each prompt like the built-in engine
(shared prefill, finished rows leave the decoder's batch), but only ``run(steps)`` decode steps at a
time. Between chunks the caller may ``pause()``: the unfinished sequences come back (prompt ids,
tokens so far, their log-probs and policy versions) and the decoder's KV cache is given up. After new
weights are loaded into the decoder, ``resume(version)`` prefills prompt + partial tokens of every
unfinished row under the new weights (recomputing their KV cache) and decoding continues. Every token
records the version of the weights that produced it, so one response may mix two versions
(``token_versions``, which becomes ``TrajectoryBatch.policy_version``).

Paused and resumed with unchanged weights and the same generator, a generation samples the tokens of
an uninterrupted one: the active rows are the same, in the same order, so every sampling call draws
the same noise; only the logits differ by float rounding (prefill vs incremental decode).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlxf.rollout.decoders.base import Decoder
from rlxf.rollout.engine import Generation, left_pad, response_mask_from_lengths
from rlxf.rollout.sampling import SamplingParams, sample_tokens


@dataclass
class PartialSequence:
    """An unfinished row at a pause: row ``i * n + j`` is sample j of prompt i."""

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
        eos_id: int, pad_id: int, device: torch.device | str,
    ) -> None:
        self.decoder, self.prompts, self.params = decoder, prompts, params
        self.version, self.eos_id, self.pad_id = version, eos_id, pad_id
        self.device = torch.device(device)
        total, budget = len(prompts) * params.n, params.max_new_tokens
        self.prompt_index = torch.arange(len(prompts)).repeat_interleave(params.n)
        self.ids = torch.full((total, budget), pad_id, dtype=torch.long, device=self.device)
        self.log_probs = torch.zeros((total, budget), dtype=torch.float32, device=self.device)
        self.versions = torch.zeros((total, budget), dtype=torch.long, device=self.device)
        self.lengths = torch.zeros(total, dtype=torch.long, device=self.device)
        self.stopped = torch.zeros(total, dtype=torch.bool, device=self.device)
        self.done = torch.zeros(total, dtype=torch.bool, device=self.device)
        self.interruptions = 0
        with torch.no_grad():
            ids, mask = left_pad(prompts, pad_id, self.device)
            logits = decoder.prefill(ids, mask, budget)
            if params.n > 1:  # prefill each prompt once, then expand its cache to its n samples
                rows = torch.arange(len(prompts), device=self.device).repeat_interleave(params.n)
                decoder.keep(rows)
                logits = logits.index_select(0, rows)
        self.active: torch.Tensor | None = torch.arange(total, device=self.device)  # None while paused
        self.logits: torch.Tensor | None = logits  # next-token logits of the active rows

    @property
    def finished(self) -> bool:
        return bool(self.done.all())

    @property
    def paused(self) -> bool:
        return self.active is None

    @torch.no_grad()
    def run(self, steps: int | None = None, generator: torch.Generator | None = None) -> bool:
        """Sample up to ``steps`` more tokens per active row (None: until every row is finished);
        returns ``finished``. A row finishes at end-of-sequence or at ``max_new_tokens``."""
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
            eos = tokens == self.eos_id
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

    def pause(self) -> list[PartialSequence]:
        """Stop decoding; the decoder (and its KV cache) is free for other work, e.g. a weight load."""
        self.active, self.logits = None, None
        self.interruptions += 1
        return [
            PartialSequence(
                row=row, prompt=self.prompts[int(self.prompt_index[row])],
                tokens=self.ids[row, :length].tolist(), log_probs=self.log_probs[row, :length].tolist(),
                versions=self.versions[row, :length].tolist(),
            )
            for row, length in zip(self._unfinished().tolist(), self.lengths[self._unfinished()].tolist())
        ]

    @torch.no_grad()
    def resume(self, version: int) -> None:
        """Re-prefill prompt + tokens so far of the unfinished rows with the decoder's current weights;
        tokens sampled from now on record ``version``."""
        if self.active is not None:
            raise RuntimeError("resume() without pause()")
        self.version = version
        rows = self._unfinished()
        self.active = rows
        if rows.numel() == 0:
            return
        lengths = self.lengths[rows].tolist()
        sequences = [
            self.prompts[int(self.prompt_index[row])] + self.ids[row, :length].tolist()
            for row, length in zip(rows.tolist(), lengths)
        ]
        ids, mask = left_pad(sequences, self.pad_id, self.device)
        self.logits = self.decoder.prefill(ids, mask, self.params.max_new_tokens - min(lengths))

    def result(self) -> VersionedGeneration:
        if not self.finished:
            raise RuntimeError("generation has unfinished rows: run() it to the end first")
        response_mask = response_mask_from_lengths(self.ids, self.lengths)
        width = int(self.lengths.max())
        versions = (self.versions * response_mask)[:, :width].cpu()
        return VersionedGeneration(
            prompt_index=self.prompt_index,
            response_ids=self.ids.masked_fill(response_mask == 0, self.pad_id)[:, :width].cpu(),
            response_mask=response_mask[:, :width].cpu(),
            log_probs=(self.log_probs * response_mask)[:, :width].cpu(),
            stopped=self.stopped.cpu(),
            version=int(versions[response_mask[:, :width].bool().cpu()].min()),
            token_versions=versions,
        )

    def _unfinished(self) -> torch.Tensor:
        return (~self.done).nonzero().squeeze(-1)
