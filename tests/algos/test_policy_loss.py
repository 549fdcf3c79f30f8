"""Policy losses, truncated IS, KL-in-loss and entropy, against hand-computed numbers."""

import math

import pytest
import torch
from torch.testing import assert_close

from rlxf.algos import POLICY_LOSSES, AlgorithmConfig, LossNormaliser, policy_loss

NAN = float("nan")


def t(rows):
    return torch.tensor(rows, dtype=torch.float32)


def _ppo_case():
    # tokens [[a, b, c], [d, e, pad]]; ratios chosen to hit each branch with clip [0.8, 1.28]
    ratios = t([[1.5, 0.5, 0.5], [1.1, 5.0, 1.0]])
    advantages = t([[2, 1, -1], [-1, -1, 0]])
    mask = t([[1, 1, 1], [1, 1, 0]])
    old = t([[-1.0, -2.0, -0.5], [-1.5, -3.0, -1.0]])
    log_probs = old + ratios.log()
    log_probs[1, 2] = NAN  # padding: must reach neither the loss nor the gradient
    return log_probs.requires_grad_(True), old, advantages, mask


def test_ppo_clip_every_branch():
    log_probs, old, adv, mask = _ppo_case()
    cfg = AlgorithmConfig(name="dapo")  # clip_low 0.2, clip_high 0.28, token_mean
    loss, metrics = policy_loss(cfg, log_probs, old, adv, mask, LossNormaliser.from_mask(mask))
    # a: A=+2, r=1.5 -> clipped -2*1.28 | b: A=+1, r=0.5 -> unclipped -0.5 (min of objective)
    # c: A=-1, r=0.5 -> clipped 0.8    | d: A=-1, r=1.1 -> 1.1 | e: A=-1, r=5 -> unclipped 5.0
    assert loss.item() == pytest.approx((-2 * 1.28 - 0.5 + 0.8 + 1.1 + 5.0) / 5)
    assert metrics["clip_fraction"] == pytest.approx(2 / 5)
    assert metrics["ratio_max"] == pytest.approx(5.0)
    assert metrics["ratio_min"] == pytest.approx(0.5)
    loss.backward()
    # d loss / d log_prob = -A * ratio / 5 on unclipped tokens, 0 on clipped ones and padding
    assert_close(log_probs.grad, t([[0, -0.5 / 5, 0], [1.1 / 5, 5.0 / 5, 0]]))


def test_ppo_dual_clip_caps_negative_advantage():
    log_probs, old, adv, mask = _ppo_case()
    cfg = AlgorithmConfig(name="dapo", dual_clip=3.0)
    loss, metrics = policy_loss(cfg, log_probs, old, adv, mask, LossNormaliser.from_mask(mask))
    assert loss.item() == pytest.approx((-2 * 1.28 - 0.5 + 0.8 + 1.1 + 3.0) / 5)  # e capped at -A * 3 = 3
    assert metrics["dual_clip_fraction"] == pytest.approx(1 / 5)
    loss.backward()
    assert_close(log_probs.grad, t([[0, -0.5 / 5, 0], [1.1 / 5, 0, 0]]))


def test_gspo_sequence_ratio_and_gradient():
    mask = t([[1, 1, 0], [1, 1, 1]])
    old = t([[-1.0, -1.0, 0.0], [-2.0, -2.0, -2.0]])
    log_ratio = t([[0.1, 0.3, NAN], [0.0, -0.3, 0.0]])  # row means 0.2 and -0.1
    log_probs = (old + log_ratio).requires_grad_(True)
    adv = t([[1, 1, 0], [1, 1, 1]])
    cfg = AlgorithmConfig(name="gspo", clip_low=0.2, clip_high=0.2)
    loss, metrics = policy_loss(cfg, log_probs, old, adv, mask, LossNormaliser.from_mask(mask))
    s1 = math.exp(-0.1)  # 0.9048, inside [0.8, 1.2]; row 0: exp(0.2) = 1.2214 clipped to 1.2
    assert loss.item() == pytest.approx((-1.2 + -s1) / 2)  # seq_mean_token_mean
    assert metrics["clip_fraction"] == pytest.approx(2 / 5)
    loss.backward()
    # row 1: d/dlogp_t of -A * exp(mean_t log_ratio) / 2 seqs = -s1 / 3 / 2; row 0 clipped: 0
    assert_close(log_probs.grad, t([[0, 0, 0], [-s1 / 6, -s1 / 6, -s1 / 6]]))


