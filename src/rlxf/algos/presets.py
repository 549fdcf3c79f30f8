"""Named algorithm presets: complete settings for every ``AlgorithmConfig`` field.

On this project every preset starts with ``kl_coef = 0.0``: the default recipe trains without a
reference model (no reference forward pass, no memory for it). Each preset still names the KL
estimator and placement its paper uses, so setting ``kl_coef > 0`` switches the paper's KL on.
"""

from __future__ import annotations

from typing import Any

_BASE: dict[str, Any] = {
    "advantage_estimator": "grpo",
    "policy_loss": "ppo_clip",
    "loss_aggregation": "token_mean",
    "kl_estimator": "k3",
    "clip_low": 0.2,
    "clip_high": 0.2,
    "dual_clip": None,
    "gamma": 1.0,
    "lam": 0.95,
    "norm_adv_by_std": True,
    "adv_eps": 1e-6,
    "kl_coef": 0.0,
    "kl_in_reward": False,
    "kl_target": None,
    "kl_horizon": 10000,
    "entropy_coef": 0.0,
    "use_critic": False,
    "value_clip": 0.2,
    "value_coef": 0.5,
    "ppo_epochs": 1,
    "tis_level": "none",
    "tis_cap": 2.0,
    "rollout_mask": "none",
    "rollout_mask_low": None,
    "rollout_mask_high": None,
    "dynamic_sampling": False,
    "max_sampling_rounds": 1,
    "overlong_buffer_len": 0,
    "overlong_penalty": 1.0,
    "filter_overlong": False,
}

_OVERRIDES: dict[str, dict[str, Any]] = {
    "ppo": {
        "advantage_estimator": "gae",
        "use_critic": True,
        "kl_estimator": "k1",
        "kl_in_reward": True,
        "ppo_epochs": 2,
    },
    "grpo": {"loss_aggregation": "seq_mean_token_mean"},
    "dr_grpo": {"norm_adv_by_std": False, "loss_aggregation": "seq_mean_token_sum_norm"},
    "dapo": {
        "clip_high": 0.28,
        "dynamic_sampling": True,
        "max_sampling_rounds": 3,
        "overlong_buffer_len": 4096,
        "overlong_penalty": 1.0,
    },
    "rloo": {"advantage_estimator": "rloo", "kl_estimator": "k1", "kl_in_reward": True},
    "reinforce_pp": {"advantage_estimator": "reinforce_pp", "kl_estimator": "k2", "kl_in_reward": True},
    "reinforce_pp_baseline": {"advantage_estimator": "reinforce_pp_baseline", "kl_estimator": "k2"},
    "remax": {"advantage_estimator": "remax", "kl_estimator": "k1", "kl_in_reward": True},
    "gspo": {
        "policy_loss": "gspo",
        "loss_aggregation": "seq_mean_token_mean",
        "clip_low": 3e-4,
        "clip_high": 4e-4,
    },
    "cispo": {"policy_loss": "cispo", "clip_low": 1.0, "clip_high": 4.0},
}

PRESETS: dict[str, dict[str, Any]] = {name: {**_BASE, **changes} for name, changes in _OVERRIDES.items()}

PRESET_SOURCES: dict[str, str] = {
    "ppo": "Schulman et al. 2017 (PPO); Ouyang et al. 2022 (InstructGPT)",
    "grpo": "Shao et al. 2024 (DeepSeekMath)",
    "dr_grpo": "Liu et al. 2025 (Understanding R1-Zero-like training)",
    "dapo": "Yu et al. 2025 (DAPO)",
    "rloo": "Ahmadian et al. 2024 (Back to Basics)",
    "reinforce_pp": "Hu 2025 (REINFORCE++)",
    "reinforce_pp_baseline": "Hu 2025 (REINFORCE++), group-mean baseline variant",
    "remax": "Li et al. 2024 (ReMax)",
    "gspo": "Zheng et al. 2025 (GSPO)",
    "cispo": "MiniMax 2025 (MiniMax-M1)",
}
