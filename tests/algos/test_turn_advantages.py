"""Credit per turn (algos/turns.py, algos/turn_advantages.py): hand-computed advantages on small
multi-turn batches, observation tokens at 0, and single-turn rows equal to the sequence-level estimators."""

from __future__ import annotations

import pytest
import torch

from rlxf.algos import AlgorithmConfig, TurnLayout, compute_advantages, token_rewards_from_scores
from rlxf.algos.turns import per_turn_rewards, turn_placed_rewards

# Width 8. A, B, D: turn [0, 2), observation [2, 4), turn [4, 6), padding. C: one turn [0, 2).
MASK = torch.tensor([[1, 1, 0, 0, 1, 1, 0, 0], [1, 1, 0, 0, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0, 0, 0],
                     [1, 1, 0, 0, 1, 1, 0, 0]])
IDS = torch.tensor([[5, 6, 7, 8, 5, 6, 0, 0], [5, 6, 7, 9, 5, 6, 0, 0], [5, 6, 0, 0, 0, 0, 0, 0],
                    [5, 5, 7, 8, 6, 6, 0, 0]])
TWO = [(0, 2), (4, 6)]
META = [{"turn_spans": TWO, "turn_rewards": [1.0, 0.0]},   # A: step 1 right, step 2 wrong
        {"turn_spans": TWO, "turn_rewards": [1.0, 1.0]},   # B: both right
        {"turn_spans": [(0, 2)], "turn_rewards": [0.0]},   # C: step 1 wrong
        {"turn_spans": TWO, "turn_rewards": [1.0, 1.0]}]   # D: both right, same state as A at turn 2
SCORES = torch.tensor([1.0, 2.0, 0.0, 2.0])


def algo(estimator: str, **knobs) -> AlgorithmConfig:
    return AlgorithmConfig(name="grpo", advantage_estimator=estimator, norm_adv_by_std=False, **knobs)


def advantages(estimator: str, rows=slice(None), **knobs) -> torch.Tensor:
    mask, meta = MASK[rows], META[rows]
    layout = TurnLayout.from_rollout(meta, IDS[rows], mask)
    rewards = token_rewards_from_scores(SCORES[rows], mask)
    adv, _ = compute_advantages(algo(estimator, **knobs), rewards, mask, torch.zeros(len(meta), dtype=torch.long),
                                turns=layout)
    return adv


def test_layout_reads_spans_rewards_and_the_observation_before_each_turn():
    layout = TurnLayout.from_rollout(META, IDS, MASK)
    assert layout.spans[0] == TWO and layout.rewards[1] == [1.0, 1.0]
    assert layout.states == [[(), (7, 8)], [(), (7, 9)], [()], [(), (7, 8)]]


def test_turn_rewards_move_from_the_sequence_end_to_their_turns():
    layout = TurnLayout.from_rollout(META, IDS, MASK)
    rewards = token_rewards_from_scores(SCORES + torch.tensor([0.25, 0, 0, 0]), MASK)  # A: 0.25 not from the env
    placed = turn_placed_rewards(rewards, MASK, layout)
    assert placed[0].tolist() == [0, 1, 0, 0, 0, 0.25, 0, 0]
    assert placed[1].tolist() == [0, 1, 0, 0, 0, 1, 0, 0]
    assert placed[2].tolist() == [0] * 8
    assert per_turn_rewards(rewards, MASK, layout).tolist() == [[1, 0.25], [1, 1], [0, 0], [1, 1]]


def test_turn_grpo_by_hand():
    # returns-to-go A [1, 0], B [2, 1], C [0]; turn 1 among A, B, C: mean 1; turn 2 among A, B: mean 0.5
    adv = advantages("turn_grpo", slice(0, 3))
    assert adv.tolist() == [[0, 0, 0, 0, -0.5, -0.5, 0, 0], [1, 1, 0, 0, 0.5, 0.5, 0, 0], [-1, -1, 0, 0, 0, 0, 0, 0]]
    # sequence-level GRPO gives A's wrong second step its row's 0 (the same samples, no per-turn credit)
    assert advantages("grpo", slice(0, 3))[0].tolist() == [0] * 8


