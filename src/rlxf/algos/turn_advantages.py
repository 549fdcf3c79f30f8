"""Advantage estimators that credit each policy turn of a multi-turn trajectory.

They take ``turns`` (an :class:`~rlxf.algos.turns.TurnLayout`: each row's turn spans, the environment's
reward per turn, and the state each turn answered) beside the usual arguments. Each turn's reward is the
sum of its tokens' rewards once the environment's turn rewards sit on the turns that earned them
(:func:`~rlxf.algos.turns.turn_placed_rewards`). A row of one turn (or ``turns=None``) gives exactly the
sequence-level estimator each one extends, and observation tokens always get advantage 0.

- ``turn_grpo``: the return-to-go from each turn (discounted per turn by ``turn_gamma``), normalised
  among the group's rows *at the same turn index* (the rows that reached it): a turn is judged against
  the group's other attempts at that turn, not by the whole trajectory's total. Every token of turn k
  gets its turn's advantage. The first turn's return is the row's score, so turn 1 gets GRPO's advantage.
- ``gigpo``: GiGPO (Feng et al. 2025, "Group-in-Group Policy Optimization"): the episode-level GRPO
  advantage mixed with a step-level one, ``(1 - w) * A_episode + w * A_step`` (``w =
  step_advantage_weight``), where ``A_step`` normalises the return-to-go among the turns of the group
  that acted in the same environment state (equal observation tokens before the turn; the prompt for the
  first), wherever in the trajectory they happened. (The paper adds ``w * A_step`` to ``A_episode``;
  the convex mix keeps the scale of GRPO's advantages.)
- ``turn_gae``: GAE over the loss tokens with the rewards on each turn's last token instead of the
  sequence's end, so the advantage of an early turn bootstraps from the critic's value at the next
  turn's first token (the observation in between is skipped) and a turn's own reward is not spread
  over the turns before it by a value that has to wait for the end.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

import torch

from rlxf.algos.advantages import (
    ADVANTAGE_ESTIMATORS,
    AdvantageKnobs,
    gae_advantages,
    group_relative,
    group_relative_advantages,
)
from rlxf.algos.turns import (
    TurnLayout,
    per_turn_rewards,
    spread_over_turns,
    turn_counts,
    turn_placed_rewards,
    turn_returns,
)

# (row, turn index) -> the key of the set of turns a turn is compared with
TurnKey = Callable[[int, int], Hashable]


def keyed_turn_advantages(
    cfg: AdvantageKnobs, per_turn: torch.Tensor, layout: TurnLayout, key: TurnKey
) -> torch.Tensor:
    """[B, T] ``per_turn`` values made group-relative among the turns that share a key (0 past a row's
    last turn). The turns are taken row by row, so a layout of single turns is exactly GRPO's rows."""
    cells = [(i, k) for i, spans in enumerate(layout.spans) for k in range(len(spans))]
    out = torch.zeros_like(per_turn)
    if not cells:
        return out
    index: dict[Hashable, int] = {}
    ids = torch.tensor([index.setdefault(key(i, k), len(index)) for i, k in cells], device=per_turn.device)
    rows = torch.tensor([i for i, _ in cells], device=per_turn.device)
    turns = torch.tensor([k for _, k in cells], device=per_turn.device)
    out[rows, turns] = group_relative(cfg, per_turn[rows, turns], ids)
    return out


def _returns_to_go(cfg: AdvantageKnobs, token_rewards: torch.Tensor, mask: torch.Tensor, layout: TurnLayout):
    rewards = per_turn_rewards(token_rewards, mask, layout)
    return turn_returns(rewards, turn_counts(layout, rewards.device), cfg.turn_gamma)


@ADVANTAGE_ESTIMATORS.register("turn_grpo")
def turn_group_relative_advantages(cfg, token_rewards, mask, group_ids, values, baseline_rewards, turns=None):
    """Return-to-go per turn, group-relative per (group, turn index). Returns equal the advantages."""
    layout = turns or TurnLayout.single_turn(mask)
    groups = group_ids.tolist()
    per_turn = keyed_turn_advantages(cfg, _returns_to_go(cfg, token_rewards, mask, layout), layout,
                                     lambda i, k: (groups[i], k))
    advantages = spread_over_turns(per_turn, mask, layout)
    return advantages, advantages


@ADVANTAGE_ESTIMATORS.register("gigpo")
def group_in_group_advantages(cfg, token_rewards, mask, group_ids, values, baseline_rewards, turns=None):
    """GRPO's episode advantage mixed with the return-to-go made group-relative per (group, state).
    Returns equal the advantages."""
    layout = turns or TurnLayout.single_turn(mask)
    groups = group_ids.tolist()
    episode, _ = group_relative_advantages(cfg, token_rewards, mask, group_ids, values, baseline_rewards)
    per_turn = keyed_turn_advantages(cfg, _returns_to_go(cfg, token_rewards, mask, layout), layout,
                                     lambda i, k: (groups[i], layout.states[i][k]))
    step = spread_over_turns(per_turn, mask, layout)
    # written as a correction of the episode advantage: where the two agree (one turn) it is exactly GRPO
    advantages = episode + cfg.step_advantage_weight * (step - episode)
    return advantages, advantages


@ADVANTAGE_ESTIMATORS.register("turn_gae")
def turn_gae_advantages(cfg, token_rewards, mask, group_ids, values, baseline_rewards, turns=None):
    """``gae`` with each turn's reward on the turn's last token (see the module docstring)."""
    layout = turns or TurnLayout.single_turn(mask)
    placed = turn_placed_rewards(token_rewards, mask, layout)
    return gae_advantages(cfg, placed, mask, group_ids, values, baseline_rewards)
