"""SIGTERM / SIGINT mid-run: the step in progress finishes and is checkpointed, the process exits with
128 + the signal's number, and ``--resume`` continues to the end with nothing lost or repeated."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from rlxf.loops.stop_signals import StopSignals
from rlxf.train import checkpoint as ckpt
from tests.conftest import small_overrides


def metric_steps(run_dir) -> list[int]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line)["step"] for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("sig", [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow)])
def test_a_stop_signal_checkpoints_the_step_and_the_run_resumes(tmp_path, tiny_model_dir, sig):
    run_dir = tmp_path / sig.name
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([os.getcwd(), *sys.path])}
    overrides = [*small_overrides(run_dir, tiny_model_dir, steps=200), "sft.steps=0", "checkpoint.every=1000"]
    proc = subprocess.Popen([sys.executable, "-m", "rlxf.cli", "train", *overrides], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while 1 not in metric_steps(run_dir) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(sig)  # mid-run: checkpoints are due only every 1000 steps
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig.value, err[-2000:]
    stopped_at = metric_steps(run_dir)[-1]
    assert 1 <= stopped_at < 200
    assert f"{sig.name} received: stopped after step {stopped_at}, which is checkpointed" in out + err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stopped_by"] == sig.name and summary["steps"] == stopped_at
    last = ckpt.latest_valid_checkpoint(run_dir)
    assert last.name == f"step_{stopped_at:06d}" and ckpt.checkpoint_problem(last) is None

    resumed = subprocess.run([sys.executable, "-m", "rlxf.cli", "train", "--resume", str(run_dir),
                              f"train.steps={stopped_at + 1}"], env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert metric_steps(run_dir) == list(range(stopped_at + 2))  # every step logged once


def test_a_second_signal_stops_at_once():
    stop = StopSignals().install()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested == signal.SIGTERM and stop.exit_code == 143
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
        assert signal.getsignal(signal.SIGTERM) is not stop._on_signal  # handlers given back
    finally:
        stop.restore()