def test_turn_grpo_with_gamma_1_is_grpo_against_the_rows_that_reached_the_turn_and_gamma_0_scores_each_turn():
    # turn_gamma 1 (an episode that ends at a wrong step): turn k's return is the row's total less the k-1 right
    # steps every row that reached k shares, so turn k's advantage is (total - the mean total of the rows that
    # reached k): later turns' outcomes stay in an earlier turn's credit (A's right first step: 1 - 1 = 0).
    totals = SCORES[:3].tolist()
    adv = advantages("turn_grpo", slice(0, 3))
    assert adv[:, 0].tolist() == [t - sum(totals) / 3 for t in totals]
    assert adv[:2, 4].tolist() == [t - sum(totals[:2]) / 2 for t in totals[:2]]
    # turn_gamma 0: a turn's own reward against the group's at that turn. Turn 1: A, B right, C wrong (mean 2/3);
    # turn 2: A wrong, B right (mean 1/2)
    adv = advantages("turn_grpo", slice(0, 3), turn_gamma=0.0)
    assert adv[:, 0].tolist() == pytest.approx([1 / 3, 1 / 3, -2 / 3])
    assert adv[:2, 4].tolist() == [-0.5, 0.5]


def test_turn_grpo_discount_and_std():
    # turn_gamma 0.5: A [1, 0], B [1.5, 1], C [0]; turn 1 mean 2.5/3
    adv = advantages("turn_grpo", slice(0, 3), turn_gamma=0.5)
    assert adv[:, 0].tolist() == pytest.approx([1 - 2.5 / 3, 1.5 - 2.5 / 3, -2.5 / 3])
    assert adv[:2, 4].tolist() == [-0.5, 0.5]
    # with the std: turn 2's spread is sqrt(0.5) (unbiased, two rows)
    cfg = AlgorithmConfig(name="grpo", advantage_estimator="turn_grpo")
    layout = TurnLayout.from_rollout(META[:3], IDS[:3], MASK[:3])
    adv, _ = compute_advantages(cfg, token_rewards_from_scores(SCORES[:3], MASK[:3]), MASK[:3],
                                torch.zeros(3, dtype=torch.long), turns=layout)
    assert adv[:2, 5].tolist() == pytest.approx([-0.5 / (0.5**0.5 + 1e-6), 0.5 / (0.5**0.5 + 1e-6)])
    assert adv[:, 0].tolist() == pytest.approx([0, 1 / (1 + 1e-6), -1 / (1 + 1e-6)])


def test_gigpo_groups_equal_states_by_hand():
    # episode: scores [1, 2, 0, 2] - 1.25; turn 2's step groups: state (7, 8) = {A: 0, D: 1}, (7, 9) = {B}
    adv = advantages("gigpo", step_advantage_weight=0.5)
    episode = [-0.25, 0.75, -1.25, 0.75]
    assert adv[:, 0].tolist() == episode  # first turn: the step group is the group
    assert adv[[0, 1, 3], 4].tolist() == [-0.25 + 0.5 * (-0.5 + 0.25), 0.75 + 0.5 * (0 - 0.75),
                                          0.75 + 0.5 * (0.5 - 0.75)]
    assert advantages("gigpo", step_advantage_weight=0.0).tolist() == advantages("grpo").tolist()


@pytest.mark.parametrize("estimator", ["turn_grpo", "gigpo"])
def test_observations_and_padding_get_no_advantage(estimator):
    adv = advantages(estimator)
    assert (adv[MASK == 0] == 0).all() and (adv[MASK == 1] != 0).any()


def test_turn_gae_by_hand():
    # one row: turns [0, 2) and [4, 6), rewards 1 and 0.5; values on the observation are junk and skipped
    mask = torch.tensor([[1, 1, 0, 0, 1, 1]])
    values = torch.tensor([[0.1, 0.2, 9.0, 9.0, 0.3, 0.4]])
    layout = TurnLayout.from_rollout([{"turn_spans": TWO, "turn_rewards": [1.0, 0.5]}], torch.zeros(1, 6, dtype=torch.long), mask)
    cfg = AlgorithmConfig(name="ppo", advantage_estimator="turn_gae", gamma=0.9, lam=0.8, norm_adv_by_std=False)
    adv, returns = compute_advantages(cfg, token_rewards_from_scores(torch.tensor([1.5]), mask), mask,
                                      torch.zeros(1, dtype=torch.long), values=values, turns=layout)
    # deltas: t5 0.5-0.4; t4 0.9*0.4-0.3; t1 1+0.9*0.3-0.2 (bootstraps from turn 2's first token); t0 0.9*0.2-0.1
    a5 = 0.1
    a4 = 0.06 + 0.72 * a5
    a1 = 1.07 + 0.72 * a4
    a0 = 0.08 + 0.72 * a1
    assert returns[0].tolist() == pytest.approx([a0 + 0.1, a1 + 0.2, 0, 0, a4 + 0.3, a5 + 0.4])
    mean = (a0 + a1 + a4 + a5) / 4
    assert adv[0].tolist() == pytest.approx([a0 - mean, a1 - mean, 0, 0, a4 - mean, a5 - mean])
    # sequence-level gae: the whole 1.5 at the end, so turn 2's tokens see 1.5 - V
    _, seq_returns = compute_advantages(cfg.model_copy(update={"advantage_estimator": "gae"}),
                                        token_rewards_from_scores(torch.tensor([1.5]), mask), mask,
                                        torch.zeros(1, dtype=torch.long), values=values)
    assert seq_returns[0, 5].item() == pytest.approx(1.5)


