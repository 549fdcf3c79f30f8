"""runtime.kind=process: the rollout role in a child process of this machine (no Ray) gives the
embedded run's numbers; the async loop runs its producer there; a killed child is restarted (sync and
async loops) or, past ``runtime.max_restarts``, named."""

from __future__ import annotations

import json

import pytest

from rlxf.checked_config import load_config
from rlxf.loops import get_loop
from rlxf.runtime.process_runtime import RoleProcessDied
from tests.conftest import small_overrides
from tests.runtime.conftest import COMPARED, assert_same_run, crash_rollout_in_step_2, run_recipe

PROCESS = ("runtime.kind=process", "runtime.process_roles=[rollout]")


def test_rollout_in_a_child_process_matches_the_embedded_run(tmp_path, sft_model_dir, embedded_rows):
    rows = run_recipe(tmp_path, sft_model_dir, "process", *PROCESS, *COMPARED)
    assert_same_run(rows, embedded_rows)  # generators and batch fields cross the pipe both ways


def test_async_loop_with_the_producer_in_the_rollout_process(tmp_path, sft_model_dir):
    run_dir = tmp_path / "async_process"
    config = load_config(None, [
        *small_overrides(run_dir, sft_model_dir, steps=3), "loop=rl_async", *PROCESS,
        "async_rl.max_staleness=1", "async_rl.chunk_steps=2", "runtime.weight_sync.checksum=true", "eval.every=2",
    ])
    get_loop("rl_async")(config, write=lambda _: None)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r["step"] > 0]
    assert [r["samples"] for r in steps] == [16, 32, 48]
    assert all(0 <= r["async/staleness_max"] <= 1 and r["async/dropped_stale"] == 0 for r in steps)
    assert "eval/accuracy" in steps[1]  # evaluation borrowed the child's engine


def test_a_killed_rollout_process_is_restarted_and_the_run_is_the_embedded_run(
    tmp_path, sft_model_dir, embedded_rows, crash_marker, monkeypatch,
):
    crash_rollout_in_step_2(crash_marker, monkeypatch)  # SIGKILL inside step 2's generate
    rows = run_recipe(tmp_path, sft_model_dir, "process_restart", *PROCESS, *COMPARED)
    assert not crash_marker.exists()  # the child did die
    # a fresh child, step 1's weights replayed into it, step 2's generate re-issued with the same
    # generator state: every trajectory once, every number the in-process run's
    assert_same_run(rows, embedded_rows)


def test_a_rollout_process_that_dies_past_its_restarts_is_named(tmp_path, sft_model_dir, crash_marker, monkeypatch):
    crash_rollout_in_step_2(crash_marker, monkeypatch)
    with pytest.raises(RoleProcessDied, match="role rollout: its process .* died during generate"):
        run_recipe(tmp_path, sft_model_dir, "process_crash", *PROCESS, "runtime.max_restarts=0")
    assert not crash_marker.exists()


def test_async_loop_survives_a_killed_rollout_process(tmp_path, sft_model_dir, crash_marker, monkeypatch):
    """The child (and the producer in it) dies on its 2nd weight load; a fresh child starts, a new
    producer resumes from the last trained step, and every prompt is trained exactly once."""
    crash_rollout_in_step_2(crash_marker, monkeypatch)
    crash_marker.write_text("load_weights:2")
    run_dir = tmp_path / "async_process_crash"
    config = load_config(None, [
        *small_overrides(run_dir, sft_model_dir, steps=4), "loop=rl_async", *PROCESS,
        "async_rl.max_staleness=1", "async_rl.chunk_steps=2",
    ])
    get_loop("rl_async")(config, write=lambda _: None)
    assert not crash_marker.exists()
    steps = [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if r["step"] > 0]
    assert [r["samples"] for r in steps] == [16, 32, 48, 64]
    assert steps[-1]["async/producer_restarts"] == 1
    assert all(r["async/dropped_stale"] == 0 and r["async/staleness_max"] <= 1 for r in steps)
    state = json.loads((run_dir / "checkpoints" / "step_000004" / "state.json").read_text())
    assert state["data_position"] == 16  # 4 batches of 4 prompts: none skipped, none drawn twice


def test_unknown_process_roles_are_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown roles"):
        load_config(None, ["runtime.kind=process", "runtime.process_roles=[rollout, trainer]"])
