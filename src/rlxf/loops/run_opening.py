"""Opening a run, shared by every loop: the checkpoint to resume from, a refusal when it has nothing left
to train, the stop-signal handlers, and the run folder (loops/run_dir.py) — in that order, so that what
can be refused is refused before anything in the folder changes."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rlxf.config import Config, ConfigError
from rlxf.loops import steps_key, steps_of
from rlxf.loops.run_dir import RunFolder, prepare_run_dir
from rlxf.loops.run_state import load_run_state
from rlxf.loops.stop_signals import StopSignals
from rlxf.train.checkpoint import latest_valid_checkpoint


@dataclass
class OpenedRun:
    run_dir: Path
    checkpoint: Path | None  # resumed from; None on a fresh run
    folder: RunFolder
    stop: StopSignals


def open_run(config: Config, resume: bool, write: Callable[[str], None]) -> OpenedRun:
    run_dir = Path(config.run_dir)
    checkpoint = latest_valid_checkpoint(run_dir, write) if resume else None
    if resume and checkpoint is None:
        write(f"no checkpoint in {run_dir}: starting the run from the beginning")
    if checkpoint is not None:
        done, steps = load_run_state(checkpoint).step, steps_of(config)
        # a resume that trains nothing says so and rewrites nothing of the run; a run killed after its last
        # checkpoint but before that step's metrics line or summary still resumes (it writes them)
        if done >= steps and _summary_steps(run_dir) == done and _last_logged_step(run_dir) == done:
            key = steps_key(config.loop)
            raise ConfigError(f"--resume {run_dir}: nothing to train: its last checkpoint is step {done} and "
                              f"{key}={steps}; to train on, give more steps ({key}={done + max(steps, 1)})")
    stop = StopSignals().install()  # from here a signal stops the run cleanly
    try:
        folder = prepare_run_dir(run_dir, resume, write)
    except BaseException:
        stop.restore()
        raise
    return OpenedRun(run_dir, checkpoint, folder, stop)


def _summary_steps(run_dir: Path) -> int | None:
    """The step ``summary.json`` was written at (None: no summary yet, or not readable)."""
    try:
        return json.loads((run_dir / "summary.json").read_text()).get("steps")
    except (OSError, ValueError, AttributeError):
        return None


def _last_logged_step(run_dir: Path) -> int | None:
    """The step of ``metrics.jsonl``'s last line (None: none, or not readable)."""
    try:
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
        return json.loads(lines[-1]).get("step") if lines else None
    except (OSError, ValueError, AttributeError):
        return None
