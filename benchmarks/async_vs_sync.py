"""``loop: rl`` vs ``loop: rl_async`` (continuous batching, interruptible, bounded staleness) on a
long-tailed response-length distribution.

    .venv/bin/python benchmarks/async_vs_sync.py [--steps 12] [--reps 2] [--max-staleness 1] \\
        [--modes rl:embedded,rl:ray,rl_async:ray] [--model DIR]

The long tail: the ``repeat`` task (``data/repeat.py``): write a two-digit pattern k times; by default
87.5% of the prompts ask for 1-3 repeats (2-6 tokens), 12.5% for 12-24 (24-48 tokens);
``--long-min/--long-max/--long-fraction`` make the tail longer and rarer (e.g. 24-48 repeats, 48-96
tokens, for 6.25% of the prompts, with ``--new 128``). The benchmark first
fine-tunes the tiny model on a teacher that miscounts half of the long answers (``loop: sft``,
``--sft-steps``; skipped with ``--model``), then every mode runs GRPO from that model with the
arithmetic reward (exact answer) on the same prompts, group size, batch, learning rate and steps.
A synchronous step waits for its longest response before training; the asynchronous loop admits the
next batch into the decoder while the long tail finishes and trains in another process.

A mode is ``loop:runtime``. On ``ray`` every role is its own actor (``runtime.placement=disaggregated``,
``--ray-threads`` torch threads each), so the asynchronous producer runs in the rollout actor's
process and overlaps the trainer; on ``process`` the rollout role (and the producer) runs in a child
process and the trainer in this one (``--ray-threads`` threads each); on ``embedded`` everything runs
in this process with ``--threads`` threads.
Modes run alternating, ``--reps`` times each, so background load hits all alike. samples/s counts
trained samples over the summed ``time/step`` of the steps (start-up is excluded in all modes).
``reward_last`` is the mean ``reward/mean`` over the last half of the steps, i.e. after the same
number of samples; ``eval_accuracy`` is the held-out exact-answer accuracy at the end.
``async_over_sync`` divides the first async mode's median samples/s by the best synchronous mode's.
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
from rlxf.checked_config import load_config  # noqa: E402
from rlxf.loops import get_loop  # noqa: E402


def task(args) -> list[str]:
    shape = (f"long_min: {args.long_min}, long_max: {args.long_max}, long_fraction: {args.long_fraction}, "
             f"ramble: {args.ramble}, ramble_repeats: {args.ramble_repeats}")
    return ["data.task=repeat", f"data.task_args={{sloppy_teacher: 0.5, {shape}}}", "data.eval_size=32",
            "reward.function=arithmetic"]


def fine_tune(run_dir: Path, args) -> str:
    """The SFT start every mode shares; returns its policy directory."""
    config = load_config(None, [
        "loop=sft", f"run_dir={run_dir}", f"threads={args.threads}", *task(args), f"sft.steps={args.sft_steps}",
        "sft.batch_size=64", "sft.optim.lr=1e-3", f"rollout.max_new_tokens={args.new}", "eval.every=0",
        f"checkpoint.every={args.sft_steps}", "logging.progress_bar=false", "logging.sinks=[jsonl]",
    ])
    get_loop("sft")(config, write=lambda _: None)
    return str(run_dir / "checkpoints" / f"step_{args.sft_steps:06d}" / "policy")


def run_once(mode: str, run_dir: Path, model: str, args, extra: list[str]) -> dict:
    loop, runtime = mode.split(":")
    config = load_config(None, [
        f"run_dir={run_dir}", f"loop={loop}", f"runtime.kind={runtime}", "runtime.placement=disaggregated",
        f"model.path={model}", *task(args), f"threads={args.threads if runtime == 'embedded' else args.ray_threads}", "sft.steps=0",
        f"rollout.temperature={args.temperature}", f"train.steps={args.steps}",
        f"train.prompts_per_step={args.prompts}", f"rollout.n_samples={args.n}",
        f"train.mini_batch_size={args.prompts * args.n}", f"train.micro_batch_size={args.micro}",
        f"train.micro_batch_tokens={args.micro_tokens or 'null'}",
        f"rollout.max_new_tokens={args.new}", f"eval.every={args.steps}", "checkpoint.every=0",
        "logging.progress_bar=false", "logging.sinks=[jsonl]", f"train.optim.lr={args.lr}", *extra,
    ])
    summary = get_loop(loop)(config, write=lambda _: None)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()][1:]
    seconds = sum(r["time/step"] - r.get("time/eval", 0.0) for r in rows)
    half = rows[len(rows) // 2:]
    return {
        "samples": rows[-1]["samples"],
        "samples_per_second": rows[-1]["samples"] / seconds,
        "reward_last": statistics.mean(r["reward/mean"] for r in half),
        "eval_accuracy": summary["final_eval_accuracy"],
        "length_mean": statistics.mean(r["response/length_mean"] for r in rows),
        "length_max": max(r["response/length_max"] for r in rows),
        "generation_seconds_median": statistics.median(r["time/generation"] for r in rows),
        "train_seconds_median": statistics.median(r["time/train"] for r in rows),
        "staleness_max": max((r.get("async/staleness_max", 0.0) for r in rows), default=0.0),
        "inflight_max": max((r.get("async/inflight_max", 0.0) for r in rows), default=0.0),
        "interruptions": sum(r.get("async/interruptions", 0.0) for r in rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)  # torch threads of the embedded modes
    parser.add_argument("--ray-threads", type=int, default=1)  # torch threads of each Ray actor
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--micro", type=int, default=16)
    parser.add_argument("--micro-tokens", type=int, default=1024)  # train.micro_batch_tokens; 0: by rows
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--long-min", type=int, default=12)  # repeats of a long answer (2 tokens each)
    parser.add_argument("--long-max", type=int, default=24)
    parser.add_argument("--long-fraction", type=float, default=0.125)
    parser.add_argument("--ramble", type=float, default=0.0)  # teacher demonstrations that run on (per sample)
    parser.add_argument("--ramble-repeats", type=int, default=64)
    parser.add_argument("--max-staleness", type=int, default=1)
    parser.add_argument("--queue-size", type=int, default=1)
    parser.add_argument("--chunk-steps", type=int, default=8)
    parser.add_argument("--load-every", type=int, default=1)  # async_rl.load_every
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--sft-steps", type=int, default=300)
    parser.add_argument("--model", default=None, help="start from this policy instead of fine-tuning one")
    parser.add_argument("--runs-dir", default=None, help="keep every run's directory (metrics.jsonl) here")
    parser.add_argument("--modes", default="rl:embedded,rl:ray,rl_async:ray,rl_async:process")
    args = parser.parse_args()
    async_extra = [f"async_rl.max_staleness={args.max_staleness}", f"async_rl.chunk_steps={args.chunk_steps}",
                   f"async_rl.queue_size={args.queue_size}", f"async_rl.load_every={args.load_every}"]
    modes = args.modes.split(",")
    results: dict[str, list[dict]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.runs_dir or scratch
        model = args.model or fine_tune(Path(tmp) / "sft", args)
        for rep in range(args.reps):  # alternating, so background load hits every mode alike
            for mode in modes:
                extra = async_extra if mode.startswith("rl_async") else []
                results[mode].append(run_once(mode, Path(tmp) / f"{mode.replace(':', '_')}{rep}", model, args, extra))
    med = {mode: statistics.median(r["samples_per_second"] for r in runs) for mode, runs in results.items()}
    sync = max((med[m] for m in modes if m.startswith("rl:")), default=None)
    first_async = next((m for m in modes if m.startswith("rl_async")), None)
    emit({
        "settings": vars(args),
        "runs": results,
        "median_samples_per_second": med,
        "median_reward_last": {m: statistics.median(r["reward_last"] for r in runs) for m, runs in results.items()},
        "median_eval_accuracy": {m: statistics.median(r["eval_accuracy"] for r in runs) for m, runs in results.items()},
        "async_over_sync": med[first_async] / sync if first_async and sync else None,
    })


if __name__ == "__main__":
    main()
