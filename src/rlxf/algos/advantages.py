"""Advantage estimators: per-token rewards [B, R] -> (advantages, returns), both [B, R].

Every estimator is registered in ``ADVANTAGE_ESTIMATORS`` under its config name and has the signature
``(cfg, token_rewards, mask, group_ids, values, baseline_rewards)``. Advantages and returns are 0
outside ``mask``. ``token_rewards`` holds the sequence score on the row's last loss token (see
:func:`token_rewards_from_scores`) plus any per-token KL penalty (``kl_in_reward``).

``on_policy_distillation`` needs no sequence score at all: its advantage is the per-token log-ratio of a
teacher model to the policy on the policy's own tokens (see :func:`on_policy_distillation_advantages`).

Outcome estimators (``grpo``, ``rloo``, ``remax`` baseline) use the row's score = sum of its
token rewards over the mask. ``cfg.norm_adv_by_std`` divides by the std of the estimator's
normalisation set: the group (``grpo``) or the whole batch's loss tokens (``gae``,
``reinforce_pp``, ``reinforce_pp_baseline``). Stds are unbiased; ``cfg.adv_eps`` is added to them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch

from rlxf.algos.groups import group_stats
from rlxf.algos.masked import last_token_index, masked_fill_zero, masked_mean, masked_sum, masked_whiten
from rlxf.algos.turns import TurnLayout
from rlxf.registry import Registry


class AdvantageKnobs(Protocol):
    """The ``AlgorithmConfig`` fields an estimator reads. A protocol, not the class: ``algos/config.py``
    imports this registry to check its names, so this module must not import the config back."""

    advantage_estimator: str
    gamma: float
    lam: float
    norm_adv_by_std: bool
    adv_eps: float
    distill_task_coef: float
    turn_gamma: float
    step_advantage_weight: float


Estimator = Callable[..., tuple[torch.Tensor, torch.Tensor]]
ADVANTAGE_ESTIMATORS: Registry[Estimator] = Registry("advantage estimator")
# Estimators that read a teacher's log-probs of the sampled tokens (and the policy's): compute_advantages
# hands them ``log_probs`` and ``teacher_log_probs``; the loop places a teacher role only for these.
TEACHER_ESTIMATORS = frozenset({"on_policy_distillation"})
# Estimators that credit each turn of a multi-turn trajectory (algos/turn_advantages.py): compute_advantages
# hands them ``turns`` (an algos.turns.TurnLayout; None: every row one turn).
TURN_ESTIMATORS = frozenset({"turn_grpo", "gigpo", "turn_gae"})
# Estimators that need critic values (use_critic).
CRITIC_ESTIMATORS = frozenset({"gae", "turn_gae"})


def token_rewards_from_scores(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, R] zeros with ``scores[i]`` on the last position of row ``i`` where ``mask`` is 1.

    Rows without any loss token get no reward.
    """
    rewards = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    last = last_token_index(mask)
    rows = torch.nonzero(last >= 0).squeeze(1)
    rewards[rows, last[rows]] = scores.to(rewards.dtype)[rows]
    return rewards


def sequence_scores(token_rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B] each row's total reward over its loss tokens."""
    return masked_sum(token_rewards, mask, dim=1)


