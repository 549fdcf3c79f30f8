"""A run logging to TensorBoard, W&B (offline) and MLflow (SQLite) at once, then resumed after a crash
between a logged step and its checkpoint: each tracker, read back with its own library, holds every
step of ``metrics.jsonl`` once, with the same values, in one tracker run."""

import json
import shutil

import pytest

from rlxf.checked_config import load_config
from rlxf.loops.rl import train_rl
from tests.conftest import small_overrides
from tests.tracking.tracker_files import (
    json_rows,
    mlflow_run,
    tensorboard_scalars,
    tensorboard_text,
    wandb_offline_run,
)

pytest.importorskip("tensorboard")
pytest.importorskip("wandb")
pytest.importorskip("mlflow")

TRACKERS = [
    "logging.sinks=[console,jsonl,tensorboard,wandb,mlflow]", "logging.project=tiny-adds",
    "logging.run_name=first-try", "logging.tags=[tiny,ci]", "logging.samples_every=2", "logging.samples_per_step=4",
    "eval.every=2",
]


def untimed(row: dict) -> dict:
    """A metrics row without wall-clock values (a re-run step repeats everything else exactly)."""
    return {k: v for k, v in row.items() if not k.startswith("time/") and k != "step" and v is not None}


@pytest.fixture(scope="module")
def resumed_run(tmp_path_factory, tiny_model_dir):
    run_dir = tmp_path_factory.mktemp("trackers") / "run"
    train_rl(load_config(None, [*small_overrides(run_dir, tiny_model_dir, steps=3), *TRACKERS]), write=lambda _: None)
    # The process died after logging step 3, before its checkpoint: the resume runs step 3 again.
    shutil.rmtree(run_dir / "checkpoints" / "step_000003")
    (run_dir / "summary.json").unlink()
    config = load_config(run_dir / "config.yaml", ["train.steps=4"])
    train_rl(config, resume=True, write=lambda _: None)
    return run_dir, {r["step"]: r for r in json_rows(run_dir / "metrics.jsonl")}


def test_the_run_logged_each_step_once_to_jsonl(resumed_run):
    _, rows = resumed_run
    assert sorted(rows) == [0, 1, 2, 3, 4]
    assert "eval/accuracy" in rows[2] and "eval/accuracy" in rows[4] and "reward/mean" in rows[3]


def test_tensorboard_holds_every_metric_once(resumed_run):
    run_dir, rows = resumed_run
    scalars = tensorboard_scalars(run_dir / "tensorboard")
    for step, row in rows.items():
        for key, value in untimed(row).items():
            assert scalars[key][step] == pytest.approx(value, rel=1e-6, abs=1e-7), (key, step)
    # purge_step dropped the first attempt's step 3: one event per step
    assert sorted(scalars["reward/mean"]) == [1, 2, 3, 4]
    assert sorted(scalars["time/step"]) == [1, 2, 3, 4]
    samples = tensorboard_text(run_dir / "tensorboard", "rollouts")
    assert sorted(samples) == [2, 4] and samples[2].startswith("| step | group | prompt | response |")
    assert "first-try" in tensorboard_text(run_dir / "tensorboard", "config")[0]


def test_wandb_offline_run_is_one_run_with_each_step_once(resumed_run):
    run_dir, rows = resumed_run
    run = wandb_offline_run(run_dir / "wandb")
    assert len(run["ids"]) == 1 and run["ids"] == {json.loads((run_dir / "tracking" / "wandb.json").read_text())["run_id"]}
    assert len(list((run_dir / "wandb").glob("offline-run-*"))) == 2  # the first start and the resume
    assert run["steps"] == [0, 1, 2, 3, 4]  # step 3 was not sent again
    assert run["name"] == "first-try" and run["tags"] == ["tiny", "ci"]
    assert run["config"]["algorithm"]["name"] == "grpo" and run["config"]["train"]["steps"] == 4
    for step, row in rows.items():
        for key, value in untimed(row).items():
            assert run["history"][key][step] == pytest.approx(value, rel=1e-9), (key, step)
    assert sorted(run["tables"]) == [2, 4]
    table = run["tables"][4]
    samples = [r for r in json_rows(run_dir / "samples.jsonl") if r["step"] == 4]
    assert table["columns"][:4] == ["step", "group", "prompt", "response"]
    assert [row[2] for row in table["data"]] == [r["prompt"] for r in samples]


def test_mlflow_run_is_resumed_with_each_step_once(resumed_run):
    run_dir, rows = resumed_run
    record = json.loads((run_dir / "tracking" / "mlflow.json").read_text())
    run = mlflow_run(f"sqlite:///{run_dir / 'mlflow.db'}", record["run_id"])
    assert record["last_step"] == 4 and run["status"] == "FINISHED" and run["name"] == "first-try"
    assert run["tags"]["tiny"] == "true" and run["tags"]["ci"] == "true"
    assert run["params"]["algorithm.name"] == "grpo" and run["params"]["rollout.n_samples"] == "4"
    for key, history in run["metrics"].items():
        steps = [s for s, _ in history]
        assert len(steps) == len(set(steps)), key  # no step twice
    for step, row in rows.items():
        for key, value in untimed(row).items():
            assert dict(run["metrics"][key])[step] == pytest.approx(value, rel=1e-9), (key, step)
    assert run["artifacts"] == ["samples/step_000002.jsonl", "samples/step_000004.jsonl"]


def test_logged_rollouts_carry_every_field(resumed_run):
    run_dir, _ = resumed_run
    samples = json_rows(run_dir / "samples.jsonl")
    assert [r["step"] for r in samples] == [2] * 4 + [4] * 4
    fields = {"step", "group", "prompt", "response", "reward", "reward/correct", "reward/format", "advantage",
              "length", "truncated", "policy_version", "answer"}
    for row in samples:
        assert fields <= row.keys(), fields - row.keys()
        assert row["prompt"].endswith("=") and 1 <= row["length"] <= 6
        assert row["policy_version"] == row["step"] - 1  # sampled by the weights synced after the previous step
    assert len({r["group"] for r in samples if r["step"] == 2}) == 4  # four different prompts first
    problems = json_rows(run_dir / "eval_problems.jsonl")
    assert sorted({r["step"] for r in problems}) == [0, 2, 4]
    assert [r["problem"] for r in problems if r["step"] == 4] == list(range(16))
