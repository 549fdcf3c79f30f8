"""What each metric sink costs per RL step, against the default run's step time.

    .venv/bin/python benchmarks/tracker_overhead.py [--steps 100] [--reps 3] [--step-seconds 0.3]

For each sink (jsonl alone, then jsonl + one tracker, then all five) a fresh run directory gets
``--steps`` steps of a metrics row shaped like the default recipe's (the row of a real 40-step default
run: about 50 keys), and every 10th step a logged-rollouts table of 8 rows. Set-up (opening the tracker
run) and close are timed apart from the per-step cost. Prints JSON: median milliseconds per step and per
set-up over ``--reps`` interleaved repetitions, and the per-step cost as a fraction of ``--step-seconds``
(0.3 s: the default recipe's step on this 2-core machine, from its metrics.jsonl).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from rlxf.tracking.config import LoggingConfig
from rlxf.tracking.metrics import MetricsLogger

sys.path.insert(0, str(Path(__file__).parent))
from common import emit, median  # noqa: E402

SINK_SETS = {
    "jsonl": ["jsonl"],
    "jsonl+tensorboard": ["jsonl", "tensorboard"],
    "jsonl+wandb": ["jsonl", "wandb"],
    "jsonl+mlflow": ["jsonl", "mlflow"],
    "all": ["console", "jsonl", "tensorboard", "wandb", "mlflow"],
}
KEYS = [f"group{g}/metric{i}" for g in range(5) for i in range(10)]  # 50 keys, like a default step's row
SAMPLE = {"step": 0, "group": 0, "prompt": "566+5=", "response": "561", "reward": 0.1, "reward/correct": 0.0,
          "reward/format": 1.0, "advantage": -0.35, "length": 4, "truncated": False, "policy_version": 19}


def one_run(sinks: list[str], steps: int) -> tuple[float, float]:
    """(set-up + close seconds, seconds per logged step)."""
    with tempfile.TemporaryDirectory() as tmp:
        settings = LoggingConfig(sinks=sinks, samples_every=10)
        start = time.perf_counter()
        logger = MetricsLogger(Path(tmp), sinks, write=lambda _: None, settings=settings,
                               hyperparams={"algorithm": {"name": "grpo"}, "train": {"steps": steps}})
        opened = time.perf_counter()
        for step in range(1, steps + 1):
            logger.log(step, {k: step * 0.001 + i for i, k in enumerate(KEYS)})
            if step % 10 == 0:
                for sink in logger.sinks:
                    if hasattr(sink, "log_samples"):
                        sink.log_samples(step, [{**SAMPLE, "step": step}] * 8)
        logged = time.perf_counter()
        logger.close()
        closed = time.perf_counter()
    return opened - start + closed - logged, (logged - opened) / steps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--step-seconds", type=float, default=0.3)
    args = parser.parse_args()
    one_run(["jsonl", "tensorboard", "wandb", "mlflow"], 5)  # imports and first-use costs
    results: dict[str, dict[str, list[float]]] = {name: {"setup": [], "step": []} for name in SINK_SETS}
    for _ in range(args.reps):
        for name, sinks in SINK_SETS.items():
            setup, per_step = one_run(sinks, args.steps)
            results[name]["setup"].append(setup)
            results[name]["step"].append(per_step)
    emit({
        "steps": args.steps, "reps": args.reps, "reference_step_seconds": args.step_seconds,
        "sinks": {
            name: {
                "setup_and_close_ms": round(median(r["setup"]) * 1000, 1),
                "ms_per_step": round(median(r["step"]) * 1000, 2),
                "fraction_of_a_default_step": round(median(r["step"]) / args.step_seconds, 4),
                "ms_per_step_vs_jsonl": round(median(r["step"]) / median(results["jsonl"]["step"]), 1),
            }
            for name, r in results.items()
        },
    })


if __name__ == "__main__":
    main()
