"""``rlxf plot RUN_DIR [RUN_DIR ...]``: one PNG of the curves a practitioner reads first.

Panels: reward and its components, held-out accuracy, KL to the reference (or the PPO approximate KL
when the run has no reference), entropy, response length, clip fraction, and where each step's time
goes. Several runs are overlaid, one colour per run (named by its directory); steps where the
reward-hacking monitor raised its alarm are marked by a red vertical line on every curve panel.
Reads only ``metrics.jsonl``, so it works on a run that is still going.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Panel:
    title: str
    ylabel: str
    keys: tuple[str, ...]  # the first key found in a run is drawn solid, the others dashed / dotted
    prefix: str | None = None  # also draw every other metric under this prefix (reward components)
    first_found_only: bool = False  # draw only the first key the run has (alternatives, not a set)


PANELS = (
    Panel("Reward (train samples)", "mean reward", ("reward/mean",), prefix="reward/"),
    Panel("Held-out accuracy", "accuracy (greedy)", ("eval/accuracy",)),
    Panel("KL", "KL per token", ("policy/kl", "policy/approx_kl"), first_found_only=True),
    Panel("Entropy", "nats per token", ("policy/entropy",)),
    Panel("Response length", "tokens", ("response/length_mean",)),
    Panel("Clip fraction", "fraction of tokens", ("policy/clip_fraction",)),
)
STYLES = ("-", "--", ":", "-.")
TIME_PREFIX = "time/"
SKIPPED_STAGES = ("time/step", "time/weight_sync_seconds")  # the total, and a duplicate of weight_sync


def read_run(run_dir: Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{run_dir}: no metrics.jsonl (is it a run directory?)")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_names(run_dirs: list[Path]) -> list[str]:
    """Each run's directory name, or parent/name where two runs share a name."""
    names = [Path(d).resolve().name for d in run_dirs]
    return [f"{Path(d).resolve().parent.name}/{n}" if names.count(n) > 1 else n for d, n in zip(run_dirs, names)]


def series(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    points = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
    return [p[0] for p in points], [p[1] for p in points]


def panel_keys(panel: Panel, rows: list[dict]) -> list[str]:
    logged = list(dict.fromkeys(k for r in rows for k in r))
    keys = [k for k in panel.keys if k in logged]
    if panel.first_found_only:
        return keys[:1]
    if panel.prefix:
        keys += [k for k in logged if k.startswith(panel.prefix) and k not in keys]
    return keys


def stage_seconds(rows: list[dict]) -> dict[str, float]:
    """Mean seconds per RL step of each timed stage (steps >= 1)."""
    steps = [r for r in rows if r["step"] > 0]
    stages = sorted({k for r in steps for k in r if k.startswith(TIME_PREFIX) and k not in SKIPPED_STAGES})
    return {s.removeprefix(TIME_PREFIX): sum(r.get(s) or 0.0 for r in steps) / max(len(steps), 1) for s in stages}


def plot_runs(run_dirs: list[Path], out: Path) -> Path:
    """Draw the runs in ``run_dirs`` into the PNG ``out``; returns ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [read_run(d) for d in run_dirs]
    names = run_names(run_dirs)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, axes = plt.subplots(2, 4, figsize=(20, 9), constrained_layout=True)
    flat = axes.ravel()
    for ax, panel in zip(flat, PANELS):
        _draw_panel(ax, panel, runs, names, colors)
    stage_handles = _draw_stage_times(flat[len(PANELS)], runs, names)
    legend_ax = flat[-1]  # the last panel holds the legends: runs (colours), then stages (bar segments)
    legend_ax.axis("off")
    handles = [plt.Line2D([], [], color=colors[i % len(colors)], lw=2.5, label=n) for i, n in enumerate(names)]
    handles.append(plt.Line2D([], [], color="red", alpha=0.35, lw=1.2, label="monitor alarm"))
    runs_legend = legend_ax.legend(handles=handles, loc="upper center", title="runs", fontsize=12,
                                   title_fontsize=13, frameon=False)
    if stage_handles:
        legend_ax.add_artist(runs_legend)
        legend_ax.legend(handles=stage_handles, loc="lower center", title="stages (bar segments)", ncols=2,
                         fontsize=10, title_fontsize=11, frameon=False)
    fig.suptitle("rlxf: " + ", ".join(names), fontsize=14)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return out


def _draw_panel(ax, panel: Panel, runs: list[list[dict]], names: list[str], colors: list[str]) -> None:
    """Colour = run, line style = metric (one style per key over all runs, explained in the panel's legend)."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    keys_of = [panel_keys(panel, rows) for rows in runs]
    keys = list(dict.fromkeys(k for run_keys in keys_of for k in run_keys))
    style = {k: STYLES[i % len(STYLES)] for i, k in enumerate(keys)}
    for i, (rows, run_keys) in enumerate(zip(runs, keys_of)):
        for key in run_keys:
            steps, values = series(rows, key)
            ax.plot(steps, values, style[key], color=colors[i % len(colors)], lw=1.8,
                    marker="o" if len(steps) < 12 else None, markersize=4)
        for step in (r["step"] for r in rows if r.get("monitor/alarm")):
            ax.axvline(step, color="red", alpha=0.35, lw=1.2)
    ax.set_title(panel.title)
    ax.set_xlabel("step")
    ax.set_ylabel(panel.ylabel)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    if not keys:
        ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes, color="gray")
    elif len(keys) > 1 or len(runs) == 1:
        ax.legend(handles=[Line2D([], [], color="black", ls=style[k], label=k) for k in keys], fontsize=8, loc="best")


def _draw_stage_times(ax, runs: list[list[dict]], names: list[str]) -> list:
    """One horizontal bar per run, split into its stages' mean seconds per step; returns the legend handles."""
    per_run = [stage_seconds(rows) for rows in runs]
    stages = sorted({s for seconds in per_run for s in seconds}, key=lambda s: -sum(p.get(s, 0) for p in per_run))
    ax.set_title("Where a step's time goes")
    ax.set_xlabel("mean seconds per step")
    if not stages:
        ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes, color="gray")
        return []
    import matplotlib.pyplot as plt

    stage_colors = plt.get_cmap("tab20").colors
    handles = []
    for j, stage in enumerate(stages):
        left = [sum(p.get(s, 0.0) for s in stages[:j]) for p in per_run]
        handles.append(ax.barh(range(len(runs)), [p.get(stage, 0.0) for p in per_run], left=left, label=stage,
                               height=0.6, color=stage_colors[j % len(stage_colors)]))
    ax.set_yticks(range(len(runs)), names)
    ax.invert_yaxis()
    return handles
