"""AlgorithmConfig presets and validation."""

import pytest
from pydantic import ValidationError

from rlxf.algos import (
    ADVANTAGE_ESTIMATORS,
    KL_ESTIMATORS,
    LOSS_AGGREGATIONS,
    POLICY_LOSSES,
    PRESETS,
    AlgorithmConfig,
    describe_presets,
)

EXPECTED_PRESETS = {
    "ppo", "grpo", "dr_grpo", "dapo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "remax", "gspo", "cispo",
}


def test_preset_list():
    assert set(PRESETS) == EXPECTED_PRESETS


@pytest.mark.parametrize("name", sorted(EXPECTED_PRESETS))
def test_every_preset_builds_with_registered_components(name):
    cfg = AlgorithmConfig(name=name)
    assert cfg.advantage_estimator in ADVANTAGE_ESTIMATORS
    assert cfg.policy_loss in POLICY_LOSSES
    assert cfg.loss_aggregation in LOSS_AGGREGATIONS
    assert cfg.kl_estimator in KL_ESTIMATORS
    assert cfg.kl_coef == 0.0 and not cfg.uses_reference  # project default: no reference model
    assert AlgorithmConfig(**cfg.model_dump()) == cfg


def test_preset_contents():
    ppo = AlgorithmConfig(name="ppo")
    assert (ppo.advantage_estimator, ppo.use_critic, ppo.policy_loss, ppo.loss_aggregation) == (
        "gae", True, "ppo_clip", "token_mean")
    assert (ppo.lam, ppo.value_clip, ppo.value_coef) == (0.95, 0.2, 0.5)
    grpo = AlgorithmConfig()
    assert (grpo.name, grpo.advantage_estimator, grpo.norm_adv_by_std, grpo.loss_aggregation, grpo.kl_estimator) == (
        "grpo", "grpo", True, "seq_mean_token_mean", "k3")
    dr = AlgorithmConfig(name="dr_grpo")
    assert (dr.norm_adv_by_std, dr.loss_aggregation) == (False, "seq_mean_token_sum_norm")
    dapo = AlgorithmConfig(name="dapo")
    assert (dapo.clip_low, dapo.clip_high, dapo.loss_aggregation, dapo.dynamic_sampling) == (0.2, 0.28, "token_mean", True)
    assert dapo.overlong_buffer_len > 0
    gspo = AlgorithmConfig(name="gspo")
    assert (gspo.policy_loss, gspo.clip_low, gspo.clip_high) == ("gspo", 3e-4, 4e-4)
    assert AlgorithmConfig(name="cispo").policy_loss == "cispo"


def test_override_one_knob_keeps_the_rest():
    cfg = AlgorithmConfig(name="ppo", clip_high=0.28)
    assert cfg.clip_high == 0.28 and cfg.clip_low == 0.2 and cfg.use_critic


def test_none_takes_preset_except_for_off_switches():
    cfg = AlgorithmConfig(name="ppo", clip_low=None, value_clip=None)
    assert cfg.clip_low == 0.2  # None -> the preset's value
    assert cfg.value_clip is None  # None is a setting: unclipped


def test_unknown_preset_lists_known_ones():
    with pytest.raises(ValueError, match=r"unknown algorithm preset 'nope'; known: cispo, dapo, dr_grpo"):
        AlgorithmConfig(name="nope")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"policy_loss": "ppo"}, "policy_loss: unknown policy loss 'ppo'; known: cispo, gspo, ppo_clip"),
        ({"loss_aggregation": "mean"}, "unknown loss aggregation 'mean'"),
        ({"advantage_estimator": "gae"}, "needs a critic"),
        ({"kl_target": 6.0}, "needs kl_coef > 0"),
        ({"tis_level": "row"}, "tis_level"),
        ({"clip_lo": 0.1}, "Extra inputs are not permitted"),
        ({"dual_clip": 0.5}, "dual_clip"),
    ],
)
def test_bad_values_fail_clearly(overrides, message):
    with pytest.raises(ValidationError, match=message):
        AlgorithmConfig(**overrides)


def test_uses_reference():
    assert AlgorithmConfig(kl_coef=0.01).uses_reference


def test_describe_presets_table():
    table = describe_presets()
    for name in EXPECTED_PRESETS:
        assert f"\n{name} " in table
    assert "0.2/0.28" in table and "seq_mean_token_sum_norm" in table