def single_turn_batch():
    gen = torch.Generator().manual_seed(0)
    mask = torch.ones(6, 5, dtype=torch.long)
    mask[1, 3:] = 0
    mask[4, 2:] = 0
    rewards = token_rewards_from_scores(torch.rand(6, generator=gen), mask)
    rewards = rewards + 0.01 * torch.randn(6, 5, generator=gen) * mask  # a per-token KL penalty
    values = torch.randn(6, 5, generator=gen)
    return rewards, mask, torch.tensor([0, 0, 0, 1, 1, 1]), values


@pytest.mark.parametrize(("turn_estimator", "estimator", "name"),
                         [("turn_grpo", "grpo", "grpo"), ("gigpo", "grpo", "grpo"), ("turn_gae", "gae", "ppo")])
@pytest.mark.parametrize("with_metadata", [False, True])
def test_single_turn_rows_equal_the_sequence_level_estimator(turn_estimator, estimator, name, with_metadata):
    rewards, mask, groups, values = single_turn_batch()
    layout = None
    if with_metadata:  # a multi-turn rollout whose episodes all ended after one turn
        scores = (rewards * mask).sum(1)
        meta = [{"turn_spans": [(0, int(m.sum()))], "turn_rewards": [float(s)]} for m, s in zip(mask, scores)]
        layout = TurnLayout.from_rollout(meta, torch.zeros_like(mask), mask)
    turn = compute_advantages(AlgorithmConfig(name=name, advantage_estimator=turn_estimator, turn_gamma=0.7),
                              rewards, mask, groups, values=values, turns=layout)
    plain = compute_advantages(AlgorithmConfig(name=name, advantage_estimator=estimator), rewards, mask, groups,
                               values=values)
    assert torch.equal(turn[0], plain[0]) and torch.equal(turn[1], plain[1])


def test_config_rules():
    with pytest.raises(ValueError, match="'turn_gae' needs a critic"):
        AlgorithmConfig(name="grpo", advantage_estimator="turn_gae")
    with pytest.raises(ValueError, match="turn_gama"):
        AlgorithmConfig(name="grpo", turn_gama=0.9)
    with pytest.raises(ValueError, match="step_advantage_weight"):
        AlgorithmConfig(name="grpo", advantage_estimator="gigpo", step_advantage_weight=1.5)
    assert AlgorithmConfig(name="grpo", advantage_estimator="gigpo").uses_turns
    assert not AlgorithmConfig(name="grpo").uses_turns


def test_a_turn_cut_to_no_tokens_leaves_its_reward_on_the_turn_before():
    mask = torch.tensor([[1, 1, 0, 0, 1, 0]])  # turns [0, 2), [4, 5), then a third turn with no room: [5, 5)
    layout = TurnLayout.from_rollout([{"turn_spans": [(0, 2), (4, 5), (5, 5)], "turn_rewards": [1.0, 2.0, 4.0]}],
                                     torch.zeros(1, 6, dtype=torch.long), mask)
    rewards = token_rewards_from_scores(torch.tensor([7.0]), mask)
    assert turn_placed_rewards(rewards, mask, layout)[0].tolist() == [0, 1, 0, 0, 6, 0]
    assert per_turn_rewards(rewards, mask, layout).tolist() == [[1, 6, 0]]
    with pytest.raises(ValueError, match="3 turn spans, 2 turn rewards"):
        TurnLayout([[(0, 1), (1, 2), (2, 3)]], [[1.0, 2.0]], [[(), (), ()]])
