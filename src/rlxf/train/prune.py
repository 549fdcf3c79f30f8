"""``rlxf prune RUNS_DIR``: what can be dropped under a folder of runs, with its size; ``--apply`` drops it.

Only finished runs are touched (``summary.json`` written after their last metrics line, and not by a stop
signal). Of each: the checkpoints past its keep rules (the newest ``checkpoint.keep_last`` and the best one, read
from the run's ``config.yaml`` and ``summary.json``), a checkpoint write that never finished (``step_N.tmp``),
and what only continued training reads (optimizer state, critic) in every checkpoint but the last, which stays
resumable. A run that is still going, was stopped or was killed may resume from any of its checkpoints: it is
left alone. Each size is what dropping the item frees, to the byte.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

from rlxf.disk_space import folder_bytes
from rlxf.train.checkpoint import (
    CHECKPOINTS,
    checkpoint_step,
    drop_training_state,
    finished_checkpoints,
    weights_only_savings,
)


@dataclass(frozen=True)
class Droppable:
    path: Path  # a checkpoint folder
    why: str
    bytes: int
    whole: bool  # the whole folder goes, else only its training-only files


def run_dirs(root: Path) -> list[Path]:
    """Every folder under ``root`` (``root`` included) that holds a run's checkpoints."""
    found = [root] if (root / CHECKPOINTS).is_dir() else []
    return found + sorted(p.parent for p in root.rglob(CHECKPOINTS) if p.is_dir() and p.parent != root)


def is_finished(run_dir: Path) -> bool:
    """The run reached its last step: a summary not written by a stop signal, and no step past the summary's
    (a run resumed since, with more steps, logs or checkpoints them)."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return False
    steps = summary.get("steps")
    if "stopped_by" in summary or not isinstance(steps, int):
        return False
    written = [int(p.name.removeprefix("step_").removesuffix(".tmp")) for p in (run_dir / CHECKPOINTS).glob("step_*")]
    return max(written, default=0) <= steps and last_logged_step(run_dir / "metrics.jsonl") <= steps


def last_logged_step(metrics: Path) -> int:
    """The step of the last row of ``metrics.jsonl`` (0 when there is none)."""
    try:
        with metrics.open("rb") as handle:
            handle.seek(max(0, metrics.stat().st_size - 65536))
            rows = handle.read().decode(errors="replace").splitlines()
    except OSError:
        return 0
    for row in reversed(rows):
        try:
            return int(json.loads(row)["step"])
        except (ValueError, KeyError, TypeError):
            continue
    return 0


def droppable(run_dir: Path) -> list[Droppable]:
    """What a finished run can lose (see the module's docstring)."""
    try:
        settings = (yaml.safe_load((run_dir / "config.yaml").read_text()) or {}).get("checkpoint", {})
        best_step = json.loads((run_dir / "summary.json").read_text()).get("best_eval_step")
    except (OSError, ValueError, AttributeError):
        return []  # not a run rlxf wrote: nothing is judged droppable
    keep_last, keep_best = int(settings.get("keep_last", 2)), bool(settings.get("keep_best", True))
    done = finished_checkpoints(run_dir)
    kept = set(done[-keep_last:]) | {c for c in done if keep_best and checkpoint_step(c) == best_step}
    items = [Droppable(tmp, "a checkpoint write that never finished", folder_bytes(tmp), True)
             for tmp in sorted((run_dir / CHECKPOINTS).glob("step_*.tmp")) if tmp.is_dir()]
    for checkpoint in done:
        if checkpoint not in kept:
            items.append(Droppable(checkpoint, f"past checkpoint.keep_last={keep_last}"
                                   + (" and not the best" if keep_best else ""), folder_bytes(checkpoint), True))
        elif checkpoint != done[-1] and weights_only_savings(checkpoint):
            items.append(Droppable(checkpoint, "optimizer state (the policy weights stay)",
                                   weights_only_savings(checkpoint), False))
    return items


def prune_plan(root: Path) -> tuple[list[Droppable], list[Path]]:
    """(what can be dropped under ``root``, the runs left alone because they are not finished)."""
    items, unfinished = [], []
    for run_dir in run_dirs(root):
        if is_finished(run_dir):
            items += droppable(run_dir)
        else:
            unfinished.append(run_dir)
    return items, unfinished


def drop(items: list[Droppable]) -> int:
    """Drop ``items``; the bytes freed."""
    freed = 0
    for item in items:
        if item.whole:
            freed += folder_bytes(item.path)
            shutil.rmtree(item.path)
        else:
            freed += drop_training_state(item.path)
    return freed
