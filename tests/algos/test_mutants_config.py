"""AlgorithmConfig's bounds at their edges and the preset table's text: cases the mutation check
(tools/mutation_check.py) found unasserted."""

import pytest
from pydantic import ValidationError

from rlxf.algos import AlgorithmConfig, describe_presets

# field: (values on the edge that are accepted, values just past it that are refused)
BOUNDS = {
    "clip_low": ([0.0, 1.0], [-0.01, 1.01]),
    "clip_high": ([0.0], [-0.01]),
    "dual_clip": ([1.01], [1.0]),
    "gamma": ([0.0, 1.0], [-0.01, 1.01]),
    "lam": ([0.0, 1.0], [-0.01, 1.01]),
    "adv_eps": ([1e-12], [0.0]),
    "kl_coef": ([0.0], [-0.01]),
    "kl_horizon": ([1], [0]),
    "kl_cap": ([0.01], [0.0]),
    "value_clip": ([0.01], [0.0]),
    "value_coef": ([0.0], [-0.01]),
    "ppo_epochs": ([1], [0]),
    "tis_cap": ([0.01], [0.0]),
    "max_sampling_rounds": ([1], [0]),
    "overlong_buffer_len": ([0], [-1]),
    "overlong_penalty": ([0.0], [-0.01]),
}


@pytest.mark.parametrize("field", sorted(BOUNDS))
def test_bounds_at_their_edges(field):
    accepted, refused = BOUNDS[field]
    for value in accepted:
        assert getattr(AlgorithmConfig(**{field: value}), field) == value
    for value in refused:
        with pytest.raises(ValidationError, match=field):
            AlgorithmConfig(**{field: value})


def test_kl_target_needs_a_positive_target_and_coefficient():
    assert AlgorithmConfig(kl_coef=0.1, kl_target=0.01).kl_target == 0.01
    with pytest.raises(ValidationError, match="kl_target"):
        AlgorithmConfig(kl_coef=0.1, kl_target=0.0)
    with pytest.raises(ValidationError, match="needs kl_coef > 0"):
        AlgorithmConfig(kl_coef=0.0, kl_target=1.0)


def test_greedy_baseline_only_for_remax():
    assert AlgorithmConfig(name="remax").needs_greedy_baseline
    assert not AlgorithmConfig(name="rloo").needs_greedy_baseline


def test_describe_presets_first_rows_by_hand():
    lines = describe_presets().splitlines()
    assert len(lines) == 12  # header, rule, ten presets
    widths = [21, 21, 11, 23, 15, 19, 6, 60]  # each column as wide as its widest cell
    assert [len(cell) for cell in lines[1].split("  ")] == widths
    assert lines[0].split() == ["preset", "advantage", "policy", "loss", "aggregation", "clip", "(low/high)", "KL",
                                "(when", "kl_coef>0)", "critic", "source"]
    assert lines[2].split()[:8] == ["ppo", "gae", "ppo_clip", "token_mean", "0.2/0.2", "k1", "in", "reward"]
    assert lines[2].split()[8] == "yes" and lines[3].split()[7:9] == ["loss", "no"]
    assert lines[4].startswith("dr_grpo                grpo (no std)  ")
    assert lines[3].startswith("grpo                   grpo           ")
    assert lines[-1].split()[4] == "1/4"
