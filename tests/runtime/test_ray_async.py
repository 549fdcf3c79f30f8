"""``loop: rl_async`` on Ray: the producer runs inside the rollout actor (its own process), batches come
back within the staleness bound, every prompt is trained once, and evaluation borrows the actor's engine."""

from __future__ import annotations

import json

from rlxf.checked_config import load_config
from rlxf.loops import get_loop
from tests.conftest import small_overrides


def test_async_loop_with_the_producer_in_the_rollout_actor(ray_cluster, tmp_path, sft_model_dir):
    run_dir = tmp_path / "async_ray"
    config = load_config(None, [
        *small_overrides(run_dir, sft_model_dir, steps=3), "loop=rl_async", "runtime.kind=ray",
        "runtime.placement=disaggregated", "async_rl.max_staleness=1", "async_rl.chunk_steps=2",
        "runtime.weight_sync.checksum=true", "eval.every=2",
    ])
    summary = get_loop("rl_async")(config, write=lambda _: None)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r["step"] > 0]
    assert [r["step"] for r in steps] == [1, 2, 3]
    for r in steps:
        assert r["samples"] == 16 * r["step"]  # 4 prompts x 4 samples, each trained once
        assert 0 <= r["async/staleness_max"] <= 1 and r["async/dropped_stale"] == 0
        assert (r["step"] - 1) - r["async/oldest_version"] == r["async/staleness_max"]
        assert r["async/inflight_max"] >= 1
    assert steps[0]["async/staleness_max"] == 0
    assert "eval/accuracy" in steps[1] and "eval/accuracy" in steps[2]  # borrowed the actor's engine
    assert summary["steps"] == 3
    # the data position saved with the last step: 3 batches of 4 prompts drawn, none skipped
    state = json.loads((run_dir / "checkpoints" / "step_000003" / "state.json").read_text())
    assert state["data_position"] == 12


def test_async_loop_survives_a_killed_rollout_actor(ray_cluster, tmp_path, sft_model_dir, crash_marker, monkeypatch):
    """The rollout actor (and the producer inside it) dies on its 2nd weight load; Ray restarts it,
    a new producer starts from the last trained step, and every prompt is trained exactly once."""
    from tests.runtime.conftest import crash_rollout_in_step_2

    crash_rollout_in_step_2(crash_marker, monkeypatch)
    crash_marker.write_text("load_weights:2")  # 1: the step-1 weights, 2: the step-2 weights
    run_dir = tmp_path / "async_crash"
    config = load_config(None, [
        *small_overrides(run_dir, sft_model_dir, steps=4), "loop=rl_async", "runtime.kind=ray",
        "runtime.placement=disaggregated", "async_rl.max_staleness=1", "async_rl.chunk_steps=2",
    ])
    get_loop("rl_async")(config, write=lambda _: None)
    assert not crash_marker.exists()  # the actor did die
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r["step"] > 0]
    assert [r["step"] for r in steps] == [1, 2, 3, 4]
    assert [r["samples"] for r in steps] == [16, 32, 48, 64]
    assert steps[-1]["async/producer_restarts"] == 1
    assert all(r["async/dropped_stale"] == 0 and r["async/staleness_max"] <= 1 for r in steps)
    state = json.loads((run_dir / "checkpoints" / "step_000004" / "state.json").read_text())
    assert state["data_position"] == 16  # 4 batches of 4 prompts: none skipped, none drawn twice
