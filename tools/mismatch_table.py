"""The rollout/trainer mismatch table of sweeps that differ only in their correction mode.

    python tools/mismatch_table.py runs/sweeps/mismatch_bf16/none runs/sweeps/mismatch_bf16/tis ...

Each argument is an ``rlxf sweep --out`` folder (its name is the row's label). Per seed it reads
``metrics.jsonl``: the held-out metric's first and last value, and over the training steps the mean of
``policy/rollout_log_prob_diff`` (mean |d|, d = trainer - rollout log-prob of a sampled token), the largest
``policy/rollout_log_prob_diff_max``, the mean ``policy/rollout_kl_k3`` and the mean fractions of loss
tokens masked by a rollout mask or truncated by TIS. Prints JSON, then a markdown table of per-mode means
with every seed's gain.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

STEP_MEANS = {
    "diff_mean": "policy/rollout_log_prob_diff",
    "kl_k3": "policy/rollout_kl_k3",
    "masked": "policy/rollout_masked_fraction",
    "truncated": "policy/rollout_truncated_fraction",
}
STEP_MAXES = {"diff_max": "policy/rollout_log_prob_diff_max"}


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def seed_summary(run: Path, metric: str) -> dict:
    rows = read_rows(run / "metrics.jsonl")
    held_out = [row[metric] for row in rows if metric in row]
    if not held_out:
        raise SystemExit(f"{run}: no {metric!r} in metrics.jsonl")
    summary = {"initial": held_out[0], "final": held_out[-1], "gain": held_out[-1] - held_out[0]}
    for name, key in STEP_MEANS.items():
        values = [row[key] for row in rows if key in row]
        summary[name] = statistics.fmean(values) if values else None
    for name, key in STEP_MAXES.items():
        values = [row[key] for row in rows if key in row]
        summary[name] = max(values) if values else None
    return summary


# how a column goes over the seeds: the mean, except the step maxima, which are the largest of any seed
COLUMN_REDUCTIONS = {name: max for name in STEP_MAXES}


def mode_summary(sweep: Path, metric: str) -> dict:
    seeds = {run.name: seed_summary(run, metric) for run in sorted(sweep.glob("seed_*")) if run.is_dir()}
    if not seeds:
        raise SystemExit(f"{sweep}: no seed_* runs")
    columns = next(iter(seeds.values())).keys()
    means = {}
    for column in columns:
        values = [s[column] for s in seeds.values() if s[column] is not None]
        reduce = COLUMN_REDUCTIONS.get(column, statistics.fmean)
        means[column] = reduce(values) if values else None
    return {"mode": sweep.name, "seeds": seeds, "mean": means,
            "every_seed_improved": all(s["gain"] > 0 for s in seeds.values())}


def _fmt(value, digits: str) -> str:
    return "-" if value is None else format(value, digits)


def markdown(modes: list[dict]) -> str:
    lines = ["| mode | initial | final | gains per seed | mean abs d | max abs d | KL k3 | masked | truncated |",
             "|---|---|---|---|---|---|---|---|---|"]
    for mode in modes:
        m = mode["mean"]
        gains = " / ".join(f"{s['gain']:+.2f}" for s in mode["seeds"].values())
        lines.append(f"| `{mode['mode']}` | {m['initial']:.3f} | {m['final']:.3f} | {gains} | "
                     f"{_fmt(m['diff_mean'], '.4f')} | {_fmt(m['diff_max'], '.2f')} | {_fmt(m['kl_k3'], '.2e')} | "
                     f"{_fmt(m['masked'], '.4f')} | {_fmt(m['truncated'], '.4f')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", nargs="+", type=Path)
    parser.add_argument("--metric", default="eval/accuracy")
    args = parser.parse_args(argv)
    modes = [mode_summary(sweep, args.metric) for sweep in args.sweeps]
    print(json.dumps(modes, indent=1))
    print(markdown(modes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
