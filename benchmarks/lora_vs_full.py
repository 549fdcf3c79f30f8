"""LoRA vs full-parameter GRPO on the default recipe: held-out accuracy gained and peak memory.

The recipe's SFT warm-up runs once (its own process; ``train.steps=0`` saves the policy after SFT);
both RL runs then start from that policy with ``sft.steps=0``, each in its own process, so peak RSS
(``ru_maxrss``, per process) measures the RL phase. Only ``model.lora`` and the learning rate differ
(adapters take a larger one, as usual). Prints JSON: per run the held-out accuracy before and after
RL, its gain, the peak RSS, the wall time; and the LoRA / full ratios.

At 3.2M parameters the weights, gradients and Adam state LoRA saves (~40 MB) are the size of the
process's noise (~650 MB of interpreter, torch and activations), so ``at_scale`` repeats the memory
measurement with the same recipe on a 56M-parameter model of the same family (random weights, no
SFT, 3 steps): there the saved state is hundreds of MB.

    python benchmarks/lora_vs_full.py [--steps 60] [--out runs/bench-lora]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from common import emit

CHILD = """
import json, resource, sys, time
import torch
from rlxf.config import load_config
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


def child(overrides: list[str]) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", CHILD, *overrides], capture_output=True, text=True, env=env, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not lines:
        raise SystemExit(f"run {overrides} failed:\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def sft_policy(out: Path) -> Path:
    """The default recipe's SFT warm-up, saved as the step-0 checkpoint of a zero-step RL run."""
    child([f"run_dir={out / 'sft'}", "train.steps=0", "logging.progress_bar=false", "logging.sinks=[jsonl]"])
    return out / "sft" / "checkpoints" / "step_000000" / "policy"


def run(name: str, steps: int, out: Path, start: Path) -> dict:
    result = child([f"run_dir={out / name}", f"model.path={start}", "sft.steps=0", f"train.steps={steps}",
                    f"eval.every={steps}", f"checkpoint.every={steps}", "logging.progress_bar=false",
                    "logging.sinks=[jsonl]", *RUNS[name]])
    return {
        "initial_eval_accuracy": result["initial_eval_accuracy"], "final_eval_accuracy": result["final_eval_accuracy"],
        "gain": result["final_eval_accuracy"] - result["initial_eval_accuracy"],
        "peak_rss_mib": round(result["peak_rss_mib"], 1), "wall_s": round(result["wall_s"], 1), "overrides": RUNS[name],
    }


def at_scale(out: Path) -> dict:
    """Peak RSS of 3 RL steps, full vs LoRA, on a 56M-parameter Llama (hidden 768, 8 layers)."""
    from rlxf.models.tiny import build_tiny_model

    model = build_tiny_model(out / "model-56m", hidden_size=768, num_layers=8, num_heads=12, intermediate_size=2048)
    peaks = {}
    for name in RUNS:
        result = child([f"run_dir={out / ('scale-' + name)}", f"model.path={model}", "sft.steps=0", "train.steps=3",
                        "data.eval_size=16", "eval.every=0", "checkpoint.every=0", "logging.progress_bar=false",
                        "logging.sinks=[jsonl]", *RUNS[name]])
        peaks[name] = round(result["peak_rss_mib"], 1)
    return {"parameters": "56M", "steps": 3, "peak_rss_mib": peaks,
            "lora_over_full_peak_rss": round(peaks["lora"] / peaks["full"], 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--out", default="runs/bench-lora")
    args = parser.parse_args()
    start = sft_policy(Path(args.out))
    results = {name: run(name, args.steps, Path(args.out), start) for name in RUNS}
    emit({
        "recipe": "default", "steps": args.steps, "runs": results,
        "lora_over_full": {
            "peak_rss": round(results["lora"]["peak_rss_mib"] / results["full"]["peak_rss_mib"], 3),
            "gain_difference": round(results["lora"]["gain"] - results["full"]["gain"], 3),
        },
        "at_scale": at_scale(Path(args.out)),
    })


if __name__ == "__main__":
    main()
