"""The DAPO / ReMax / TIS / adaptive-KL stages inside the RL loop, one short run each."""

import json

import pytest
import torch

from rlxf.checked_config import load_config
from rlxf.loops.rl import train_rl
from tests.conftest import small_overrides


def run_steps(tmp_path, model_dir, *overrides, steps=1):
    run_dir = tmp_path / "run"
    config = load_config(None, [*small_overrides(run_dir, model_dir, steps=steps), "checkpoint.every=0",
                                "sft.steps=0", *overrides])
    train_rl(config, write=lambda _: None)
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()][1:]


def test_overlong_shaping_and_filter_in_the_loop(tmp_path, tiny_model_dir):
    # buffer = the whole 16-token budget: every response is penalised by length / 16
    rows = run_steps(tmp_path, tiny_model_dir, "rollout.max_new_tokens=16", "algorithm.overlong_buffer_len=16",
                    "algorithm.overlong_penalty=1.0", "algorithm.filter_overlong=true")
    for row in rows:
        assert row["reward/overlong_penalty"] == pytest.approx(-row["response/length_mean"] / 16, abs=1e-6)
        assert row["response/filtered_overlong_fraction"] == row["response/truncated_fraction"]
        assert row["reward/shaped_mean"] == pytest.approx(row["reward/mean"] + row["reward/overlong_penalty"], abs=1e-6)


def test_dapo_dynamic_sampling_in_the_loop(tmp_path, sft_model_dir):
    # from the SFT start some groups agree (no signal) and some do not: each step samples until its
    # 4 prompts have groups with signal or 2 rounds ran, and trains exactly 4 groups of 4
    rows = run_steps(tmp_path, sft_model_dir, "algorithm.name=dapo", "algorithm.overlong_buffer_len=0",
                    "algorithm.max_sampling_rounds=2", steps=2)
    for step, row in enumerate(rows, start=1):
        assert 1 <= row["sampling/rounds"] <= 2 and 0.0 < row["sampling/signal_fraction"] <= 1.0
        assert row["samples"] == 16 * step  # never two rounds' batches trained together
        assert row["policy/grad_norm"] > 0


def test_remax_gets_its_greedy_baseline(tmp_path, sft_model_dir, trained_batches):
    """Each row's advantage is its reward minus the reward of its prompt's greedy answer (one per group)."""
    trained = trained_batches
    rows = run_steps(tmp_path, sft_model_dir, "algorithm.name=remax", steps=2)
    assert len(trained) == 2 and all("time/greedy_baseline" in row for row in rows)
    baselines = torch.cat([b.baseline_rewards for b in trained])
    assert baselines.abs().sum() > 0  # the SFT start's greedy answers have the format: reward > 0
    for batch in trained:
        for group in batch.group_ids.unique():
            assert batch.baseline_rewards[batch.group_ids == group].unique().numel() == 1
        mask = batch.loss_mask.bool()
        expected = (batch.rewards - batch.baseline_rewards)[:, None].expand_as(mask)
        torch.testing.assert_close(batch.advantages[mask], expected[mask].float())


def test_truncated_is_weights_are_logged(tmp_path, tiny_model_dir):
    rows = run_steps(tmp_path, tiny_model_dir, "algorithm.tis_level=token", "algorithm.tis_cap=2.0")
    for row in rows:
        assert 0.0 < row["policy/tis_weight_mean"] <= row["policy/tis_weight_max"] <= 2.0
        assert "policy/rollout_log_prob_diff" in row


def test_adaptive_kl_coefficient_moves(tmp_path, tiny_model_dir):
    rows = run_steps(tmp_path, tiny_model_dir, "algorithm.name=rloo", "algorithm.kl_coef=0.1",
                    "algorithm.kl_target=1000.0", "algorithm.kl_horizon=32", steps=2)
    # KL far below target: the coefficient shrinks by 20% * 16 samples / 32 each step
    assert rows[0]["policy/kl_coef"] == pytest.approx(0.1 * 0.9)
    assert rows[1]["policy/kl_coef"] == pytest.approx(0.1 * 0.9 * 0.9)


def test_bf16_rollouts_for_an_fp32_trainer_are_corrected_by_tis(tmp_path, tiny_model_dir):
    # fp32 engine: rollout log-probs equal the trainer's up to float noise; a bf16 engine's differ,
    # and TIS reweights by that measured mismatch
    fp32 = run_steps(tmp_path / "fp32", tiny_model_dir, "algorithm.tis_level=token")
    bf16 = run_steps(tmp_path / "bf16", tiny_model_dir, "algorithm.tis_level=token",
                     "rollout.engine_options.dtype=bfloat16")
    assert fp32[0]["policy/rollout_log_prob_diff"] < 1e-4
    assert 1e-4 < bf16[0]["policy/rollout_log_prob_diff"] < 0.1
    assert bf16[0]["policy/tis_weight_max"] > 1.0 > fp32[0]["policy/tis_weight_max"] - 1e-3


def test_bf16_rollouts_with_a_tight_token_mask_drop_some_tokens(tmp_path, tiny_model_dir):
    # bf16 rollouts for the fp32 trainer: |delta log p| up to ~1e-2, so a +-0.1% band on the ratio
    # drops some loss tokens and keeps others; the mismatch metrics are logged beside the mask's
    rows = run_steps(tmp_path, tiny_model_dir, "algorithm.rollout_mask=mis_token", "algorithm.rollout_mask_low=0.999",
                     "algorithm.rollout_mask_high=1.001", "rollout.engine_options.dtype=bfloat16")
    row = rows[0]
    assert 0.0 < row["policy/rollout_masked_fraction"] < 1.0
    assert 0.0 < row["policy/rollout_log_prob_diff"] < row["policy/rollout_log_prob_diff_max"] < 1.0
    assert row["policy/rollout_kl_k3"] >= 0.0 and row["policy/rollout_truncated_fraction"] == 0.0
    assert 0.999 <= row["policy/rollout_mask_weight_mean"] <= 1.001
