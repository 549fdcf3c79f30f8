"""``summary.json``: the run's outcome in a few numbers."""

from __future__ import annotations

import json
from pathlib import Path

from rlxf.disk_space import folder_bytes
from rlxf.tracking.peak_memory import peak_rss_mb
from rlxf.train.checkpoint import checkpoint_dir, finished_checkpoints, latest_checkpoint


def write_summary(run_dir: Path, state, wall_seconds: float, steps: int, extra: dict | None = None) -> dict:
    """``extra`` adds loop-specific entries (the offline loops add their whole first and last evaluation).

    ``final_eval_*`` are figures of the policy at ``steps``. A run stopped by a signal between two
    evaluations has none of that policy: its ``final_eval_*`` are null and its last evaluation is given as
    ``last_eval_accuracy`` at ``last_eval_step`` (an earlier policy's), never under the final name."""
    final = state.last_eval_step is None or state.last_eval_step == steps
    summary = {
        "initial_eval_accuracy": state.initial_eval_accuracy,
        "final_eval_accuracy": state.last_eval.get("eval/accuracy") if final else None,
        "final_eval_reward": state.last_eval.get("eval/reward") if final else None,
        **({} if final else {"last_eval_accuracy": state.last_eval.get("eval/accuracy"),
                             "last_eval_step": state.last_eval_step}),
        "best_eval_accuracy": state.best_eval_accuracy,
        "best_eval_step": state.best_eval_step,
        "final_checkpoint": _path_or_none(latest_checkpoint(run_dir)),
        "best_checkpoint": None if state.best_eval_step is None else
        _path_or_none(checkpoint_dir(run_dir, state.best_eval_step)),
        "steps": steps,
        "wall_seconds": round(wall_seconds, 2),
        "peak_rss_mb": peak_rss_mb(),  # this process's high-water mark (roles in other processes not counted)
        # the run's footprint on disk when it ended: its whole folder (summary.json aside), and each checkpoint
        "disk_bytes": folder_bytes(run_dir),
        "checkpoint_bytes": {folder.name: folder_bytes(folder) for folder in finished_checkpoints(run_dir)},
        **(extra or {}),
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def _path_or_none(path: Path | None) -> str | None:
    return str(path) if path is not None and path.is_dir() else None
