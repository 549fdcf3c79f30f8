"""Every preset's every setting, pinned: a change to a preset must be deliberate (and edit this list).
The mutation check (tools/mutation_check.py) found most preset numbers unasserted."""

from rlxf.algos import PRESETS, AlgorithmConfig

BASE = {
    "advantage_estimator": "grpo", "policy_loss": "ppo_clip", "loss_aggregation": "token_mean", "kl_estimator": "k3",
    "clip_low": 0.2, "clip_high": 0.2, "dual_clip": None, "gamma": 1.0, "lam": 0.95, "norm_adv_by_std": True,
    "adv_eps": 1e-6, "kl_coef": 0.0, "kl_in_reward": False, "kl_target": None, "kl_horizon": 10000,
    "entropy_coef": 0.0, "use_critic": False, "value_clip": 0.2, "value_coef": 0.5, "ppo_epochs": 1,
    "tis_level": "none", "tis_cap": 2.0, "rollout_mask": "none", "rollout_mask_low": None,
    "rollout_mask_high": None, "dynamic_sampling": False, "max_sampling_rounds": 1,
    "overlong_buffer_len": 0, "overlong_penalty": 1.0, "filter_overlong": False,
}
CHANGES = {  # what each paper changes from the base
    "ppo": {"advantage_estimator": "gae", "use_critic": True, "kl_estimator": "k1", "kl_in_reward": True,
            "ppo_epochs": 2},
    "grpo": {"loss_aggregation": "seq_mean_token_mean"},
    "dr_grpo": {"norm_adv_by_std": False, "loss_aggregation": "seq_mean_token_sum_norm"},
    "dapo": {"clip_high": 0.28, "dynamic_sampling": True, "max_sampling_rounds": 3, "overlong_buffer_len": 4096},
    "rloo": {"advantage_estimator": "rloo", "kl_estimator": "k1", "kl_in_reward": True},
    "reinforce_pp": {"advantage_estimator": "reinforce_pp", "kl_estimator": "k2", "kl_in_reward": True},
    "reinforce_pp_baseline": {"advantage_estimator": "reinforce_pp_baseline", "kl_estimator": "k2"},
    "remax": {"advantage_estimator": "remax", "kl_estimator": "k1", "kl_in_reward": True},
    "gspo": {"policy_loss": "gspo", "loss_aggregation": "seq_mean_token_mean", "clip_low": 3e-4, "clip_high": 4e-4},
    "cispo": {"policy_loss": "cispo", "clip_low": 1.0, "clip_high": 4.0},
}


def test_every_preset_is_the_base_with_its_papers_changes():
    assert set(PRESETS) == set(CHANGES)
    for name, changes in CHANGES.items():
        assert PRESETS[name] == {**BASE, **changes}, name
        config = AlgorithmConfig(name=name).model_dump()
        assert {key: config[key] for key in BASE} == {**BASE, **changes}, name
