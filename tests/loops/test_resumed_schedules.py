"""State a resumed run must carry on with, not restart: the learning-rate warm-up (optim.warmup_steps)
and the adaptive KL coefficient (algorithm.kl_target); and checkpoint.keep_last pruning old checkpoints.
One run of 1 step, resumed to 3, against the hand-computed schedules."""

import json

import pytest

from rlxf.checked_config import load_config
from rlxf.loops.rl import train_rl
from tests.conftest import small_overrides

LR, WARMUP = 1e-4, 4


def test_warmup_and_adaptive_kl_continue_after_resume_and_old_checkpoints_go(tmp_path, tiny_model_dir):
    run_dir = tmp_path / "run"
    overrides = [*small_overrides(run_dir, tiny_model_dir, steps=1), "sft.steps=0", f"train.optim.lr={LR}",
                 f"train.optim.warmup_steps={WARMUP}", "algorithm.name=rloo", "algorithm.kl_coef=0.1",
                 "algorithm.kl_target=1000.0", "algorithm.kl_horizon=32", "checkpoint.keep_last=2",
                 "checkpoint.keep_best=false"]  # keep_last alone here (keep_best: tests/loops/test_keep_best.py)
    train_rl(load_config(None, overrides), write=lambda _: None)
    train_rl(load_config(None, [*overrides, "train.steps=3"]), resume=True, write=lambda _: None)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()][1:]
    assert [r["step"] for r in rows] == [1, 2, 3]
    # LambdaLR after k optimizer steps: lr * min(1, (k + 1) / warmup) -- step 2 is not back at 2/4
    assert [r["policy/lr"] for r in rows] == pytest.approx([LR * 2 / 4, LR * 3 / 4, LR * 4 / 4])
    # KL far below its target: the coefficient shrinks by 20% * 16 samples / 32 a step, from where it was
    assert [r["policy/kl_coef"] for r in rows] == pytest.approx([0.1 * 0.9, 0.1 * 0.9**2, 0.1 * 0.9**3])
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step_000002", "step_000003"]
