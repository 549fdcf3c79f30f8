"""Rollout masks (masked IS, IcePop, geometric-mean masking) and the mismatch metrics, on hand numbers."""

import math

import pytest
import torch
from pydantic import ValidationError

from rlxf.algos import AlgorithmConfig, LossNormaliser, mismatch_metrics, policy_loss, rollout_mask_weights

NAN = float("nan")


def t(rows):
    return torch.tensor(rows, dtype=torch.float32)


def from_ratios(ratios, old=-1.0):
    """(old, rollout) log-probs whose pi_old / pi_rollout are ``ratios``."""
    r = t(ratios)
    old_lp = torch.full_like(r, old)
    return old_lp, old_lp - r.log()


def test_token_mis_reproduces_verl_mask_mode_case():
    # veRL's own case (tests/trainer/ppo/test_rollout_corr.py, mask mode): old -2 everywhere; rollout -1
    # (ratio e^-1 ~ 0.368, below 0.5: rejected) and -2.5 (ratio e^0.5 ~ 1.649: kept); token IS with
    # threshold 2.0 + token_k1 rejection at "0.5_2.0": row 0 masked, row 1 kept with weight e^0.5,
    # rollout_rs_masked_fraction 0.5.
    old = torch.full((2, 5), -2.0)
    rollout = torch.stack([torch.full((5,), -1.0), torch.full((5,), -2.5)])
    mask = torch.ones(2, 5)
    out = rollout_mask_weights(old, rollout, mask, "mis_token", 0.5, 2.0)
    torch.testing.assert_close(out.keep, t([[0.0] * 5, [1.0] * 5]))
    torch.testing.assert_close(out.weights, t([[0.0] * 5, [math.exp(0.5)] * 5]))
    metrics = mismatch_metrics(old, rollout, mask, keep=out.keep)
    assert metrics["rollout_masked_fraction"] == pytest.approx(0.5)
    # veRL's off-policy metrics on the same inputs: kl = mean(rollout - old) = (1 - 0.5) / 2;
    # k3_kl = mean(exp(d) - d - 1) with d = old - rollout in {-1, 0.5}
    assert metrics["rollout_kl_k1"] == pytest.approx(0.25)
    assert metrics["rollout_kl_k3"] == pytest.approx(((math.exp(-1) + 1 - 1) + (math.exp(0.5) - 0.5 - 1)) / 2)


def test_token_mis_drops_tokens_outside_the_band_and_weights_the_rest():
    old, rollout = from_ratios([[3.0, 1.5, 0.4, 1.0]])
    out = rollout_mask_weights(old, rollout, torch.ones(1, 4), "mis_token")  # default band [0.5, 2]
    torch.testing.assert_close(out.keep, t([[0.0, 1.0, 0.0, 1.0]]))
    torch.testing.assert_close(out.weights, t([[0.0, 1.5, 0.0, 1.0]]))


def test_sequence_mis_masks_whole_rows_on_the_ratio_product():
    old, rollout = from_ratios([[1.5, 1.2], [1.5, 1.5], [0.8, 1.0]])
    rollout[2, 1] = NAN  # padding
    mask = t([[1, 1], [1, 1], [1, 0]])
    out = rollout_mask_weights(old, rollout, mask, "mis_sequence", 0.5, 2.0)
    # products: 1.8 (kept), 2.25 (masked), 0.8 (kept, padding ignored)
    torch.testing.assert_close(out.keep, t([[1, 1], [0, 0], [1, 0]]))
    torch.testing.assert_close(out.weights, t([[1.8, 1.8], [0.0, 0.0], [0.8, 0.0]]))
    default = rollout_mask_weights(old, rollout, mask, "mis_sequence")  # veRL Seq-MIS's 0.5_2.0
    torch.testing.assert_close(default.keep, out.keep)


def test_icepop_default_band_is_half_to_five():
    old, rollout = from_ratios([[4.0, 6.0, 0.4, 0.6]])
    out = rollout_mask_weights(old, rollout, torch.ones(1, 4), "icepop")
    torch.testing.assert_close(out.keep, t([[1.0, 0.0, 0.0, 1.0]]))
    torch.testing.assert_close(out.weights, t([[4.0, 0.0, 0.0, 0.6]]))  # M(k) = k inside [0.5, 5]
    wider = rollout_mask_weights(old, rollout, torch.ones(1, 4), "icepop", 0.3, 8.0)
    torch.testing.assert_close(wider.keep, t([[1.0, 1.0, 1.0, 1.0]]))


def test_geometric_mask_uses_the_geometric_mean_and_does_not_weight():
    old, rollout = from_ratios([[2.0, 0.5], [1.2, 1.0], [1.3, 1.0]])
    out = rollout_mask_weights(old, rollout, torch.ones(3, 2), "geometric", 0.9, 1.1)
    # geometric means: 1 (wild tokens, kept), sqrt(1.2) = 1.095 (kept), sqrt(1.3) = 1.140 (masked)
    torch.testing.assert_close(out.keep, t([[1, 1], [1, 1], [0, 0]]))
    assert out.weights is None
    default = rollout_mask_weights(old, rollout, torch.ones(3, 2), "geometric")  # veRL's 0.999_1.001
    torch.testing.assert_close(default.keep, t([[1, 1], [0, 0], [0, 0]]))


def test_none_mode_gives_nothing():
    old, rollout = from_ratios([[3.0]])
    assert rollout_mask_weights(old, rollout, torch.ones(1, 1), "none") is None


