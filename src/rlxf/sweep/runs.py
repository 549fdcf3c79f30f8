"""Launching a recipe once per seed, in parallel subprocesses, and reading each run's curve back.

Each seed is an ordinary ``rlxf train`` run (``seed=S run_dir=OUT/seed_S``) with one torch thread, so
``parallel`` runs share the cores without oversubscription; a run that fails is recorded with its log,
and the others go on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from rlxf.tracking.plot import read_run, series


@dataclass
class SeedRun:
    seed: int
    run_dir: Path
    returncode: int
    wall_seconds: float
    curve: list[tuple[int, float]] = field(default_factory=list)  # (step, metric) at each evaluation

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and len(self.curve) >= 2

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


def train_command(recipe: str | None, overrides: list[str], seed: int, run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "rlxf.cli", "train", *([recipe] if recipe else []), *overrides,
            f"seed={seed}", f"run_dir={run_dir}", "threads=1", "logging.progress_bar=false"]


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
        initial = json.loads(summary.read_text()).get("initial_eval_accuracy")
        if initial is not None and (not curve or curve[0][0] != 0):
            curve.insert(0, (0, float(initial)))
    return curve


def run_seed(recipe: str | None, overrides: list[str], seed: int, out_dir: Path, metric: str,
             per_seed: list[str] = ()) -> SeedRun:
    run_dir = out_dir / f"seed_{seed}"
    overrides = [*overrides, *seed_overrides(list(per_seed), seed)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    t0 = time.monotonic()
    with open(out_dir / f"seed_{seed}.log", "w") as log:
        proc = subprocess.run(train_command(recipe, overrides, seed, run_dir), stdout=log, stderr=subprocess.STDOUT,
                              env=env, stdin=subprocess.DEVNULL)
    return SeedRun(seed, run_dir, proc.returncode, time.monotonic() - t0, read_curve(run_dir, metric))


def run_seeds(recipe: str | None, overrides: list[str], seeds: list[int], out_dir: Path, metric: str,
              parallel: int, per_seed: list[str] = ()) -> list[SeedRun]:
    out_dir.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        return list(pool.map(lambda s: run_seed(recipe, overrides, s, out_dir, metric, per_seed), seeds))
