"""Every loop stops the same way (docs/reliability.md): SIGTERM or Ctrl-C finishes the step in progress,
checkpoints it and exits with 128 + the signal's number and one ``rlxf:`` line; ``--resume`` continues from
that step. A signal during the SFT warm-up of an RL run (before its first checkpoint) leaves the run folder
as it was found; a second signal stops at once, with one line and no traceback. ``rlxf`` runs in a
subprocess here, as a scheduler or a terminal would run it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlxf.train import checkpoint as ckpt

QUICK = ["data.eval_size=16", "eval.every=0", "checkpoint.every=1000", "logging.progress_bar=false",
         "logging.plot=false", "logging.sinks=[jsonl]"]


def rlxf(*args: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([os.getcwd(), *sys.path])}
    return subprocess.Popen([sys.executable, "-m", "rlxf.cli", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=180)
    return proc.returncode, out, err


def metric_steps(run_dir: Path) -> list[int]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line)["step"] for line in path.read_text().splitlines()] if path.exists() else []


def wait_for(condition, proc: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.time() + seconds
    while not condition() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()[1][-2000:]


def rlxf_lines(err: str) -> list[str]:
    assert "Traceback" not in err, err[-3000:]
    return [line for line in err.splitlines() if line.startswith("rlxf:")]


def folder_listing(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("loop, sig", [
    pytest.param("sft", signal.SIGTERM, marks=pytest.mark.slow),  # ~25 s: two processes, each loads torch
    pytest.param("dpo", signal.SIGINT, marks=pytest.mark.slow),
    pytest.param("reward_model", signal.SIGTERM, marks=pytest.mark.slow),
])
def test_an_offline_loop_checkpoints_the_step_it_was_stopped_in_and_resumes_from_it(loop, sig, tmp_path,
                                                                                  tiny_model_dir):
    run_dir = tmp_path / "runs" / loop
    key = "sft.steps" if loop == "sft" else "preference.steps"
    recipe = [] if loop == "sft" else [f"src/rlxf/recipes/{loop}.yaml", "preference.batch_size=8",
                                       "preference.micro_batch_size=8"]
    proc = rlxf("train", *recipe, f"loop={loop}", f"run_dir={run_dir}", f"model.path={tiny_model_dir}",
                "sft.batch_size=8", f"{key}=500", *(["sft.steps=0"] if loop != "sft" else []), *QUICK)
    wait_for(lambda: 2 in metric_steps(run_dir), proc)
    proc.send_signal(sig)  # mid-run: a checkpoint is due only every 1000 steps
    code, out, err = finish(proc)
    stopped_at = metric_steps(run_dir)[-1]
    assert code == 128 + sig.value, err[-2000:]
    assert rlxf_lines(err) == [f"rlxf: {sig.name} received: stopped after step {stopped_at}, which is checkpointed; "
                               f"continue with: rlxf train --resume {run_dir}"]
    assert 2 <= stopped_at < 500
    last = ckpt.latest_valid_checkpoint(run_dir)
    assert last.name == f"step_{stopped_at:06d}" and ckpt.checkpoint_problem(last) is None
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stopped_by"] == sig.name and summary["steps"] == stopped_at
    # the last evaluation is step 0's: not passed off as a figure of the policy it stopped with
    assert summary["final_eval_accuracy"] is None and summary["last_eval_step"] == 0
    assert "final_eval" not in summary and "last_eval" in summary

    from fastapi.testclient import TestClient

    from rlxf.studio.app import StudioSettings, make_app

    runs = tmp_path / "runs"
    studio = TestClient(make_app(StudioSettings(runs, runs / "studio.sqlite", None)), base_url="http://127.0.0.1:8765")
    assert {r["name"]: r["status"] for r in studio.get("/api/runs").json()} == {loop: "stopped"}

    resumed = rlxf("train", "--resume", str(run_dir), f"{key}={stopped_at + 1}")
    code, out, err = finish(resumed)
    assert code == 0, err[-2000:]
    assert rlxf_lines(err) == []
    assert metric_steps(run_dir) == list(range(stopped_at + 2))  # every step once: none lost, none repeated
    summary = json.loads((run_dir / "summary.json").read_text())
    assert "stopped_by" not in summary and summary["final_eval_accuracy"] is not None
    assert {r["name"]: r["status"] for r in studio.get("/api/runs").json()} == {loop: "finished"}


def finished_run(run_dir: Path, tiny_model_dir: str) -> dict[str, int]:
    proc = rlxf("train", "loop=sft", f"run_dir={run_dir}", f"model.path={tiny_model_dir}", "sft.steps=2",
                "sft.batch_size=8", *QUICK)
    code, _, err = finish(proc)
    assert code == 0, err[-2000:]
    return folder_listing(run_dir)


@pytest.mark.slow  # ~25 s: a finished run first, then the stopped one
def test_a_stop_during_the_sft_warm_up_leaves_the_previous_run_as_it_was(tmp_path, tiny_model_dir):
    run_dir = tmp_path / "victim"
    before = finished_run(run_dir, tiny_model_dir)
    proc = rlxf("train", f"run_dir={run_dir}", f"model.path={tiny_model_dir}", "sft.steps=100000",
                "sft.batch_size=8", "train.steps=2", *QUICK)
    wait_for(lambda: not (run_dir / "summary.json").exists(), proc)  # moved aside: the warm-up is under way
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    code, out, err = finish(proc)
    assert code == 143, err[-2000:]
    [line] = rlxf_lines(err)
    assert line.startswith("rlxf: SIGTERM received during the SFT warm-up (step ")
    assert "before the run's first checkpoint: nothing to keep, the run folder is as it was found" in line
    assert folder_listing(run_dir) == before  # the finished run is back, whole
    assert [p.name for p in tmp_path.iterdir()] == ["victim"]  # and nothing left beside it


def test_a_second_ctrl_c_stops_at_once_with_one_line(tmp_path, tiny_model_dir):
    run_dir = tmp_path / "run"
    steps = ["train.steps=500", "sft.steps=0", "train.prompts_per_step=4", "rollout.n_samples=4",
             "train.mini_batch_size=16", "train.micro_batch_size=16",
             # each step waits 1 s in its reward: the second signal surely comes while a step is in progress
             "reward.function=tests.core.helpers:slow_length_reward"]
    proc = rlxf("train", f"run_dir={run_dir}", f"model.path={tiny_model_dir}", *steps, *QUICK)
    wait_for(lambda: 1 in metric_steps(run_dir), proc)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    code, out, err = finish(proc)
    assert code == 130, err[-2000:]
    [line] = rlxf_lines(err)
    assert line.startswith("rlxf: a second SIGINT stopped the run at once: the step in progress is dropped, the "
                           "last checkpoint is kept"), line
    last = ckpt.latest_valid_checkpoint(run_dir)  # the previous checkpoint, whole
    assert last is not None and ckpt.checkpoint_problem(last) is None