def test_masked_token_contributes_zero_gradient():
    # ratio 1 to the old policy: ppo_clip's per-token loss is -A * ratio; IcePop ratios 2, 8, 0.6
    old, rollout = from_ratios([[2.0, 8.0, 0.6]])
    log_probs = old.clone().requires_grad_(True)
    adv = t([[1.0, 1.0, 1.0]])
    mask = torch.ones(1, 3)
    cfg = AlgorithmConfig(name="dapo", rollout_mask="icepop")
    loss, metrics = policy_loss(cfg, log_probs, old, adv, mask, LossNormaliser.from_mask(mask), rollout_log_probs=rollout)
    # token_mean over all 3 loss tokens (the masked one keeps its place in the normaliser)
    assert loss.item() == pytest.approx(-(2.0 + 0.0 + 0.6) / 3)
    loss.backward()
    torch.testing.assert_close(log_probs.grad, t([[-2.0 / 3, 0.0, -0.6 / 3]]))
    assert metrics["rollout_masked_fraction"] == pytest.approx(1 / 3)
    assert metrics["rollout_mask_weight_mean"] == pytest.approx(1.3)  # over kept tokens: (2 + 0.6) / 2
    assert metrics["rollout_log_prob_diff"] == pytest.approx((4 * math.log(2) - math.log(0.6)) / 3)
    assert metrics["rollout_log_prob_diff_max"] == pytest.approx(3 * math.log(2))
    unmasked, _ = policy_loss(AlgorithmConfig(name="dapo"), log_probs, old, adv, mask, LossNormaliser.from_mask(mask),
                              rollout_log_probs=rollout)
    assert unmasked.item() == pytest.approx(-1.0)  # no correction: -(1 + 1 + 1) / 3


def test_geometric_mask_with_tis_multiplies_keep_and_capped_weight():
    old, rollout = from_ratios([[3.0, 1.0], [1.5, 1.5]])
    log_probs = old.clone().requires_grad_(True)
    mask = torch.ones(2, 2)
    cfg = AlgorithmConfig(name="dapo", rollout_mask="geometric", rollout_mask_low=0.5, rollout_mask_high=1.6,
                          tis_level="token", tis_cap=2.0)
    loss, metrics = policy_loss(cfg, log_probs, old, t([[1, 1], [1, 1]]), mask, LossNormaliser.from_mask(mask),
                                rollout_log_probs=rollout)
    # geometric means sqrt(3) = 1.73 (row masked) and 1.5 (kept); TIS weights on row 1: 1.5, 1.5
    assert loss.item() == pytest.approx(-(1.5 + 1.5) / 4)
    assert metrics["rollout_masked_fraction"] == pytest.approx(0.5)
    assert metrics["rollout_truncated_fraction"] == pytest.approx(0.25)  # the ratio-3 token is capped


def test_mismatch_metrics_by_hand():
    old = t([[-1.0, -2.0, -0.5], [-1.0, NAN, NAN]])
    rollout = t([[-1.5, -1.0, -0.5], [-0.8, NAN, NAN]])
    mask = t([[1, 1, 1], [1, 0, 0]])
    keep = t([[1, 0, 1], [1, 0, 0]])
    truncated = torch.tensor([[True, False, False], [False, False, False]])
    m = mismatch_metrics(old, rollout, mask, keep=keep, truncated=truncated)
    d = [0.5, -1.0, 0.0, -0.2]  # old - rollout on the 4 loss tokens
    assert m["rollout_log_prob_diff"] == pytest.approx(sum(abs(x) for x in d) / 4)
    assert m["rollout_log_prob_diff_max"] == pytest.approx(1.0)
    assert m["rollout_kl_k1"] == pytest.approx(-sum(d) / 4)
    assert m["rollout_kl_k3"] == pytest.approx(sum(math.exp(x) - 1 - x for x in d) / 4)
    assert m["rollout_masked_fraction"] == pytest.approx(0.25)
    assert m["rollout_truncated_fraction"] == pytest.approx(0.25)
    plain = mismatch_metrics(old, rollout, mask)
    assert plain["rollout_masked_fraction"] == 0.0 and plain["rollout_truncated_fraction"] == 0.0
    empty = mismatch_metrics(old, rollout, torch.zeros_like(mask))  # no loss token: zeros, not NaN
    assert set(empty.values()) == {0.0}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"rollout_mask": "mis"}, "rollout_mask: unknown rollout mask 'mis'; known: geometric, icepop, mis_sequence, "
                                  "mis_token, none"),
        ({"rollout_mask": "icepop", "tis_level": "token"}, "set tis_level 'none'"),
        ({"rollout_mask": "mis_token", "rollout_mask_low": 2.0}, r"band \[2, 2\] needs low < high"),
        ({"rollout_mask_high": 0.0}, "rollout_mask_high"),
    ],
)
def test_bad_rollout_mask_settings_fail_clearly(overrides, message):
    with pytest.raises(ValidationError, match=message):
        AlgorithmConfig(**overrides)


def test_geometric_combines_with_tis_and_defaults_are_none():
    cfg = AlgorithmConfig(rollout_mask="geometric", tis_level="sequence")
    assert (cfg.rollout_mask, cfg.rollout_mask_low, cfg.rollout_mask_high) == ("geometric", None, None)
    assert AlgorithmConfig().rollout_mask == "none"
