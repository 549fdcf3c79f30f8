"""``loop: rl`` vs ``loop: rl_async`` (interruptible, bounded staleness) on a long-tailed length distribution.

    .venv/bin/python benchmarks/async_vs_sync.py [--steps 8] [--reps 2] [--threads 1] [--max-staleness 1] \
        [--modes rl:embedded,rl:ray,rl_async:ray,rl_async:embedded]

A mode is ``loop:runtime``. On ``ray`` every role is its own actor (``runtime.placement=disaggregated``),
so the asynchronous producer runs in the rollout actor's process and overlaps the trainer's; on
``embedded`` it is a thread of the trainer's process. ``async_over_sync`` divides the first async
mode's median samples/s by the best synchronous mode's.

The long tail: the untrained tiny model (``--sft-steps 0``) over a character vocabulary ends a response with
probability about 1/vocab per token, so response lengths are roughly geometric and a few rows of
every batch run to ``--new`` tokens; a synchronous step waits for the longest row before training.
Both loops run the same recipe (GRPO, ``--prompts`` x ``--n`` samples per step) in this process,
alternating (rl, rl_async, rl, rl_async, ...) so background load hits both alike. samples/s counts
trained samples over the summed ``time/step`` of the steps (start-up and the first evaluation are
excluded in both). ``reward_last`` is the mean ``reward/mean`` over the last half of the steps,
i.e. after the same number of samples; the default reward is ``brevity`` (below).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import emit  # noqa: E402
from rlxf.config import load_config  # noqa: E402
from rlxf.loops import get_loop  # noqa: E402


def brevity(prompts, responses, metadata) -> list[float]:
    """``--reward brevity``: 1 - length / 64 characters. The untrained model gets a signal from its
    first step (the arithmetic reward is 0 for every row), and learning to stop keeps the tail."""
    return [1.0 - min(len(r), 64) / 64 for r in responses]


def run_once(mode: str, run_dir: Path, args, extra: list[str]) -> dict:
    loop, runtime = mode.split(":")
    config = load_config(None, [
        f"run_dir={run_dir}", f"loop={loop}", f"runtime.kind={runtime}", "runtime.placement=disaggregated", f"threads={args.threads}", f"sft.steps={args.sft_steps}", f"rollout.temperature={args.temperature}", f"train.steps={args.steps}",
        f"train.prompts_per_step={args.prompts}", f"rollout.n_samples={args.n}",
        f"train.mini_batch_size={args.prompts * args.n}", f"train.micro_batch_size={args.prompts * args.n}",
        f"rollout.max_new_tokens={args.new}", "data.eval_size=16", "eval.every=0", "checkpoint.every=0",
        "logging.progress_bar=false", "logging.sinks=[jsonl]", f"train.optim.lr={args.lr}",
        *([] if args.reward == "arithmetic" else ["reward.function=async_vs_sync:brevity"]), *extra,
    ])
    get_loop(loop)(config, write=lambda _: None)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()][1:]
    seconds = sum(r["time/step"] for r in rows)
    half = rows[len(rows) // 2:]
    return {
        "samples": rows[-1]["samples"],
        "samples_per_second": rows[-1]["samples"] / seconds,
        "reward_last": statistics.mean(r["reward/mean"] for r in half),
        "length_mean": statistics.mean(r["response/length_mean"] for r in rows),
        "length_max": max(r["response/length_max"] for r in rows),
        "truncated_fraction": statistics.mean(r["response/truncated_fraction"] for r in rows),
        "staleness_max": max((r.get("async/staleness_max", 0.0) for r in rows), default=0.0),
        "interruptions": sum(r.get("async/interruptions", 0.0) for r in rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--max-staleness", type=int, default=1)
    parser.add_argument("--sft-steps", type=int, default=0)  # >0: a model that stops early (short tail)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--reward", choices=["brevity", "arithmetic"], default="brevity")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--chunk-steps", type=int, default=8)
    parser.add_argument("--queue-size", type=int, default=1)
    parser.add_argument("--modes", default="rl:embedded,rl:ray,rl_async:ray")
    args = parser.parse_args()
    async_extra = [f"async_rl.max_staleness={args.max_staleness}", f"async_rl.chunk_steps={args.chunk_steps}",
                   f"async_rl.queue_size={args.queue_size}"]
    modes = args.modes.split(",")
    results: dict[str, list[dict]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):  # alternating, so background load hits every mode alike
            for mode in modes:
                extra = async_extra if mode.startswith("rl_async") else []
                results[mode].append(run_once(mode, Path(tmp) / f"{mode.replace(':', '_')}{rep}", args, extra))
    med = {mode: statistics.median(r["samples_per_second"] for r in runs) for mode, runs in results.items()}
    sync = max(med[m] for m in modes if m.startswith("rl:"))
    first_async = next(m for m in modes if m.startswith("rl_async"))
    reward = {mode: statistics.median(r["reward_last"] for r in runs) for mode, runs in results.items()}
    emit({
        "settings": vars(args),
        "runs": results,
        "median_samples_per_second": med,
        "median_reward_last": reward,
        "async_over_sync": med[first_async] / sync,
    })


if __name__ == "__main__":
    main()
