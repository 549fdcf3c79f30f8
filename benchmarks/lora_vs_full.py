"""LoRA vs full-parameter GRPO on the default recipe: held-out accuracy gained and peak memory.

The recipe's SFT warm-up runs once (its own process; ``train.steps=0`` saves the policy after SFT);
the RL runs then start from that policy with ``sft.steps=0``, each in its own process (one torch
thread, ``threads=1``, the same steps), so peak RSS (``ru_maxrss``, per process) measures the RL phase.
Only ``model.lora`` and the learning rate differ (adapters take a larger one, as usual). Each arm runs
``--repeats`` times, interleaved (full, lora, full, lora, ...): at 3.2M parameters the state LoRA saves
(gradients and AdamW moments of the base weights, ~38 MB) is not far above glibc's run-to-run heap
retention (up to ~17 MiB between runs of one arm), so one pair of runs proves little; compare the medians. Prints JSON: per run the held-out accuracy before
and after RL, its gain, the peak RSS, the wall time; per arm the medians; the LoRA / full ratios.

``crossover`` repeats the memory measurement with the same recipe on models of the same family at
3.2M, 12.7M, 29.8M and 56M parameters (random weights, no SFT, 3 steps, no evaluation): where the saved
state grows past the noise.

    python benchmarks/lora_vs_full.py [--steps 60] [--repeats 3] [--out runs/bench-lora]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from common import emit

CHILD = """
import json, resource, sys, time
import torch
from rlxf.checked_config import load_config
from rlxf.loops.rl import train_rl
torch.set_num_threads(1)
start = time.time()
summary = train_rl(load_config(None, sys.argv[1:]), write=lambda _: None)
print("RESULT " + json.dumps({**summary, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                              "wall_s": time.time() - start}))
"""

RUNS = {
    "full": [],
    "lora": ["model.lora.r=16", "model.lora.alpha=32", "train.optim.lr=1.0e-3"],
}


# model sizes of the default model's family (tiny_llama_config arguments) for the crossover
SIZES = {
    "3.2M": {},
    "12.7M": {"hidden_size": 512, "num_layers": 4, "num_heads": 8, "intermediate_size": 1376},
    "29.8M": {"hidden_size": 640, "num_layers": 6, "num_heads": 10, "intermediate_size": 1728},
    "56M": {"hidden_size": 768, "num_layers": 8, "num_heads": 12, "intermediate_size": 2048},
}


def child(overrides: list[str]) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", CHILD, "threads=1", *overrides], capture_output=True, text=True,
                          env=env, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not lines:
        raise SystemExit(f"run {overrides} failed:\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def sft_policy(out: Path) -> Path:
    """The default recipe's SFT warm-up, saved as the step-0 checkpoint of a zero-step RL run (reused when
    ``out`` already holds it)."""
    policy = out / "sft" / "checkpoints" / "step_000000" / "policy"
    if (policy / "model.safetensors").exists():
        return policy
    child([f"run_dir={out / 'sft'}", "train.steps=0", "logging.progress_bar=false", "logging.sinks=[jsonl]"])
    return policy


def run(name: str, steps: int, out: Path, start: Path) -> dict:
    arm, trim = name.removesuffix("-no-trim"), not name.endswith("-no-trim")  # --no-trim-arms
    result = child([f"run_dir={out / name}", f"model.path={start}", "sft.steps=0", f"train.steps={steps}",
                    f"eval.every={steps}", f"checkpoint.every={steps}", "logging.progress_bar=false",
                    "logging.sinks=[jsonl]", *RUNS[arm], f"runtime.trim_memory={str(trim).lower()}"])
    return {
        "initial_eval_accuracy": result["initial_eval_accuracy"], "final_eval_accuracy": result["final_eval_accuracy"],
        "gain": round(result["final_eval_accuracy"] - result["initial_eval_accuracy"], 3),
        "peak_rss_mib": round(result["peak_rss_mib"], 1), "wall_s": round(result["wall_s"], 1),
    }


def crossover(out: Path) -> dict:
    """Peak RSS of 3 RL steps, full vs LoRA, at each of SIZES (random weights, no SFT, no evaluation)."""
    from safetensors import safe_open

    from rlxf.models.tiny import build_tiny_model

    table = {}
    for size, shape in SIZES.items():
        model = build_tiny_model(out / f"model-{size}", **shape)
        with safe_open(model / "model.safetensors", "pt") as weights:
            parameters = sum(_numel(weights.get_slice(key).get_shape()) for key in weights.keys())
        peaks = {}
        for name in RUNS:
            result = child([f"run_dir={out / f'scale-{size}-{name}'}", f"model.path={model}", "sft.steps=0",
                            "train.steps=3", "data.eval_size=16", "eval.every=0", "checkpoint.every=0",
                            "logging.progress_bar=false", "logging.sinks=[jsonl]", *RUNS[name]])
            peaks[name] = round(result["peak_rss_mib"], 1)
        table[size] = {"parameters": parameters, "peak_rss_mib": peaks,
                       "lora_minus_full_mib": round(peaks["lora"] - peaks["full"], 1),
                       "lora_over_full": round(peaks["lora"] / peaks["full"], 3)}
    return table


def _numel(shape: list[int]) -> int:
    numel = 1
    for dim in shape:
        numel *= dim
    return numel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="runs/bench-lora")
    parser.add_argument("--no-crossover", action="store_true")
    parser.add_argument("--no-trim-arms", action="store_true",
                        help="also run each arm with runtime.trim_memory=false (glibc keeps freed heap)")
    args = parser.parse_args()
    out = Path(args.out)
    start = sft_policy(out)
    names = [*RUNS, *([f"{name}-no-trim" for name in RUNS] if args.no_trim_arms else [])]
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for repeat in range(args.repeats):  # interleaved: background load hits both arms alike
        for name in names:
            runs[name].append(run(name, args.steps, out / f"r{repeat}", start))
    arms = {name: {"overrides": RUNS[name.removesuffix("-no-trim")], "runs": results,
                   "median_peak_rss_mib": statistics.median(r["peak_rss_mib"] for r in results),
                   "median_gain": statistics.median(r["gain"] for r in results)} for name, results in runs.items()}
    full, lora = arms["full"], arms["lora"]
    emit({
        "recipe": "default", "steps": args.steps, "repeats": args.repeats, "threads": 1, "arms": arms,
        "lora_over_full": {
            "median_peak_rss": round(lora["median_peak_rss_mib"] / full["median_peak_rss_mib"], 3),
            "median_peak_rss_difference_mib": round(lora["median_peak_rss_mib"] - full["median_peak_rss_mib"], 1),
            "repeats_with_lora_lower": sum(a["peak_rss_mib"] < b["peak_rss_mib"]
                                           for a, b in zip(lora["runs"], full["runs"])),
            "median_gain_difference": round(lora["median_gain"] - full["median_gain"], 3),
        },
        "lora_learns": all(r["gain"] >= 0.15 for r in lora["runs"]),
        "crossover": None if args.no_crossover else crossover(out),
    })


if __name__ == "__main__":
    main()
