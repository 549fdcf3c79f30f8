"""Reading run directories for the studio: the run list, curves, stage times, alarms, logged rollouts.

A run is any folder under the studio's runs directory (one or two levels down) that holds
``metrics.jsonl`` or, before its first step (an SFT warm-up), ``config.yaml``. Its status: ``finished``
once ``summary.json`` exists (``stopped`` when it says ``stopped_by``: a run ended by a signal), ``running`` while ``metrics.jsonl`` (or ``config.yaml`` before it) changed in
the last ``RUNNING_SECONDS``, else ``stopped``. Only the files a run
writes are read (``metrics.jsonl``, ``summary.json``, ``samples.jsonl`` and its rotated
``samples.1.jsonl``), and only runs found by listing are served: a name from a request never becomes a
path by itself.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from rlxf.studio import limits
from rlxf.studio.limits import InputError
from rlxf.tracking.plot import read_run, stage_seconds
from rlxf.tracking.samples import SampleLog

RUNNING_SECONDS = 120
SUMMARY_KEYS = ("reward/mean", "eval/accuracy", "policy/kl", "policy/approx_kl", "train/loss")


def find_runs(runs_dir: Path) -> dict[str, Path]:
    """``{name: folder}`` of every run under ``runs_dir`` (names are paths relative to it)."""
    root = Path(runs_dir)
    patterns = ("*/metrics.jsonl", "*/*/metrics.jsonl", "*/config.yaml", "*/*/config.yaml")
    found = sorted({p.parent for pattern in patterns for p in root.glob(pattern)})
    return {str(folder.relative_to(root)): folder for folder in found}


def run_folder(runs_dir: Path, name: str) -> Path:
    runs = find_runs(runs_dir)
    if name not in runs:
        raise InputError(f"no run named {name[:100]!r} under the studio's runs directory")
    return runs[name]


def read_rows(folder: Path) -> list[dict]:
    """``metrics.jsonl``'s rows; none yet before a run's first step."""
    return read_run(folder) if (folder / "metrics.jsonl").exists() else []


def last_written(folder: Path) -> float:
    newest = folder / "metrics.jsonl" if (folder / "metrics.jsonl").exists() else folder / "config.yaml"
    return newest.stat().st_mtime


def run_status(folder: Path) -> str:
    summary = folder / "summary.json"
    if summary.exists():  # a run stopped by a signal writes one too, with ``stopped_by``
        try:
            stopped = bool(json.loads(summary.read_text()).get("stopped_by"))
        except (OSError, ValueError, AttributeError):  # being written, or not a run's summary
            stopped = False
        return "stopped" if stopped else "finished"
    if time.time() - last_written(folder) < RUNNING_SECONDS:
        return "running"
    return "stopped"


def run_overview(name: str, folder: Path) -> dict:
    rows = read_rows(folder)
    last = rows[-1] if rows else {}
    latest = {k: next((r[k] for r in reversed(rows) if r.get(k) is not None), None) for k in SUMMARY_KEYS}
    return {"name": name, "status": run_status(folder), "steps": last.get("step", 0), "latest": latest,
            "alarms": [r["step"] for r in rows if r.get("monitor/alarm")],
            "modified": last_written(folder)}


def list_runs(runs_dir: Path) -> list[dict]:
    return sorted((run_overview(n, f) for n, f in find_runs(runs_dir).items()), key=lambda r: -r["modified"])


def run_detail(runs_dir: Path, name: str, since_step: int = -1) -> dict:
    """The overview, the metric rows after ``since_step`` (the page asks for new rows only while a run
    trains), the mean seconds per stage and ``summary.json`` when the run has finished."""
    folder = run_folder(runs_dir, name)
    rows = read_rows(folder)
    summary = folder / "summary.json"
    return {**run_overview(name, folder), "rows": [r for r in rows if r.get("step", 0) > since_step],
            "stage_seconds": stage_seconds(rows), "summary": json.loads(summary.read_text()) if summary.exists() else None}


@dataclass(frozen=True)
class SampleFilter:
    step_min: int | None = None
    step_max: int | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    alarm_steps_only: bool = False
    truncated_only: bool = False
    offset: int = 0
    limit: int = 50

    def keeps(self, row: dict, alarm_steps: set[int]) -> bool:
        step, reward = row.get("step", 0), row.get("reward")
        return ((self.step_min is None or step >= self.step_min) and (self.step_max is None or step <= self.step_max)
                and (self.reward_min is None or (reward is not None and reward >= self.reward_min))
                and (self.reward_max is None or (reward is not None and reward <= self.reward_max))
                and (not self.alarm_steps_only or step in alarm_steps)
                and (not self.truncated_only or bool(row.get("truncated"))))


def run_samples(runs_dir: Path, name: str, keep: SampleFilter) -> dict:
    """Logged rollouts of the run that pass ``keep``: ``total`` matches and one page of ``rows``."""
    folder = run_folder(runs_dir, name)
    alarms = {r["step"] for r in read_rows(folder) if r.get("monitor/alarm")}
    rows = [r for r in SampleLog(folder / "samples.jsonl", max_mb=1).rows() if keep.keeps(r, alarms)]
    limit = max(1, min(keep.limit, limits.MAX_SAMPLE_ROWS))
    steps = sorted({r.get("step", 0) for r in rows})
    return {"total": len(rows), "steps": steps, "rows": rows[keep.offset: keep.offset + limit]}
