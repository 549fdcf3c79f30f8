"""rollout.engine_options.batch_invariant through the RL loop: the trainer's old log-probs are the
engine's bit for bit, so the logged mismatch is exactly 0; without the option it is not."""

import json

import pytest

from rlxf.checked_config import load_config
from rlxf.loops.rl import train_rl
from tests.conftest import small_overrides


def _rows(tmp_path, model_dir, *overrides):
    run_dir = tmp_path / "run"
    config = load_config(None, [*small_overrides(run_dir, model_dir, steps=2), "checkpoint.every=0", "sft.steps=0",
                                "algorithm.name=grpo", *overrides])
    train_rl(config, write=lambda _: None)
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()][1:]


def test_two_grpo_steps_log_an_exact_zero_mismatch(tmp_path, sft_model_dir):
    exact = _rows(tmp_path / "exact", sft_model_dir, "rollout.engine_options.batch_invariant=true")
    plain = _rows(tmp_path / "plain", sft_model_dir)
    # the SFT start has reward signal: step 1 moves the weights, step 2 samples with the synced ones
    assert len(exact) == 2
    for row in exact:
        assert row["policy/rollout_log_prob_diff_max"] == 0.0 and row["policy/rollout_log_prob_diff"] == 0.0
        assert row["policy/rollout_kl_k3"] == 0.0 and row["policy/grad_norm"] > 0
    assert all(0.0 < row["policy/rollout_log_prob_diff_max"] < 1e-3 for row in plain)


def test_the_switch_is_the_torch_engines_option(tmp_path, tiny_model_dir):
    base = small_overrides(tmp_path, tiny_model_dir)
    assert load_config(None, [*base, "rollout.engine_options.batch_invariant=true"]).rollout.exact_on_policy
    assert not load_config(None, base).rollout.exact_on_policy
    assert not load_config(None, [*base, "rollout.engine_options.batch_invariant=false"]).rollout.exact_on_policy
    with pytest.raises(ValueError, match="batch_invariant .exact on-policy. is the torch engine's option, not "
                                         "rollout.engine=hf's"):
        load_config(None, [*base, "rollout.engine=hf", "rollout.engine_options.batch_invariant=true"])