def test_cispo_clipped_detached_weight_times_log_prob():
    mask = t([[1, 1, 1]])
    log_probs = t([[-1.0, -2.0, -0.5]]).requires_grad_(True)
    old = log_probs.detach() - t([[math.log(2.0), math.log(0.5), 0.0]])  # ratios 2, 0.5, 1
    adv = t([[1, 1, -2]])
    cfg = AlgorithmConfig(name="cispo", clip_low=1.0, clip_high=0.5)  # weight in [0, 1.5]
    loss, metrics = policy_loss(cfg, log_probs, old, adv, mask, LossNormaliser.from_mask(mask))
    # -w * A * logp: -1.5 * 1 * -1 = 1.5; -0.5 * 1 * -2 = 1.0; -1 * -2 * -0.5 = -1.0
    assert loss.item() == pytest.approx((1.5 + 1.0 - 1.0) / 3)
    assert metrics["clip_fraction"] == pytest.approx(1 / 3)
    loss.backward()
    assert_close(log_probs.grad, t([[-1.5 / 3, -0.5 / 3, 2.0 / 3]]))


@pytest.mark.parametrize(
    ("level", "expected_weights"),
    [
        ("token", [[2.0, 0.5], [1.0, 1.0]]),  # exp(log 3) capped at 2; exp(log 0.5)
        ("sequence", [[1.5, 1.5], [2.0, 2.0]]),  # exp(log 3 + log 0.5) = 1.5; exp(log 2 + log 2) = 4 -> 2
    ],
)
def test_truncated_importance_sampling(level, expected_weights):
    mask = t([[1, 1], [1, 1]])
    old = t([[-1.0, -1.0], [-1.0, -1.0]])
    rollout = old - t([[math.log(3.0), math.log(0.5)], [math.log(2.0), math.log(2.0)]])
    if level == "token":
        rollout[1] = old[1]  # ratio 1 on row 1
    log_probs = old.clone().requires_grad_(True)  # ratio 1: ppo_clip per-token loss = -A
    adv = t([[1, 1], [1, 1]])
    cfg = AlgorithmConfig(name="dapo", tis_level=level, tis_cap=2.0)
    loss, metrics = policy_loss(cfg, log_probs, old, adv, mask, LossNormaliser.from_mask(mask), rollout_log_probs=rollout)
    w = t(expected_weights)
    assert loss.item() == pytest.approx(-w.sum().item() / 4)
    assert metrics["tis_weight_mean"] == pytest.approx(w.mean().item())
    off, _ = policy_loss(AlgorithmConfig(name="dapo"), log_probs, old, adv, mask, LossNormaliser.from_mask(mask), rollout_log_probs=rollout)
    assert off.item() == pytest.approx(-1.0)  # tis_level none ignores the rollout log-probs


def test_kl_in_loss_and_entropy_bonus():
    mask = t([[1, 1, 0]])
    log_probs = t([[-1.0, -2.0, NAN]])
    ref = t([[-1.5, -1.0, NAN]])  # k1 per token: 0.5, -1.0
    adv = torch.zeros(1, 3)  # no policy-gradient term
    entropy = t([[2.0, 4.0, NAN]])
    norm = LossNormaliser.from_mask(mask)
    cfg = AlgorithmConfig(name="dapo", kl_coef=0.1, kl_estimator="k1", entropy_coef=0.01)
    loss, metrics = policy_loss(cfg, log_probs, log_probs, adv, mask, norm, ref_log_probs=ref, entropy=entropy)
    assert loss.item() == pytest.approx(0.1 * (0.5 - 1.0) / 2 - 0.01 * (2.0 + 4.0) / 2)
    assert metrics["kl"] == pytest.approx(-0.25)
    assert metrics["entropy"] == pytest.approx(3.0)
    in_reward = AlgorithmConfig(name="dapo", kl_coef=0.1, kl_in_reward=True)
    loss2, metrics2 = policy_loss(in_reward, log_probs, log_probs, adv, mask, norm, ref_log_probs=ref)
    assert loss2.item() == pytest.approx(0.0) and "kl" not in metrics2
    loss3, _ = policy_loss(cfg, log_probs, log_probs, adv, mask, norm, ref_log_probs=ref, kl_coef=1.0)
    assert loss3.item() == pytest.approx(1.0 * (0.5 - 1.0) / 2)  # adaptive coefficient override


def test_approx_kl_metric_is_k3_old_vs_new():
    mask = t([[1, 1]])
    old = t([[-1.0, -1.0]])
    log_probs = old + t([[math.log(2.0), 0.0]])
    _, metrics = policy_loss(AlgorithmConfig(), log_probs, old, torch.zeros(1, 2), mask, LossNormaliser.from_mask(mask))
    # k3 with q = old: exp(-log 2) + log 2 - 1 = 0.5 + 0.6931 - 1 on token 0, 0 on token 1
    assert metrics["approx_kl"] == pytest.approx((0.5 + math.log(2.0) - 1.0) / 2)


def test_all_policy_losses_tested():
    assert set(POLICY_LOSSES.names()) == {"ppo_clip", "gspo", "cispo"}
