"""Checkpoint faults: a write that fails leaves the previous checkpoint intact and loadable; a truncated
or changed checkpoint is caught by its checksums on resume and the run falls back to the one before."""

import copy
import json
import resource
import signal

import pytest
from transformers import AutoModelForCausalLM

from rlxf import disk_space
from rlxf.algos import AlgorithmConfig
from rlxf.checked_config import load_config
from rlxf.cli import main
from rlxf.config import OptimConfig
from rlxf.disk_space import human_bytes, required_bytes
from rlxf.loops.rl import train_rl
from rlxf.loops.run_state import RunState, load_run_state, save_checkpoint
from rlxf.roles.actor import ActorRole
from rlxf.train import checkpoint as ckpt
from tests.conftest import small_overrides


def test_a_failed_write_keeps_the_previous_checkpoint(tmp_path, tiny_model, tokenizer):
    """A real write failure: the file-size limit (RLIMIT_FSIZE) makes every write past 4 KiB fail with EFBIG."""
    actor = ActorRole(copy.deepcopy(tiny_model), OptimConfig(), AlgorithmConfig(), 8, 8, 1.0)
    first = save_checkpoint(tmp_path, RunState(step=1), actor, None, tokenizer, keep_last=2)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of the signal's kill
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
    try:
        with pytest.raises(ckpt.CheckpointWriteError) as error:
            save_checkpoint(tmp_path, RunState(step=2), actor, None, tokenizer, keep_last=2)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous_handler)
    assert f"writing checkpoint step 2 to {tmp_path}/checkpoints/step_000002.tmp failed" in str(error.value)
    assert f"the previous checkpoint {first} is intact" in str(error.value)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_000001"]  # no half-written step 2
    assert ckpt.checkpoint_problem(first) is None and load_run_state(first).step == 1
    assert ckpt.latest_valid_checkpoint(tmp_path) == first
    AutoModelForCausalLM.from_pretrained(first / "policy")


def test_checksums_cover_every_file_and_catch_a_change(tmp_path, tiny_model, tokenizer):
    actor = ActorRole(copy.deepcopy(tiny_model), OptimConfig(), AlgorithmConfig(), 8, 8, 1.0)
    saved = save_checkpoint(tmp_path, RunState(step=1), actor, None, tokenizer, keep_last=2)
    listed = json.loads((saved / ckpt.CHECKSUMS).read_text())
    assert {"state.json", "policy/model.safetensors", "actor.optimizer.safetensors"} <= set(listed)
    (saved / "state.json").write_text((saved / "state.json").read_text().replace('"step": 1', '"step": 7'))
    assert ckpt.checkpoint_problem(saved) == "state.json does not match its checksum (truncated or changed)"
    (saved / "actor.optimizer.json").unlink()
    assert ckpt.checkpoint_problem(saved) == "actor.optimizer.json is missing"
    with pytest.raises(ckpt.CheckpointCorruptError, match="no checkpoint .* is whole"):
        ckpt.latest_valid_checkpoint(tmp_path, write=lambda _: None)


def test_resume_falls_back_past_a_truncated_checkpoint_and_says_so(tmp_path, tiny_model_dir):
    run_dir = tmp_path / "run"
    base = [*small_overrides(run_dir, tiny_model_dir, steps=2), "sft.steps=0", "checkpoint.keep_last=2"]
    train_rl(load_config(None, base), write=lambda _: None)
    weights = run_dir / "checkpoints" / "step_000002" / "policy" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # a copy cut short
    said = []
    summary = train_rl(load_config(None, [*base, "train.steps=3"]), resume=True, write=said.append)
    assert ("checkpoint step_000002 is corrupt: policy/model.safetensors does not match its checksum "
            "(truncated or changed); falling back to the one before it") in said
    assert any("from step_000001 (step 1)" in line for line in said)
    assert summary["steps"] == 3
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3]  # step 2 trained again from step 1, logged once
    assert ckpt.checkpoint_problem(run_dir / "checkpoints" / "step_000003") is None


def test_a_checkpoint_that_will_not_fit_stops_the_run_before_it_writes_and_the_run_resumes(
        tmp_path, tiny_model_dir, monkeypatch, capsys):
    """The free-space query (rlxf/disk_space.py, the one place that asks the file system) says the disk filled up
    after step 1's checkpoint: step 2's is refused before a byte is written; once space is freed, --resume ends
    the run."""
    run_dir = tmp_path / "run"
    real_free = disk_space.free_bytes

    def fills_after_step_1(path):
        return 10**6 if (run_dir / "checkpoints" / "step_000001").exists() else real_free(path)

    monkeypatch.setattr(disk_space, "free_bytes", fills_after_step_1)
    args = ["train", *small_overrides(run_dir, tiny_model_dir, steps=3), "sft.steps=0", "logging.plot=false"]
    assert main(args) == 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    checkpoints = run_dir / "checkpoints"
    previous = checkpoints / "step_000001"
    needs = ckpt.folder_bytes(previous)
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0] == (f"rlxf: not enough free space for checkpoint step 2 in {checkpoints}: it needs "
                        f"{human_bytes(required_bytes(needs))} ({human_bytes(needs)} plus a 5% margin and 268 MB "
                        f"left free), 1.0 MB is free; the previous checkpoint {previous} is intact; free space, then "
                        f"continue with: rlxf train --resume {run_dir}")
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step_000000", "step_000001"]  # nothing of step 2
    assert ckpt.checkpoint_problem(previous) is None
    AutoModelForCausalLM.from_pretrained(previous / "policy")
    monkeypatch.setattr(disk_space, "free_bytes", real_free)  # space freed
    assert main(["train", "--resume", str(run_dir)]) == 0
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 3
    assert ckpt.latest_checkpoint(run_dir).name == "step_000003"


def test_the_estimate_before_the_first_optimizer_step_counts_the_optimizer_state(tiny_model):
    """The step-0 checkpoint holds no optimizer state yet, so the estimate of the next one cannot be its size
    alone: the parameters' bytes and AdamW's two moments of each trainable one."""
    weights = sum(p.numel() * p.element_size() for p in tiny_model.parameters())  # embeddings tied: counted once
    assert ckpt.training_checkpoint_bytes(tiny_model) == 3 * weights
