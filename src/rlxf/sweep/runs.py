"""Launching a recipe once per seed, in parallel subprocesses, and reading each run's curve back.

Each seed is an ordinary ``rlxf train`` run (``seed=S run_dir=OUT/seed_S``) with one torch thread, so
``parallel`` runs share the cores without oversubscription; a run that fails is recorded with its log,
and the others go on. A seed already finished in ``OUT`` is kept as it is; one cut mid-run continues with
``rlxf train --resume OUT/seed_S`` (seed_state.py), so that it equals an uninterrupted run. The seeds run as
children in the sweep's process group: a signal to the whole group (a terminal's Ctrl-C, a kill of the group)
reaches each of them, and a SIGTERM / SIGINT sent to the sweep's process alone is forwarded to each
(``ForwardedStop``): every running seed finishes its step, checkpoints it and exits, and no new seed starts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rlxf.loops.stop_signals import HANDLED, StopSignals
from rlxf.sweep.seed_state import FINISHED, NEW, PARTIAL, read_summary, seed_state
from rlxf.tracking.plot import read_run, series

STOP_SIGNALS = HANDLED


@dataclass
class SeedRun:
    seed: int
    run_dir: Path
    returncode: int | None  # of this sweep's run of the seed; None when it did not run now
    wall_seconds: float
    curve: list[tuple[int, float]] = field(default_factory=list)  # (step, metric) at each evaluation
    state: str = ""  # finished, partial (cut, continues on the next sweep), failed or new (not started)
    checkpoint_step: int | None = None  # a partial seed's last whole checkpoint
    disk_bytes: int | None = None  # the run folder's footprint, as its summary.json reports it

    def __post_init__(self) -> None:
        if not self.state:
            self.state = FINISHED if self.returncode == 0 else "failed"

    @property
    def ok(self) -> bool:
        return self.state == FINISHED and len(self.curve) >= 2

    @property
    def initial(self) -> float:
        return self.curve[0][1]

    @property
    def final(self) -> float:
        return self.curve[-1][1]

    @property
    def best(self) -> tuple[int, float]:
        step, value = max(self.curve, key=lambda sv: (sv[1], -sv[0]))
        return step, value


def run_overrides(overrides: list[str], seed: int, run_dir: Path) -> list[str]:
    """What ``rlxf train`` gets after the recipe for one seed (the config a seed's saved one is checked against)."""
    return [*overrides, f"seed={seed}", f"run_dir={run_dir}", "threads=1", "logging.progress_bar=false"]


def train_command(recipe: str | None, overrides: list[str], seed: int, run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "rlxf.cli", "train", *([recipe] if recipe else []),
            *run_overrides(overrides, seed, run_dir)]


def resume_command(run_dir: Path) -> list[str]:
    """The path ``rlxf train --resume`` takes: the run's own config.yaml, its last whole checkpoint."""
    return [sys.executable, "-m", "rlxf.cli", "train", "--resume", str(run_dir)]


def seed_overrides(per_seed: list[str], seed: int) -> list[str]:
    """``--per-seed`` overrides with ``{seed}`` filled in, so that each seed starts from its own checkpoint
    (``model.path=sft/seed_{seed}/checkpoints/step_000300/policy``): the SFT warm-up runs once per seed,
    not once per recipe and seed."""
    return [override.replace("{seed}", str(seed)) for override in per_seed]


def read_curve(run_dir: Path, metric: str) -> list[tuple[int, float]]:
    """The metric at every evaluation of a run, the one before training included (step 0)."""
    steps, values = series(read_run(run_dir), metric) if (run_dir / "metrics.jsonl").exists() else ([], [])
    curve = list(zip(steps, values))
    summary = run_dir / "summary.json"
    if metric == "eval/accuracy" and summary.exists():
        initial = (read_summary(run_dir) or {}).get("initial_eval_accuracy")
        if initial is not None and (not curve or curve[0][0] != 0):
            curve.insert(0, (0, float(initial)))
    return curve


def stopped_by_signal(returncode: int | None) -> bool:
    """A run that a stop signal ended: it checkpointed its step (128 + the signal) or was killed by one."""
    return returncode is not None and (returncode < 0 or returncode in {128 + s.value for s in STOP_SIGNALS})


def read_seed(run_dir: Path, seed: int, metric: str, returncode: int | None = None) -> SeedRun:
    """One seed as its folder shows it now; ``returncode`` (of a run this sweep made) tells a failure from a stop."""
    from rlxf.train.checkpoint import latest_checkpoint

    state = seed_state(run_dir)
    if state == PARTIAL and returncode not in (None, 0) and not stopped_by_signal(returncode):
        state = "failed"
    elif state == PARTIAL and returncode == 0:  # exited 0 with no summary: nothing says it finished
        state = "failed"
    elif state == NEW and returncode not in (None, 0) and not stopped_by_signal(returncode):
        state = "failed"  # refused or failed before its run folder was made: started, so not "not started yet"
    summary = read_summary(run_dir) or {}
    checkpoint = latest_checkpoint(run_dir) if state != NEW else None
    step = int(checkpoint.name.removeprefix("step_")) if checkpoint is not None else None
    return SeedRun(seed, run_dir, returncode, float(summary.get("wall_seconds") or 0.0), read_curve(run_dir, metric),
                   state, step, summary.get("disk_bytes"))


class ForwardedStop(StopSignals):
    """SIGTERM / SIGINT to the sweep: no new seed starts, and the signal goes on to each running seed, which
    stops at its next step boundary with a checkpoint. Not forwarded when the terminal already sent it to the
    whole foreground process group (Ctrl-C): a seed that got it twice would stop at once, without its step.
    Installed and restored as a run's :class:`StopSignals`; a second signal is forwarded too, not raised."""

    def __init__(self) -> None:
        super().__init__()
        self.children: dict[int, subprocess.Popen] = {}

    def _on_signal(self, signum: int, frame) -> None:
        self.requested = self.requested or signal.Signals(signum)
        if signum == signal.SIGINT and _terminal_signals_our_group():
            return
        for proc in self.children.values():
            if proc.poll() is None:
                proc.send_signal(signum)


def _terminal_signals_our_group() -> bool:
    """Whether this process is in its terminal's foreground group (a Ctrl-C there reached every seed)."""
    for fd in (0, 1, 2):
        try:
            return os.tcgetpgrp(fd) == os.getpgrp()
        except OSError:
            continue
    return False


@dataclass
class SeedLaunch:
    """One seed to run now: started afresh or continued from its last checkpoint."""

    seed: int
    run_dir: Path
    command: list[str]
    continues: bool


def run_seeds(launches: list[SeedLaunch], out_dir: Path, parallel: int, stop: ForwardedStop,
              on_seed_end: Callable[[int, int], None] = lambda seed, rc: None, poll_seconds: float = 0.2
              ) -> dict[int, int]:
    """Run ``launches``, ``parallel`` at a time, until each has ended or a stop signal came (then the running
    ones stop at a checkpoint and the rest are not started); ``on_seed_end(seed, returncode)`` after each.
    Returns each run seed's exit code. The seeds' output goes to ``OUT/seed_S.log`` (appended to on a resume)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    waiting, running, codes = list(launches), {}, {}
    while waiting or running:
        while waiting and len(running) < max(1, parallel) and stop.requested is None:
            launch = waiting.pop(0)
            log = open(out_dir / f"seed_{launch.seed}.log", "a" if launch.continues else "w")
            proc = subprocess.Popen(launch.command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                    stdin=subprocess.DEVNULL)
            running[launch.seed] = (proc, log)
            stop.children[launch.seed] = proc
        for seed, (proc, log) in list(running.items()):
            if proc.poll() is None:
                continue
            log.close()
            del running[seed]
            stop.children.pop(seed, None)
            codes[seed] = proc.returncode
            on_seed_end(seed, proc.returncode)
        if stop.requested is not None and not running:
            break
        time.sleep(poll_seconds)
    return codes


def seed_dirs(out_dir: Path) -> dict[int, Path]:
    """The seed folders under a sweep's output folder (``seed_S``), by seed."""
    found = {}
    for path in out_dir.glob("seed_*"):
        number = path.name.removeprefix("seed_")
        if path.is_dir() and number.isdigit():
            found[int(number)] = path
    return dict(sorted(found.items()))


def write_manifest(out_dir: Path, manifest: dict) -> None:
    """``sweep_args.json``: the seeds and metric asked for, which ``rlxf sweep --report OUT`` reads back."""
    (out_dir / "sweep_args.json").write_text(json.dumps(manifest, indent=1) + "\n")


def read_manifest(out_dir: Path) -> dict:
    try:
        return json.loads((out_dir / "sweep_args.json").read_text())
    except (OSError, ValueError):
        return {}

