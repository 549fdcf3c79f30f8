"""On-policy distillation's advantage and its reverse-KL metric against hand-computed numbers."""

import pytest
import torch
from torch.testing import assert_close

from rlxf.algos import AlgorithmConfig, compute_advantages, distillation_reverse_kl, token_rewards_from_scores

# row 0: two loss tokens then padding; row 1: a policy token, an environment token (mask 0), a policy token
MASK = torch.tensor([[1, 1, 0], [1, 0, 1]], dtype=torch.float32)
STUDENT = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -4.0, -1.0]])
TEACHER = torch.tensor([[-0.5, -2.5, -9.0], [-0.3, -1.0, -0.2]])
GROUPS = torch.tensor([0, 0])


def distill(**knobs):
    return AlgorithmConfig(name="grpo", advantage_estimator="on_policy_distillation", **knobs)


def test_advantage_is_the_teacher_log_ratio_on_loss_tokens():
    # teacher - student = [[0.5, -0.5, .], [0, 3.0 (env token: dropped), 0.8]]
    rewards = token_rewards_from_scores(torch.tensor([1.0, 0.0]), MASK)  # ignored at distill_task_coef 0
    adv, ret = compute_advantages(distill(), rewards, MASK, GROUPS, log_probs=STUDENT, teacher_log_probs=TEACHER)
    assert_close(adv, torch.tensor([[0.5, -0.5, 0.0], [0.0, 0.0, 0.8]]))
    assert_close(ret, adv)


def test_task_term_adds_the_group_centred_score_times_its_coefficient():
    # scores 1 and 0 in one group: mean 0.5, centred +0.5 / -0.5, times 0.5 on every loss token
    rewards = token_rewards_from_scores(torch.tensor([1.0, 0.0]), MASK)
    adv, _ = compute_advantages(distill(distill_task_coef=0.5), rewards, MASK, GROUPS, log_probs=STUDENT,
                                teacher_log_probs=TEACHER)
    assert_close(adv, torch.tensor([[0.75, -0.25, 0.0], [-0.25, 0.0, 0.55]]))


def test_reverse_kl_is_the_mean_student_minus_teacher_over_loss_tokens():
    # (-0.5 + 0.5 + 0.0 - 0.8) / 4 loss tokens
    assert float(distillation_reverse_kl(STUDENT, TEACHER, MASK)) == pytest.approx(-0.2)
    assert float(distillation_reverse_kl(TEACHER, TEACHER, MASK)) == 0.0


def test_without_teacher_log_probs_it_says_what_it_needs():
    with pytest.raises(ValueError, match="teacher_log_probs"):
        compute_advantages(distill(), torch.zeros(2, 3), MASK, GROUPS, log_probs=STUDENT)


def test_other_estimators_never_see_the_teacher():
    rewards = token_rewards_from_scores(torch.tensor([1.0, 0.0]), MASK)
    plain, _ = compute_advantages(AlgorithmConfig(name="dr_grpo"), rewards, MASK, GROUPS)
    given, _ = compute_advantages(AlgorithmConfig(name="dr_grpo"), rewards, MASK, GROUPS, log_probs=STUDENT,
                                  teacher_log_probs=TEACHER)
    assert_close(given, plain)
    assert_close(plain, torch.tensor([[0.5, 0.5, 0.0], [-0.5, 0.0, -0.5]]))
