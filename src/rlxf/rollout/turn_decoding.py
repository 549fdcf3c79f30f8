"""Multi-turn decoding behind one interface: trajectories that decode a turn, wait for their environment,
get an observation appended, and decode again.

The multi-turn rollout (``roles/env_rollout.py``) drives a :class:`TurnDecoding` by keys (one per
trajectory): ``open(key, prompt_ids)``; ``join(key, max_new_tokens)`` asks for one policy turn;
``advance(generator)`` decodes and returns the turns that ended (each turn's tokens are then part of the
key's transcript); ``append(key, ids)`` adds the environment's observation; ``close(key)`` when the
trajectory ends. Keys may join while others are decoding (``advance`` is called again and again), so an
implementation is free to batch whichever trajectories are ready.

Two implementations:

* :class:`~rlxf.rollout.turn_sessions.TurnSessions` (the torch engine with its Llama-family decoder):
  each trajectory keeps its KV cache across turns, only the new tokens are prefilled, and rows join the
  running decode batch between any two decode steps (continuous batching).
* :class:`GenerateTurns` (any engine: HF, vLLM, the torch engine's generic decoder): each ``advance`` is
  one ``engine.generate`` over the whole transcripts of the trajectories that joined since the last one,
  i.e. every turn re-prefills its transcript (vLLM's ``enable_prefix_caching``, on by default, finds the
  shared prefix in its block cache instead of recomputing it).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Protocol

import torch

from rlxf.rollout.sampling import SamplingParams


@dataclass
class TurnOutput:
    """One policy turn that ended: its tokens, their log-probs and the policy version of each."""

    key: Hashable
    ids: list[int]
    log_probs: list[float]
    versions: list[int]


class TurnDecoding(Protocol):
    @property
    def busy(self) -> bool:
        """Some joined turn has not ended yet (``advance`` has work)."""
        ...

    def open(self, key: Hashable, ids: list[int]) -> None: ...

    def append(self, key: Hashable, ids: list[int]) -> None: ...

    def join(self, key: Hashable, max_new_tokens: int) -> None: ...

    def advance(self, generator: torch.Generator | None = None) -> list[TurnOutput]: ...

    def close(self, key: Hashable) -> None: ...


def turn_params(params: SamplingParams, max_new_tokens: int) -> SamplingParams:
    """One sample per trajectory and turn, at the rollout's temperature / top-p / top-k."""
    return SamplingParams(n=1, temperature=params.temperature, top_p=params.top_p, top_k=params.top_k,
                          max_new_tokens=max_new_tokens)


class GenerateTurns:
    """Re-prefill: each ``advance`` is one ``engine.generate`` over the joined trajectories' transcripts."""

    def __init__(self, engine, params: SamplingParams) -> None:
        self.engine, self.params = engine, params
        self.transcripts: dict[Hashable, list[int]] = {}
        self.joined: list[tuple[Hashable, int]] = []

    @property
    def busy(self) -> bool:
        return bool(self.joined)

    def open(self, key: Hashable, ids: list[int]) -> None:
        self.transcripts[key] = list(ids)

    def append(self, key: Hashable, ids: list[int]) -> None:
        self.transcripts[key] += ids

    def join(self, key: Hashable, max_new_tokens: int) -> None:
        self.joined.append((key, max_new_tokens))

    def advance(self, generator: torch.Generator | None = None) -> list[TurnOutput]:
        joined, self.joined = self.joined, []
        if not joined:
            return []
        budget = max(b for _, b in joined)  # one generate call: the largest budget, each row cut to its own
        gen = self.engine.generate([self.transcripts[k] for k, _ in joined], turn_params(self.params, budget), generator)
        outputs = []
        for row, (key, own_budget) in enumerate(joined):
            length = min(int(gen.response_mask[row].sum()), own_budget)
            ids = gen.response_ids[row, :length].tolist()
            self.transcripts[key] += ids
            outputs.append(TurnOutput(key, ids, gen.log_probs[row, :length].tolist(), [gen.version] * length))
        return outputs

    def close(self, key: Hashable) -> None:
        del self.transcripts[key]
