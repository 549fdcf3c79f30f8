"""``checkpoint.keep_best``: the checkpoint of the best held-out evaluation is written at its step (even
when no checkpoint is due) and survives ``keep_last`` rotation; summary.json names it beside the final one."""

from __future__ import annotations

import json
import sys

import pytest

from rlxf.checked_config import load_config
from rlxf.loops.offline import run_offline
from rlxf.loops.rl import train_rl
from rlxf.loops.rl_session import RLSession
from rlxf.loops.sft_loop import sft_objective
from rlxf.train.checkpoint import (
    CheckpointCorruptError,
    checkpoint_dir,
    commit_checkpoint,
    finished_checkpoints,
)
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


def _training_files(checkpoint):
    return sorted(p.name for p in checkpoint.iterdir() if ".optimizer." in p.name or p.name == "critic.safetensors")


@pytest.mark.parametrize("keep_last,every", [(1, 2), (2, 1)])
def test_a_finished_runs_best_checkpoint_holds_the_policy_weights_only(tmp_path, tiny_model_dir, monkeypatch,
                                                                       keep_last, every):
    """Past rotation (keep_last 1: step 1 is the best, kept past the window) or within it (keep_last 2 with a
    checkpoint every step: the best is step 4, next to the last): once the run is done, the best checkpoint
    holds no optimizer state, loads in plain transformers and passes its checksums; the last stays resumable."""
    from transformers import AutoModelForCausalLM

    from rlxf.train.checkpoint import checkpoint_problem, is_resumable

    run_dir = tmp_path / "rl"
    scripted = [0.2, 0.9, 0.3, 0.5, 0.9, 0.4] if keep_last == 1 else [0.2, 0.3, 0.3, 0.5, 0.9, 0.4]
    monkeypatch.setattr(sys.modules[__name__], "SCRIPTED", scripted)
    overrides = small_overrides(run_dir, tiny_model_dir, steps=5) + [
        "sft.steps=0", "eval.every=1", f"checkpoint.every={every}", f"checkpoint.keep_last={keep_last}"]
    summary = _run_rl(load_config(None, overrides), monkeypatch)
    best, last = checkpoint_dir(run_dir, summary["best_eval_step"]), checkpoint_dir(run_dir, 5)
    assert summary["best_eval_step"] == (1 if keep_last == 1 else 4)
    assert _training_files(best) == [] and not is_resumable(best)
    assert checkpoint_problem(best) is None  # its checksums were rewritten without the dropped files
    AutoModelForCausalLM.from_pretrained(best / "policy")
    assert _training_files(last) == ["actor.optimizer.json", "actor.optimizer.safetensors"] and is_resumable(last)


def test_keep_optimizer_none_leaves_weights_only_and_resume_says_so(tmp_path, tiny_model_dir, monkeypatch):
    from rlxf.loops.rl import train_rl

    run_dir = tmp_path / "rl"
    overrides = small_overrides(run_dir, tiny_model_dir, steps=2) + ["sft.steps=0", "checkpoint.keep_optimizer=none"]
    train_rl(load_config(None, overrides), write=lambda _: None)
    assert all(_training_files(c) == [] for c in finished_checkpoints(run_dir))
    said = []
    with pytest.raises(CheckpointCorruptError, match="is whole and resumable"):
        train_rl(load_config(None, [*overrides, "train.steps=3"]), resume=True, write=said.append)
    assert said[0] == ("checkpoint step_000002 holds the policy weights only (no optimizer state): training cannot "
                       "continue from it; falling back to the one before it")
