"""A sweep that survives an interruption, end to end on the tiny model: killed (SIGKILL to the sweep and its
seeds) after one seed finished and another is mid-run, then run again: the finished seed's folder is untouched,
the cut seed equals an uninterrupted run of it, the table is complete. And a SIGTERM to the sweep's process
alone stops every running seed at a step boundary with a checkpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rlxf.sweep.runs import run_overrides
from tests.conftest import assert_trains, small_overrides

STEPS = 6


def _env() -> dict:
    # the sweep and its seeds import the rlxf under test (a worktree's or the mutation check's copy)
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([os.getcwd(), *sys.path])}


def _overrides(tmp_path: Path, model_dir: str, steps: int) -> list[str]:
    return [o for o in small_overrides(tmp_path / "unused", model_dir, steps) if not o.startswith("run_dir")] + [
        "eval.every=2"]


def _sweep(overrides: list[str], out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "rlxf.cli", "sweep", *overrides, "--out", str(out), "--no-plot", *extra]


def _wait_for(condition, proc: subprocess.Popen, seconds: float = 300) -> None:
    deadline = time.time() + seconds
    while not condition() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.02)


def _files(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


def _metrics(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if not k.startswith(("time/", "samples"))} for row in rows]


@pytest.mark.slow
def test_a_killed_sweep_continues_where_it_was_cut(tmp_path, sft_model_dir):
    out = tmp_path / "sweep"
    overrides = _overrides(tmp_path, sft_model_dir, STEPS)
    sweep = subprocess.Popen(_sweep(overrides, out, "--seeds", "3", "--parallel", "1"), env=_env(),
                             start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cut_at = out / "seed_1" / "checkpoints" / "step_000002"
    _wait_for(lambda: cut_at.exists(), sweep)
    os.killpg(sweep.pid, signal.SIGKILL)  # the sweep and its seeds, with no chance to clean up
    sweep.wait()
    assert (out / "seed_0" / "summary.json").exists() and cut_at.exists(), "seed 1 never reached step 2"
    assert not (out / "seed_1" / "summary.json").exists(), "seed 1 finished before it could be killed"
    assert not (out / "seed_2").exists()
    finished = _files(out / "seed_0")

    # the report as the folders are now: seed 0 finished, seed 1 cut, seed 2 not started
    report = subprocess.run([sys.executable, "-m", "rlxf.cli", "sweep", "--report", str(out), "--no-plot"], env=_env(),
                            capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr[-2000:]
    partial = json.loads((out / "sweep.json").read_text())
    assert [row["seed"] for row in partial["per_seed"]] == [0] and partial["not_started"] == [2]
    assert [p["seed"] for p in partial["partial"]] == [1] and partial["partial"][0]["checkpoint_step"] >= 2
    assert "seed 1 not finished" in report.stdout

    again = subprocess.run(_sweep(overrides, out, "--seeds", "3", "--parallel", "1"), env=_env(),
                           capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert "seed 0: finished earlier, kept" in again.stdout and "seed 1: continues from its last checkpoint" in again.stdout
    assert _files(out / "seed_0") == finished  # not rerun, not rewritten: same files, sizes and mtimes

    # seed 1 equals an uninterrupted run of it: its curve and its final weights
    whole = tmp_path / "whole"
    subprocess.run([sys.executable, "-m", "rlxf.cli", "train", *run_overrides(overrides, 1, whole)], env=_env(),
                   check=True, capture_output=True, timeout=900)
    final = f"checkpoints/step_{STEPS:06d}/policy/model.safetensors"
    a, b = load_file(whole / final), load_file(out / "seed_1" / final)
    assert a.keys() == b.keys() and all(torch.equal(a[name], b[name]) for name in a)
    assert _metrics(whole) == _metrics(out / "seed_1") and len(_metrics(whole)) == STEPS + 1
    assert_trains(_metrics(whole))  # equal runs that learned, not equal zeros

    summary = json.loads((out / "sweep.json").read_text())
    assert [row["seed"] for row in summary["per_seed"]] == [0, 1, 2] and summary["complete"] is True
    assert not summary["partial"] and not summary["not_started"] and not summary["failed"]
    curve = [(r["step"], r["eval/accuracy"]) for r in _metrics(whole) if "eval/accuracy" in r]
    assert summary["per_seed"][1]["final"] == curve[-1][1] and summary["per_seed"][1]["steps"] == STEPS
    table = (out / "sweep.md").read_text()
    assert all(f"| {seed} | " in table for seed in (0, 1, 2)) and "not finished" not in table


@pytest.mark.slow
def test_a_sigterm_to_the_sweep_stops_each_seed_at_a_checkpoint(tmp_path, tiny_model_dir):
    out = tmp_path / "sweep"
    overrides = [*_overrides(tmp_path, tiny_model_dir, 200), "sft.steps=0", "checkpoint.every=1000"]
    sweep = subprocess.Popen(_sweep(overrides, out, "--seeds", "3", "--parallel", "2"), env=_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    metrics = [out / f"seed_{s}" / "metrics.jsonl" for s in (0, 1)]
    _wait_for(lambda: all(m.exists() and len(m.read_text().splitlines()) >= 2 for m in metrics), sweep)
    sweep.send_signal(signal.SIGTERM)  # to the sweep's process only: it forwards it to the running seeds
    output, _ = sweep.communicate(timeout=300)
    assert sweep.returncode == 128 + signal.SIGTERM.value, output[-3000:]
    assert "SIGTERM received: the running seeds stopped at a checkpoint; continue with: rlxf sweep" in output
    for seed in (0, 1):
        summary = json.loads((out / f"seed_{seed}" / "summary.json").read_text())
        stopped_at = summary["steps"]
        assert summary["stopped_by"] == "SIGTERM" and 1 <= stopped_at < 200
        assert (out / f"seed_{seed}" / "checkpoints" / f"step_{stopped_at:06d}").is_dir()  # none was due
        assert "SIGTERM received: stopped after step" in (out / f"seed_{seed}.log").read_text()
    assert not (out / "seed_2").exists()  # not started after the signal
    report = json.loads((out / "sweep.json").read_text())
    assert [p["seed"] for p in report["partial"]] == [0, 1] and report["not_started"] == [2]
