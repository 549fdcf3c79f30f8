"""A sweep's numbers: per seed initial / final / best held-out metric, mean and standard deviation over
seeds, the worst seed's gain, as JSON, a markdown table and a PNG of the curves with a band.

Only finished seeds enter the numbers; a seed cut mid-run (``partial``: it continues when the sweep runs
again), one that failed and one not started yet are listed apart, so a table written while the sweep runs
(each time a seed ends) or rebuilt from disk (``rlxf sweep --report OUT``) never mixes them."""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

from rlxf.sweep.runs import SeedRun
from rlxf.sweep.seed_state import NEW, PARTIAL


def _mean_std(values: list[float]) -> dict:
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0}


def summarize(runs: list[SeedRun], metric: str) -> dict:
    done = [r for r in runs if r.ok]
    rows = [{"seed": r.seed, "initial": r.initial, "final": r.final, "best": r.best[1], "best_step": r.best[0],
             "gain": r.final - r.initial, "steps": r.curve[-1][0], "wall_seconds": round(r.wall_seconds, 1),
             "disk_bytes": r.disk_bytes}
            for r in done]
    out = {
        "metric": metric,
        "seeds": [r.seed for r in runs],
        "per_seed": rows,
        "failed": [{"seed": r.seed, "returncode": r.returncode, "log": str(r.run_dir.parent / f"seed_{r.seed}.log")}
                   for r in runs if not r.ok and r.state not in (PARTIAL, NEW)],
        "partial": [{"seed": r.seed, "checkpoint_step": r.checkpoint_step, "curve": r.curve}
                    for r in runs if r.state == PARTIAL],
        "not_started": [r.seed for r in runs if r.state == NEW],
    }
    out["complete"] = len(rows) == len(runs)
    if rows:
        for key in ("initial", "final", "best", "gain"):
            out[key] = _mean_std([row[key] for row in rows])
        worst = min(rows, key=lambda row: row["gain"])
        out["worst_seed"] = {"seed": worst["seed"], "gain": worst["gain"]}
        out["every_seed_improved"] = all(row["gain"] > 0 for row in rows) and out["complete"]
        out["wall_seconds"] = round(sum(row["wall_seconds"] for row in rows), 1)
        out["disk_bytes"] = sum(row["disk_bytes"] or 0 for row in rows)  # summary.json's disk_bytes, per seed
    return out


def markdown_table(summary: dict) -> str:
    lines = [f"metric: `{summary['metric']}`", "",
             "| seed | initial | final | best (step) | gain | disk (MB) |", "|---|---|---|---|---|---|"]
    for row in summary["per_seed"]:
        disk = "" if row.get("disk_bytes") is None else f"{row['disk_bytes'] / 1e6:,.1f}"
        lines.append(f"| {row['seed']} | {row['initial']:.3f} | {row['final']:.3f} | {row['best']:.3f} "
                     f"({row['best_step']}) | {row['gain']:+.3f} | {disk} |")
    if summary["per_seed"]:
        ms = lambda k: f"{summary[k]['mean']:.3f} ± {summary[k]['std']:.3f}"  # noqa: E731
        lines.append(f"| **mean ± std** | {ms('initial')} | {ms('final')} | {ms('best')} | "
                     f"{summary['gain']['mean']:+.3f} ± {summary['gain']['std']:.3f} | "
                     f"{summary.get('disk_bytes', 0) / 1e6:,.1f} |")
        lines += ["", f"worst seed: {summary['worst_seed']['seed']} (gain {summary['worst_seed']['gain']:+.3f}); "
                      f"every seed improved: {summary['every_seed_improved']}"]
    for failed in summary["failed"]:
        lines.append(f"seed {failed['seed']} failed (exit {failed['returncode']}): see {failed['log']}")
    for cut in summary.get("partial", []):
        latest = f"; {summary['metric']} {cut['curve'][-1][1]:.3f} at step {cut['curve'][-1][0]}" if cut["curve"] else ""
        at = "no checkpoint yet" if cut["checkpoint_step"] is None else f"last checkpoint at step {cut['checkpoint_step']}"
        lines.append(f"seed {cut['seed']} not finished ({at}{latest}): the same rlxf sweep continues it")
    if summary.get("not_started"):
        lines.append(f"not started yet: seed {', '.join(map(str, summary['not_started']))}")
    return "\n".join(lines) + "\n"


RECIPES_HEADER = ("| recipe | metric | steps | start (mean) | final (mean) | gain, mean ± std | worst seed's gain |\n"
                  "|---|---|---|---|---|---|---|")


def recipe_row(label: str, summary: dict) -> str:
    """One line of the every-recipe table (docs/algorithms.md) from a sweep's ``sweep.json``."""
    steps = sorted({row["steps"] for row in summary["per_seed"]})
    failed = f" ({len(summary['failed'])} seeds failed)" if summary["failed"] else ""
    return (f"| {label} | `{summary['metric']}` | {'/'.join(map(str, steps))} | {summary['initial']['mean']:.3f} | "
            f"{summary['final']['mean']:.3f} | {summary['gain']['mean']:+.3f} ± {summary['gain']['std']:.3f} | "
            f"{summary['worst_seed']['gain']:+.3f} (seed {summary['worst_seed']['seed']}){failed} |")


def plot_band(runs: list[SeedRun], metric: str, out: Path, title: str) -> Path:
    """Each seed's curve thin, the mean over seeds thick, ± one standard deviation shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in runs if r.ok]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    for r in done:
        ax.plot(*zip(*r.curve), color="tab:blue", alpha=0.3, linewidth=1)
    cut = [r for r in runs if r.state == PARTIAL and r.curve]
    for i, r in enumerate(cut):  # not in the mean: its last steps are still to come
        ax.plot(*zip(*r.curve), color="tab:gray", linestyle="--", linewidth=1,
                label=f"not finished ({len(cut)} seeds)" if i == 0 else None)
    steps = sorted({s for r in done for s, _ in r.curve if all(s in dict(x.curve) for x in done)})
    if steps:
        mean = [statistics.fmean(dict(r.curve)[s] for r in done) for s in steps]
        std = [statistics.stdev(dict(r.curve)[s] for r in done) if len(done) > 1 else 0.0 for s in steps]
        ax.plot(steps, mean, color="tab:blue", linewidth=2.5, label=f"mean of {len(done)} seeds")
        ax.fill_between(steps, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)],
                        color="tab:blue", alpha=0.15, label="± 1 std")
    ax.set_xlabel("step")
    ax.set_ylabel(metric)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out


def write_report(out: Path, runs: list[SeedRun], metric: str, title: str, plot: bool = True) -> tuple[dict, str]:
    """``sweep.json``, ``sweep.md`` and (with a finished or partial curve, and ``plot``) ``sweep.png`` in ``out``,
    each written whole under a temporary name and renamed: a reader never sees half a report."""
    summary = summarize(runs, metric)
    table = markdown_table(summary)
    _replace(out / "sweep.json", json.dumps(summary, indent=1) + "\n")
    _replace(out / "sweep.md", table)
    if plot and any(r.ok or r.state == PARTIAL and r.curve for r in runs):
        staging = out / ".sweep.tmp.png"
        plot_band(runs, metric, staging, title)
        os.replace(staging, out / "sweep.png")
    return summary, table


def _replace(path: Path, text: str) -> None:
    staging = path.with_name(f".{path.name}.tmp")
    staging.write_text(text)
    os.replace(staging, path)