def discounted_returns(token_rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """[B, R] ``G_t = r_t + gamma * G_next`` where "next" is the next LOSS token of the row.

    Positions outside the mask (environment tokens of a multi-turn transcript, padding) are skipped:
    they neither receive a return nor break the discounting chain.
    """
    returns = torch.zeros_like(token_rewards, dtype=torch.float32)
    running = torch.zeros(token_rewards.shape[0], dtype=torch.float32, device=token_rewards.device)
    keep = mask.bool()
    for t in reversed(range(token_rewards.shape[1])):
        running = torch.where(keep[:, t], token_rewards[:, t] + gamma * running, running)
        returns[:, t] = running
    return masked_fill_zero(returns, mask)


def compute_advantages(
    cfg: AdvantageKnobs,
    token_rewards: torch.Tensor,
    mask: torch.Tensor,
    group_ids: torch.Tensor,
    values: torch.Tensor | None = None,
    baseline_rewards: torch.Tensor | None = None,
    log_probs: torch.Tensor | None = None,
    teacher_log_probs: torch.Tensor | None = None,
    turns: TurnLayout | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns) [B, R] from the estimator named ``cfg.advantage_estimator``.

    ``log_probs`` / ``teacher_log_probs`` [B, R] (the policy's and the teacher's log-probs of the sampled
    tokens) reach only the estimators in ``TEACHER_ESTIMATORS``; ``turns`` (a ``TurnLayout``) only those
    in ``TURN_ESTIMATORS``; the others never see them."""
    estimator = ADVANTAGE_ESTIMATORS.get(cfg.advantage_estimator)
    extra = {}
    if cfg.advantage_estimator in TEACHER_ESTIMATORS:
        extra = {"log_probs": log_probs, "teacher_log_probs": teacher_log_probs}
    if cfg.advantage_estimator in TURN_ESTIMATORS:
        extra = {"turns": turns}
    with torch.no_grad():
        return estimator(cfg, token_rewards.float(), mask, group_ids, values, baseline_rewards, **extra)


def group_relative(cfg: AdvantageKnobs, scores: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """[N] ``(score - group mean) / (group std + eps)`` (no std division without ``norm_adv_by_std``);
    a group of one gets 0. GRPO's per-row advantage, and the turn estimators' per-(row, turn) one."""
    _, mean, std, _ = group_stats(scores, group_ids)
    advantage = scores - mean
    if cfg.norm_adv_by_std:
        advantage = advantage / (std + cfg.adv_eps)
    return advantage


def _broadcast(per_row: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B] -> [B, R]: the row's value on each of its loss tokens, 0 elsewhere."""
    return masked_fill_zero(per_row.float().unsqueeze(1).expand(mask.shape), mask)


@ADVANTAGE_ESTIMATORS.register("gae")
def gae_advantages(cfg, token_rewards, mask, group_ids, values, baseline_rewards):
    """Generalised Advantage Estimation (Schulman et al. 2016), over loss tokens only.

    ``delta_t = r_t + gamma * V_next - V_t``; ``A_t = delta_t + gamma * lam * A_next`` where "next" is
    the row's next loss token (V_next = 0 after the last). Returns = A + V (before whitening);
    advantages are then whitened over the batch's loss tokens (std division iff ``norm_adv_by_std``).
    """
    if values is None:
        raise ValueError(f"advantage estimator {cfg.advantage_estimator!r} needs critic values "
                         "(set use_critic and pass values)")
    values = values.float()
    keep = mask.bool()
    advantages = torch.zeros_like(token_rewards)
    next_value = torch.zeros(token_rewards.shape[0], device=token_rewards.device)
    next_advantage = torch.zeros_like(next_value)
    for t in reversed(range(token_rewards.shape[1])):
        delta = token_rewards[:, t] + cfg.gamma * next_value - values[:, t]
        advantage = delta + cfg.gamma * cfg.lam * next_advantage
        next_advantage = torch.where(keep[:, t], advantage, next_advantage)
        next_value = torch.where(keep[:, t], values[:, t], next_value)
        advantages[:, t] = next_advantage
    returns = masked_fill_zero(advantages + values, mask)
    return masked_whiten(advantages, mask, cfg.adv_eps, cfg.norm_adv_by_std), returns


# Estimators whose only baseline is the other samples of the same prompt: with one sample per prompt
# (rollout.n_samples=1) every advantage they give is 0, and a run trains nothing (config.py refuses it).
GROUP_BASELINE_ONLY = frozenset({"grpo", "rloo", "reinforce_pp_baseline", "turn_grpo", "gigpo"})


@ADVANTAGE_ESTIMATORS.register("grpo")
def group_relative_advantages(cfg, token_rewards, mask, group_ids, values, baseline_rewards):
    """GRPO (Shao et al. 2024): ``(score - group mean) / (group std + eps)`` on every loss token.

    Without std (``norm_adv_by_std=False``) this is Dr. GRPO (Liu et al. 2025). A group of one row
    has no baseline: its advantage is 0. Returns equal the advantages.
    """
    advantages = _broadcast(group_relative(cfg, sequence_scores(token_rewards, mask), group_ids), mask)
    return advantages, advantages


@ADVANTAGE_ESTIMATORS.register("rloo")
def leave_one_out_advantages(cfg, token_rewards, mask, group_ids, values, baseline_rewards):
    """RLOO (Ahmadian et al. 2024): ``score_i - mean of the OTHER rows of the group``.

    Equals ``n / (n - 1) * (score_i - group mean)``. A group of one row gets 0. No std division.
    """
    scores = sequence_scores(token_rewards, mask)
    group_sum, _, _, size = group_stats(scores, group_ids)
    others = (size - 1).clamp(min=1)
    advantage = torch.where(size > 1, scores - (group_sum - scores) / others, torch.zeros_like(scores))
    advantages = _broadcast(advantage, mask)
    return advantages, advantages


@ADVANTAGE_ESTIMATORS.register("reinforce_pp")
def reinforce_pp_advantages(cfg, token_rewards, mask, group_ids, values, baseline_rewards):
    """REINFORCE++ (Hu 2025): discounted returns, whitened over the whole batch's loss tokens.

    No group baseline. Returns are the un-whitened discounted returns.
    """
    returns = discounted_returns(token_rewards, mask, cfg.gamma)
    return masked_whiten(returns, mask, cfg.adv_eps, cfg.norm_adv_by_std), returns


@ADVANTAGE_ESTIMATORS.register("reinforce_pp_baseline")
def reinforce_pp_baseline_advantages(cfg, token_rewards, mask, group_ids, values, baseline_rewards):
    """REINFORCE++-baseline: subtract each group's mean score on the row's last loss token, then
    proceed as ``reinforce_pp`` (discounted returns, batch whitening)."""
    scores = sequence_scores(token_rewards, mask)
    _, mean, _, _ = group_stats(scores, group_ids)
    centred = token_rewards - token_rewards_from_scores(mean, mask)
    return reinforce_pp_advantages(cfg, centred, mask, group_ids, values, baseline_rewards)


@ADVANTAGE_ESTIMATORS.register("remax")
def remax_advantages(cfg, token_rewards, mask, group_ids, values, baseline_rewards):
    """ReMax (Li et al. 2024): discounted return minus the score of the greedy response to the prompt.

    ``baseline_rewards`` [B] holds, per row, the reward of the greedy (argmax) response to its prompt.
    """
    if baseline_rewards is None:
        raise ValueError("advantage estimator 'remax' needs baseline_rewards (the greedy response's reward)")
    returns = discounted_returns(token_rewards, mask, cfg.gamma)
    return returns - _broadcast(baseline_rewards, mask), returns


@ADVANTAGE_ESTIMATORS.register("on_policy_distillation")
def on_policy_distillation_advantages(cfg, token_rewards, mask, group_ids, values, baseline_rewards,
                                      log_probs=None, teacher_log_probs=None):
    """On-policy distillation (Agarwal et al. 2024, GKD; Thinking Machines 2025): the policy samples, a
    teacher scores each sampled token, and ``A_t = log p_teacher(y_t) - log p_policy(y_t)`` on every loss
    token: minus the per-token estimate of the reverse KL(policy || teacher), dense and without a verifier.

    No discounting and no whitening: each token's advantage is its own log-ratio (the per-token form
    the published recipes use). With ``cfg.distill_task_coef = c > 0`` the task's group-relative score is
    added on every loss token, ``c * (score - group mean)`` (Dr. GRPO's advantage, no std division), so a
    verifier can steer beside the teacher. Returns equal the advantages.
    """
    if log_probs is None or teacher_log_probs is None:
        raise ValueError("advantage estimator 'on_policy_distillation' needs log_probs and teacher_log_probs "
                         "(the policy's and the teacher's log-probs of the sampled tokens)")
    advantages = masked_fill_zero(teacher_log_probs.float() - log_probs.float(), mask)
    if cfg.distill_task_coef:
        scores = sequence_scores(token_rewards, mask)
        _, mean, _, _ = group_stats(scores, group_ids)
        advantages = advantages + cfg.distill_task_coef * _broadcast(scores - mean, mask)
    return advantages, advantages


def distillation_reverse_kl(log_probs: torch.Tensor, teacher_log_probs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The batch's reverse KL(policy || teacher) estimate: the mean over loss tokens of
    ``log p_policy - log p_teacher`` on the policy's own samples (unbiased for the per-token KL; 0 when
    the two agree). The ``distill/reverse_kl`` metric."""
    return masked_mean(log_probs.float() - teacher_log_probs.float(), mask)
