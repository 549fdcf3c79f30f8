"""Turns of a multi-turn trajectory as the advantage estimators see them (credit per turn).

A multi-turn rollout (``roles/env_rollout.py``) records per row ``turn_spans`` (the ``[start, end)``
response positions of each policy turn) and ``turn_rewards`` (the environment's reward for each turn);
the row's score reaches the loop as their sum. :class:`TurnLayout` holds those per row, plus the key of
the environment state each turn acted in: the observation tokens that came just before it (the prompt,
shared by a group, for the first turn). A row without turn metadata (a single-turn rollout) is one turn
over all of its loss tokens, with no environment turn rewards: its score stays where it is, so every
turn-level estimator reduces to its sequence-level counterpart on it.

Plain data in, tensors out: nothing here knows the batch type (``algos/`` is a leaf library).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch

from rlxf.algos.masked import last_token_index, masked_sum

Span = tuple[int, int]


@dataclass(frozen=True)
class TurnLayout:
    """Per row: its policy turns' spans, the environment's reward per turn (empty: none given; the score
    is then the row's last-token reward alone), and a hashable key of the state each turn answered."""

    spans: list[list[Span]]
    rewards: list[list[float]]
    states: list[list[Hashable]]

    def __post_init__(self) -> None:
        for i, (spans, rewards, states) in enumerate(zip(self.spans, self.rewards, self.states, strict=True)):
            if len(states) != len(spans) or (rewards and len(rewards) != len(spans)):
                raise ValueError(f"row {i}: {len(spans)} turn spans, {len(rewards)} turn rewards, "
                                 f"{len(states)} states (rewards: one per turn, or none)")

    @classmethod
    def from_rollout(cls, metadata: Sequence[dict], response_ids: torch.Tensor, mask: torch.Tensor) -> TurnLayout:
        """From a rollout's per-row metadata (``turn_spans``, ``turn_rewards``) and its response tokens."""
        whole = single_turn_spans(mask)
        spans, rewards, states = [], [], []
        for i, row in enumerate(metadata):
            row_spans = [tuple(int(x) for x in span) for span in row.get("turn_spans") or []]
            if not row_spans:
                spans.append(whole[i])
                rewards.append([])
                states.append([()] * len(whole[i]))
                continue
            spans.append(row_spans)
            rewards.append([float(r) for r in row.get("turn_rewards", [])][: len(row_spans)])
            # the observation between the previous turn and this one; the first turn's state is the prompt
            ends = [0] + [end for _, end in row_spans[:-1]]
            states.append([tuple(response_ids[i, e:s].tolist()) for e, (s, _) in zip(ends, row_spans)])
        return cls(spans, rewards, states)

    @classmethod
    def single_turn(cls, mask: torch.Tensor) -> TurnLayout:
        """Every row one turn (what the estimators use when no layout is given)."""
        spans = single_turn_spans(mask)
        return cls(spans, [[] for _ in spans], [[()] * len(s) for s in spans])

    @property
    def max_turns(self) -> int:
        return max((len(s) for s in self.spans), default=0)


def single_turn_spans(mask: torch.Tensor) -> list[list[Span]]:
    """Per row: one span from its first to its last loss token (none for a row without loss tokens)."""
    last = last_token_index(mask)
    first = torch.where(mask.bool(), torch.arange(mask.shape[1], device=mask.device), mask.shape[1]).min(dim=1).values
    return [[(int(f), int(e) + 1)] if e >= 0 else [] for f, e in zip(first.tolist(), last.tolist())]


def turn_end_positions(layout: TurnLayout, mask: torch.Tensor) -> list[list[int]]:
    """Per row and turn: the last loss position inside the turn's span, or before it when the turn is
    empty (cut by the token budget); -1 when there is none."""
    keep = mask.bool().cpu()
    ends = []
    for i, spans in enumerate(layout.spans):
        positions = torch.nonzero(keep[i]).squeeze(1).tolist()
        ends.append([max((p for p in positions if p < end), default=-1) for _, end in spans])
    return ends


def turn_placed_rewards(token_rewards: torch.Tensor, mask: torch.Tensor, layout: TurnLayout) -> torch.Tensor:
    """[B, R] ``token_rewards`` with each row's environment turn rewards moved from its last loss token
    (where the loop put their sum, inside the score) to the last token of the turn that earned them.

    Whatever else the score holds (another reward mixed in, a length penalty) stays on the last token,
    and per-token terms (a KL penalty in the reward) stay where they are: each row's total is unchanged.
    """
    placed = token_rewards.clone()
    last = last_token_index(mask).tolist()
    for i, (rewards, ends) in enumerate(zip(layout.rewards, turn_end_positions(layout, mask), strict=True)):
        if last[i] < 0 or not rewards:
            continue
        for reward, end in zip(rewards, ends, strict=True):
            if 0 <= end != last[i]:  # the last turn's reward is already in place (no float round trip)
                placed[i, last[i]] -= reward
                placed[i, end] += reward
    return placed


def turn_index(layout: TurnLayout, mask: torch.Tensor) -> torch.Tensor:
    """[B, R] the turn each loss token belongs to; -1 on observations, padding and outside every span."""
    index = torch.full(mask.shape, -1, dtype=torch.long, device=mask.device)
    for i, spans in enumerate(layout.spans):
        for k, (start, end) in enumerate(spans):
            index[i, start:end] = k
    return torch.where(mask.bool(), index, -1)


def per_turn_rewards(token_rewards: torch.Tensor, mask: torch.Tensor, layout: TurnLayout) -> torch.Tensor:
    """[B, T] each turn's reward: the sum of the turn-placed token rewards over the turn's loss tokens
    (T = the most turns of any row; turns a row did not take are 0). A row of one turn gets exactly
    its masked row sum (the sequence score)."""
    placed = turn_placed_rewards(token_rewards, mask, layout)
    index = turn_index(layout, mask)
    columns = [masked_sum(placed, index == k, dim=1) for k in range(layout.max_turns)]
    return torch.stack(columns, dim=1) if columns else placed.new_zeros(len(layout.spans), 0)


def turn_returns(turn_rewards: torch.Tensor, turn_count: torch.Tensor, gamma: float) -> torch.Tensor:
    """[B, T] return-to-go from each turn, ``G_k = r_k + gamma * G_(k+1)``, 0 past a row's last turn."""
    returns = torch.zeros_like(turn_rewards)
    running = torch.zeros(turn_rewards.shape[0], dtype=turn_rewards.dtype, device=turn_rewards.device)
    for k in reversed(range(turn_rewards.shape[1])):
        running = torch.where(k < turn_count, turn_rewards[:, k] + gamma * running, torch.zeros_like(running))
        returns[:, k] = running
    return returns


def turn_counts(layout: TurnLayout, device: torch.device | str = "cpu") -> torch.Tensor:
    """[B] how many turns each row took."""
    return torch.tensor([len(s) for s in layout.spans], dtype=torch.long, device=device)


def spread_over_turns(per_turn: torch.Tensor, mask: torch.Tensor, layout: TurnLayout) -> torch.Tensor:
    """[B, T] -> [B, R]: each turn's value on the loss tokens of its span, 0 elsewhere (observations)."""
    index = turn_index(layout, mask)
    if per_turn.shape[1] == 0:
        return torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    spread = per_turn.float().gather(1, index.clamp(min=0))
    return torch.where(index >= 0, spread, 0.0)
