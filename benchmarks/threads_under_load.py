"""The default recipe's RL step idle and beside a one-core busy loop, for several thread settings.

    .venv/bin/python benchmarks/threads_under_load.py [--steps 6] [--sft-steps 60] [--reps 1] [--settings a,b]

A user's laptop always runs something else. On 2 cores, torch's default (one intra-op thread per
core, OpenMP threads that spin while they wait) made a small model's step 10-20x slower beside one
busy process: the spinning thread and the busy one fight for a core, and every parallel region waits
for the thread that lost. Each setting below runs the default recipe (short SFT, ``--steps`` RL
steps, small held-out set) in a fresh process, first alone, then beside ``while True: pass`` in
another process; the step time is the median of ``time/step`` less evaluation and checkpoint time.

Settings (``OMP_WAIT_POLICY`` must be in the environment before torch is imported, so each runs in
its own process):

* ``rlxf_default``     no thread setting at all: what ``rlxf train`` does now;
* ``torch_default``    one thread per core, OpenMP's own wait policy (rlxf's old default);
* ``threads_1``        ``threads: 1``;
* ``passive_2``        two threads, ``OMP_WAIT_POLICY=PASSIVE``.

Prints JSON: per setting the idle and loaded step seconds and ``loaded_over_idle``; and each setting's
loaded and idle step over ``rlxf_default``'s. Target: ``rlxf_default`` loaded <= 2.2x idle.
The idle runs are only as idle as the machine is: the output records the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# name -> (environment, config overrides); OMP_WAIT_POLICY="" = unset for OpenMP, and keeps rlxf's
# own default (os.environ.setdefault) from applying
SETTINGS: dict[str, tuple[dict[str, str], list[str]]] = {
    "rlxf_default": ({}, []),
    "torch_default": ({"OMP_WAIT_POLICY": ""}, [f"threads={os.cpu_count()}"]),
    "threads_1": ({"OMP_WAIT_POLICY": ""}, ["threads=1"]),
    "passive_2": ({"OMP_WAIT_POLICY": "PASSIVE"}, ["threads=2"]),
}
BUSY_LOOP = "while True:\n    pass\n"


def child(run_dir: str, steps: int, sft_steps: int, overrides: list[str]) -> None:
    """Run the default recipe briefly and print the median step seconds (without eval/checkpoint)."""
    from rlxf.checked_config import load_config
    from rlxf.loops import get_loop

    config = load_config(None, [
        f"run_dir={run_dir}", f"train.steps={steps}", f"sft.steps={sft_steps}", "data.eval_size=32",
        "eval.every=0", "checkpoint.every=0", "logging.progress_bar=false", "logging.sinks=[jsonl]", *overrides,
    ])
    get_loop(config.loop)(config, write=lambda text: None)
    rows = [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    steps_s = [r["time/step"] - r.get("time/eval", 0.0) - r.get("time/checkpoint", 0.0) for r in rows if r["step"] > 0]
    import torch

    print(json.dumps({"step_seconds": statistics.median(steps_s), "torch_threads": torch.get_num_threads()}))


def run_setting(name: str, loaded: bool, args) -> dict:
    env_extra, overrides = SETTINGS[name]
    env = {**os.environ, **env_extra}
    busy = subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) if loaded else None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = subprocess.run(
                [sys.executable, __file__, "--child", tmp, "--steps", str(args.steps), "--sft-steps",
                 str(args.sft_steps), *overrides],
                env=env, capture_output=True, text=True, check=True,
            )
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--sft-steps", type=int, default=60)
    parser.add_argument("--reps", type=int, default=1, help="idle/loaded pairs per setting (medians)")
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args, overrides = parser.parse_known_args()
    if args.child:
        child(args.child, args.steps, args.sft_steps, overrides)
        return
    load_before = os.getloadavg()
    started = time.perf_counter()
    results = {}
    names = args.settings.split(",")
    runs: dict[str, dict[bool, list[float]]] = {name: {False: [], True: []} for name in names}
    threads = {}
    for _ in range(args.reps):  # settings interleaved, idle and loaded alternating: background load hits all alike
        for name in names:
            for loaded in (False, True):
                out = run_setting(name, loaded, args)
                runs[name][loaded].append(out["step_seconds"])
                threads[name] = out["torch_threads"]
    for name in names:
        idle, loaded = statistics.median(runs[name][False]), statistics.median(runs[name][True])
        results[name] = {
            "threads": threads[name], "idle_step_s": round(idle, 4), "loaded_step_s": round(loaded, 4),
            "loaded_over_idle": round(loaded / idle, 2),
        }
    if "rlxf_default" in results:
        base = results["rlxf_default"]
        for row in results.values():
            row["idle_over_rlxf_default"] = round(row["idle_step_s"] / base["idle_step_s"], 2)
            row["loaded_over_rlxf_default"] = round(row["loaded_step_s"] / base["loaded_step_s"], 2)
    print(json.dumps({
        "benchmark": "threads_under_load", "cpus": os.cpu_count(), "steps": args.steps, "reps": args.reps,
        "load_average_before": [round(x, 2) for x in load_before], "seconds": round(time.perf_counter() - started, 1),
        "target": "rlxf_default loaded_over_idle <= 2.2", "settings": results,
    }, indent=1))


if __name__ == "__main__":
    main()
