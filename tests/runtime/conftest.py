"""Shared by this folder's tests: Ray clusters (one per module, always shut down), the shrunk default
recipe run embedded as the reference, and the helpers that compare a Ray run with it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rlxf.checked_config import load_config
from rlxf.loops import setup
from rlxf.loops.rl import train_rl
from tests.conftest import assert_trains, small_overrides

pytest.register_assert_rewrite("tests.runtime.dp_loop")  # its assert helpers report the differing values

STEPS = 2
VOLATILE = ("time/",)
COMPARED = ("runtime.weight_sync.checksum=true",)  # every run compared with the embedded one uses these


def run_recipe(tmp_path, model_dir, name: str, *extra: str) -> list[dict]:
    """The default recipe shrunk to ``STEPS`` steps; its metric rows without the timings."""
    run_dir = tmp_path / name
    config = load_config(None, [*small_overrides(run_dir, model_dir, steps=STEPS), *extra])
    train_rl(config, write=lambda _: None)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in rows]


def assert_same_run(rows: list[dict], expected: list[dict]) -> None:
    """Every step there once, every trajectory counted once, every metric equal to ``expected``'s (a run
    that trains: equal zeros would prove nothing)."""
    assert_trains(expected)
    assert [r["step"] for r in rows] == list(range(STEPS + 1))
    assert rows[-1]["samples"] == expected[-1]["samples"]
    assert len(rows) == len(expected)
    for row, want in zip(rows, expected):
        assert row == pytest.approx(want, abs=1e-5, nan_ok=True)
    assert "weight_sync/checksum_ok" in rows[1] and rows[1]["weight_sync/buckets"] >= 1


@pytest.fixture(scope="session")
def embedded_rows(tmp_path_factory, sft_model_dir):
    """The reference run, from the SFT start (tests/conftest.py): its steps have rewards and gradients."""
    return run_recipe(tmp_path_factory.mktemp("embedded"), sft_model_dir, "embedded", *COMPARED)


@pytest.fixture(scope="session")
def dp_reference(tmp_path_factory, tiny_model_dir):
    """The data-parallel tests' single-process runs (tests/runtime/dp_loop.py): {steps: (run dir, metric
    rows)} for 3 steps (the reference) and 2 steps (checkpoints to resume from)."""
    from tests.runtime.dp_loop import SINGLE, run

    root = tmp_path_factory.mktemp("single")
    return {steps: (root / f"s{steps}", run(root / f"s{steps}", tiny_model_dir, steps, *SINGLE)) for steps in (2, 3)}


@pytest.fixture(scope="session")
def crash_marker(tmp_path_factory) -> Path:
    """``RLXF_TEST_CRASH_MARKER`` (tests/runtime/crashing_rollout.py), set before any Ray node starts
    so that every worker inherits it."""
    marker = tmp_path_factory.mktemp("chaos") / "crash_on_call"
    os.environ["RLXF_TEST_CRASH_MARKER"] = str(marker)
    return marker


def crash_rollout_in_step_2(marker: Path, monkeypatch) -> None:
    """The rollout role's process SIGKILLs itself inside step 2's ``generate``."""
    from tests.runtime.crashing_rollout import crashing_rollout_role

    marker.write_text("3")  # generate calls: 1 = the initial eval, 2 = step 1, 3 = step 2 -> dies there
    monkeypatch.setattr(setup, "make_rollout_role", crashing_rollout_role)


@pytest.fixture(scope="module")
def ray_cluster(crash_marker):
    """Ray on 2 CPUs, one node, started by rlxf's own ``connect``."""
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[ray]')")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    from rlxf.runtime.ray_runtime import connect

    connect(None, num_cpus=2)
    try:
        yield ray
    finally:
        ray.shutdown()
