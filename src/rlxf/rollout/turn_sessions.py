"""Per-trajectory KV caches kept across turns, decoded with continuous batching (:class:`TurnDecoding`).

A session holds a trajectory's token ids and, between turns, the K/V of all but the last of them (the
turn's last sampled token was never fed to the model). When it joins for its next turn, only the ids past
the cache (that last token and the observation) are prefilled over it (``decoders/llama_past.py``), as a
cohort of the decoder's running batch: trajectories whose environment answered join between any two
decode steps, beside rows already decoding, and a row whose turn ends (end-of-sequence, or its own token
budget) leaves the batch with its cache copied out. Nothing waits for a turn's slowest trajectory.

Weights: a cache is as good as the weights that computed it. Each session remembers the engine version
its cache was built under; one built under an older version is dropped and the session's whole transcript
is prefilled again under the current weights when it next joins. Rows decoding when the version changes
(a weight update between two ``advance`` calls) are re-prefilled before the next token is sampled, so
every token is sampled from the weights of the version it records, as in ``rollout/interruptible.py``.

``keep_cache=False`` drops every cache at the end of its turn (each turn re-prefills the transcript, the
cost the kept cache saves) with the same batching: the two sample the same tokens from the same generator
(the logits differ by float rounding only: incremental prefill vs a prefill of the whole transcript).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from rlxf.rollout.sampling import SamplingParams, sample_tokens
from rlxf.rollout.stops import stop_id_list
from rlxf.rollout.turn_decoding import TurnOutput, turn_params


@dataclass
class _Session:
    ids: list[int]  # the transcript: prompt, turns, observations
    past: Tensor | None = None  # K/V of ids[:cached]
    cached: int = 0
    version: int = -1  # engine version the cache was computed with


@dataclass
class _Row:
    """A session decoding a turn, in the decoder's row order."""

    key: Hashable
    budget: int
    ids: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)


class TurnSessions:
    def __init__(self, engine, params: SamplingParams, keep_cache: bool = True) -> None:
        self.engine, self.decoder, self.keep_cache = engine, engine.decoder, keep_cache
        self.params = turn_params(params, params.max_new_tokens)
        self.stop_ids = set(stop_id_list(engine.eos_id))
        self.sessions: dict[Hashable, _Session] = {}
        self.joined: list[_Row] = []
        self.running: list[_Row] = []
        self.cohorts: list = []  # the decoder's cohorts for the running rows (the decoder may serve others between calls)
        self.logits: Tensor | None = None  # next-token logits of the running rows
        self.version = engine.version  # the weights the running rows' caches hold
        self.prefilled = 0  # tokens run through prefill (what a kept cache saves shows here)

    @property
    def busy(self) -> bool:
        return bool(self.running or self.joined)

    def open(self, key: Hashable, ids: list[int]) -> None:
        self.sessions[key] = _Session(list(ids))

    def append(self, key: Hashable, ids: list[int]) -> None:
        self.sessions[key].ids += ids

    def join(self, key: Hashable, max_new_tokens: int) -> None:
        if max_new_tokens < 1:
            raise ValueError("join: a turn needs a budget of at least one token")
        self.joined.append(_Row(key, max_new_tokens))

    def close(self, key: Hashable) -> None:
        del self.sessions[key]

    @torch.no_grad()
    def advance(self, generator: torch.Generator | None = None) -> list[TurnOutput]:
        """Admit the joined rows, sample one token for every running row; returns the turns that ended."""
        self.decoder.cohorts = self.cohorts
        if self.running and self.engine.version != self.version:
            self._refill(self.running, fresh=True)  # caches of the old weights: recompute before sampling
        if self.joined:
            self._refill(self.joined, fresh=False)
            self.running += self.joined
            self.joined = []
        self.version = self.engine.version
        if not self.running:
            return []
        tokens, logp = sample_tokens(self.logits, self.params, generator)
        ended, outputs = [], []
        for i, (row, token, lp) in enumerate(zip(self.running, tokens.tolist(), logp.tolist())):
            row.ids.append(token)
            row.log_probs.append(lp)
            row.versions.append(self.version)
            if token in self.stop_ids or len(row.ids) >= row.budget:
                ended.append(i)
                outputs.append(self._end_turn(i, row))
        if ended:
            gone = set(ended)
            survivors = [i for i in range(len(self.running)) if i not in gone]
            self.running = [self.running[i] for i in survivors]
            if not survivors:
                self.cohorts, self.logits = [], None
                self.decoder.cohorts = []
                return outputs
            self.decoder.keep(torch.tensor(survivors, device=self.decoder.device))
            tokens = tokens[torch.tensor(survivors, device=tokens.device)]
        self.logits = self.decoder.step(tokens)
        self.cohorts = self.decoder.cohorts
        return outputs

    # ------------------------------------------------------------------ internals
    def _end_turn(self, i: int, row: _Row) -> TurnOutput:
        session = self.sessions[row.key]
        session.ids += row.ids
        if self.keep_cache:
            session.past, session.cached, session.version = self.decoder.row_cache(i), len(session.ids) - 1, self.version
            assert session.past.shape[3] == session.cached, (session.past.shape, session.cached)
        else:
            session.past, session.cached = None, 0
        return TurnOutput(row.key, row.ids, row.log_probs, row.versions)

    def _refill(self, rows: list[_Row], fresh: bool) -> None:
        """Prefill ``rows`` as a new cohort: their ids past the cache (a cache of another version, or with
        ``fresh`` — rows that were decoding — everything); ``fresh`` replaces the running batch."""
        pasts, new = [], []
        for row in rows:
            session = self.sessions[row.key]
            ids = session.ids + row.ids
            usable = not fresh and session.past is not None and session.version == self.engine.version
            pasts.append(session.past if usable else None)
            new.append(ids[session.cached:] if usable else ids)
            if not usable:
                session.past, session.cached = None, 0
        self.prefilled += sum(len(n) for n in new)
        if fresh:
            self.decoder.cohorts = []
        budget = max(row.budget - len(row.ids) for row in rows)
        logits = self.decoder.extend_with_past(pasts, new, budget)
        self.logits = logits if fresh or self.logits is None or not self.running else torch.cat([self.logits, logits])
        self.cohorts = self.decoder.cohorts
