"""The RL loop with every role a Ray actor (local cluster, 2 CPUs): the same numbers as in-process,
colocated and disaggregated, and a rollout actor killed mid-run is restarted and its prompts re-issued."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rlxf.config import load_config
from rlxf.loops import setup
from rlxf.loops.rl import train_rl
from tests.conftest import small_overrides

STEPS = 2
VOLATILE = ("time/",)


def run(tmp_path, model_dir, name: str, *extra: str) -> list[dict]:
    run_dir = tmp_path / name
    config = load_config(None, [*small_overrides(run_dir, model_dir, steps=STEPS), *extra])
    train_rl(config, write=lambda _: None)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in rows]


@pytest.fixture(scope="module")
def embedded_rows(tmp_path_factory, tiny_model_dir):
    return run(tmp_path_factory.mktemp("embedded"), tiny_model_dir, "embedded", "runtime.weight_sync.checksum=true")


def test_disaggregated_roles_survive_a_killed_rollout_actor(ray_cluster, tmp_path, tiny_model_dir, embedded_rows,
                                                            monkeypatch):
    from tests.runtime.crashing_rollout import crashing_rollout_role

    marker = Path(os.environ["RLXF_TEST_CRASH_MARKER"])
    marker.write_text("3")  # generate calls: 1 = the initial eval, 2 = step 1, 3 = step 2 -> dies there
    monkeypatch.setattr(setup, "make_rollout_role", crashing_rollout_role)
    rows = run(tmp_path, tiny_model_dir, "ray", "runtime.kind=ray", "runtime.placement=disaggregated",
               "runtime.weight_sync.checksum=true")
    assert not marker.exists()  # the actor did die inside step 2's generate
    # Restarted, weights replayed, the same prompts re-issued with the same generator state: every
    # trajectory of every step is there once — the run is the in-process run, number for number.
    assert [r["step"] for r in rows] == list(range(STEPS + 1))
    assert rows[-1]["samples"] == embedded_rows[-1]["samples"]
    assert len(rows) == len(embedded_rows)
    for row, expected in zip(rows, embedded_rows):
        assert row == pytest.approx(expected, abs=1e-5, nan_ok=True)
    assert "weight_sync/checksum_ok" in rows[1] and rows[1]["weight_sync/buckets"] >= 1


@pytest.mark.slow
def test_colocated_roles_match_the_embedded_run(ray_cluster, tmp_path, tiny_model_dir, embedded_rows):
    rows = run(tmp_path, tiny_model_dir, "colocated", "runtime.kind=ray", "runtime.placement=colocated",
               "runtime.weight_sync.checksum=true", "algorithm.kl_coef=0.01")
    assert rows[-1]["samples"] == embedded_rows[-1]["samples"]
    assert "policy/kl" in rows[1]  # the reference role ran as an actor too
