"""The algorithm library: pure tensor functions behind registries, picked by name from config.

Per-token tensors are [B, R], aligned with the response tokens (see :mod:`rlxf.batch`); ``mask`` is
the loss mask. See ``docs/algorithms.md`` for the table of algorithms and the aggregation semantics.
"""

from rlxf.algos import turn_advantages  # noqa: F401  (registers turn_grpo, gigpo, turn_gae)
from rlxf.algos.advantages import (
    ADVANTAGE_ESTIMATORS,
    TEACHER_ESTIMATORS,
    TURN_ESTIMATORS,
    compute_advantages,
    discounted_returns,
    distillation_reverse_kl,
    token_rewards_from_scores,
)
from rlxf.algos.aggregation import LOSS_AGGREGATIONS, LossNormaliser, aggregate_loss
from rlxf.algos.config import AlgorithmConfig, describe_presets
from rlxf.algos.critic_loss import value_loss
from rlxf.algos.dapo import drop_truncated, overlong_shaping_penalty
from rlxf.algos.groups import group_stats, groups_with_signal
from rlxf.algos.importance_sampling import truncated_by_tis, truncated_is_weights
from rlxf.algos.kl import (
    KL_ESTIMATORS,
    AdaptiveKLController,
    FixedKLController,
    apply_kl_to_rewards,
    kl_controller_from_config,
    kl_per_token,
)
from rlxf.algos.mismatch_metrics import mismatch_metrics
from rlxf.algos.policy_losses import POLICY_LOSSES
from rlxf.algos.policy_objective import policy_loss
from rlxf.algos.preference_losses import (
    PREFERENCE_LOSSES,
    PreferenceLossConfig,
    bradley_terry_loss,
    preference_loss,
)
from rlxf.algos.presets import PRESETS
from rlxf.algos.rollout_masks import ROLLOUT_MASKS, rollout_mask_weights
from rlxf.algos.sft import masked_token_nll
from rlxf.algos.turns import TurnLayout

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "KL_ESTIMATORS",
    "LOSS_AGGREGATIONS",
    "POLICY_LOSSES",
    "PREFERENCE_LOSSES",
    "PRESETS",
    "ROLLOUT_MASKS",
    "TEACHER_ESTIMATORS",
    "TURN_ESTIMATORS",
    "AdaptiveKLController",
    "AlgorithmConfig",
    "FixedKLController",
    "LossNormaliser",
    "PreferenceLossConfig",
    "TurnLayout",
    "aggregate_loss",
    "apply_kl_to_rewards",
    "bradley_terry_loss",
    "compute_advantages",
    "describe_presets",
    "discounted_returns",
    "distillation_reverse_kl",
    "drop_truncated",
    "group_stats",
    "groups_with_signal",
    "kl_controller_from_config",
    "kl_per_token",
    "masked_token_nll",
    "mismatch_metrics",
    "overlong_shaping_penalty",
    "policy_loss",
    "preference_loss",
    "rollout_mask_weights",
    "token_rewards_from_scores",
    "truncated_by_tis",
    "truncated_is_weights",
    "value_loss",
]
