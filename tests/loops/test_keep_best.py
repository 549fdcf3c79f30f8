"""``checkpoint.keep_best``: the checkpoint of the best held-out evaluation is written at its step (even
when no checkpoint is due) and survives ``keep_last`` rotation; summary.json names it beside the final one."""

from __future__ import annotations

import json

import pytest

from rlxf.checked_config import load_config
from rlxf.loops.offline import run_offline
from rlxf.loops.rl import train_rl
from rlxf.loops.rl_session import RLSession
from rlxf.loops.sft_loop import sft_objective
from rlxf.train.checkpoint import checkpoint_dir, commit_checkpoint, finished_checkpoints
from tests.conftest import small_overrides

# Held-out accuracy at steps 0..5: the best (0.9) at step 1, where no checkpoint is due (every 2 steps).
SCRIPTED = [0.2, 0.9, 0.3, 0.5, 0.9, 0.4]


def test_rotation_spares_the_kept_step(tmp_path):
    for step in range(5):
        tmp = checkpoint_dir(tmp_path, step).with_suffix(".tmp")
        tmp.mkdir(parents=True)
        commit_checkpoint(tmp, keep_last=2, keep_steps=(1,))
    assert [p.name for p in finished_checkpoints(tmp_path)] == ["step_000001", "step_000003", "step_000004"]


def _run_rl(config, monkeypatch):
    values = iter(SCRIPTED)
    monkeypatch.setattr(RLSession, "evaluate", lambda self, rollout=None, step=None: {"eval/accuracy": next(values)})
    return train_rl(config, write=lambda _: None)


def _run_sft(config, monkeypatch):
    def scripted(*args):
        objective = sft_objective(*args)
        values = iter(SCRIPTED)
        objective.evaluate = lambda: {"eval/accuracy": next(values)}
        return objective

    return run_offline(config, scripted, False, lambda _: None)


@pytest.mark.parametrize("loop,run", [("rl", _run_rl), ("sft", _run_sft)])
def test_best_checkpoint_outlives_rotation(tmp_path, tiny_model_dir, monkeypatch, loop, run):
    run_dir = tmp_path / loop
    overrides = small_overrides(run_dir, tiny_model_dir, steps=5) + [
        f"loop={loop}", "sft.steps=5" if loop == "sft" else "sft.steps=0", "eval.every=1", "checkpoint.every=2",
        "checkpoint.keep_last=1"]
    summary = run(load_config(None, overrides), monkeypatch)
    assert (summary["best_eval_step"], summary["best_eval_accuracy"]) == (1, 0.9)  # the earliest of the ties
    # step 1 was written only because it was the best; steps 0, 2 and 4 went to rotation (keep_last=1)
    assert [p.name for p in finished_checkpoints(run_dir)] == ["step_000001", "step_000005"]
    best = checkpoint_dir(run_dir, 1)
    assert summary["best_checkpoint"] == str(best) and summary["final_checkpoint"] == str(checkpoint_dir(run_dir, 5))
    assert json.loads((best / "state.json").read_text())["step"] == 1
    assert (best / "policy" / "model.safetensors").stat().st_size > 0 and (best / "policy" / "config.json").exists()
    assert json.loads((run_dir / "summary.json").read_text())["best_checkpoint"] == str(best)


def test_without_keep_best_rotation_takes_it(tmp_path, tiny_model_dir, monkeypatch):
    run_dir = tmp_path / "rl"
    overrides = small_overrides(run_dir, tiny_model_dir, steps=5) + [
        "sft.steps=0", "eval.every=1", "checkpoint.every=2", "checkpoint.keep_last=1", "checkpoint.keep_best=false"]
    summary = _run_rl(load_config(None, overrides), monkeypatch)
    assert summary["best_eval_step"] == 1 and summary["best_checkpoint"] is None
    assert [p.name for p in finished_checkpoints(run_dir)] == ["step_000005"]
