"""``loop: rl_async`` on Ray: the producer runs inside the rollout actor (its own process), batches come
back within the staleness bound, every prompt is trained once, and evaluation borrows the actor's engine."""

from __future__ import annotations

import json

from rlxf.config import load_config
from rlxf.loops import get_loop
from tests.conftest import small_overrides


def test_async_loop_with_the_producer_in_the_rollout_actor(ray_cluster, tmp_path, tiny_model_dir):
    run_dir = tmp_path / "async_ray"
    config = load_config(None, [
        *small_overrides(run_dir, tiny_model_dir, steps=3), "loop=rl_async", "runtime.kind=ray",
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
