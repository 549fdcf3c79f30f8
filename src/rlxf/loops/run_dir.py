"""Preparing a run directory: a fresh run never overwrites an earlier one."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path


def prepare_run_dir(run_dir: Path, resume: bool, write: Callable[[str], None]) -> None:
    if not resume and run_dir.exists() and any(run_dir.iterdir()):
        moved = run_dir.with_name(f"{run_dir.name}.old-{time.strftime('%Y%m%d-%H%M%S')}")
        shutil.move(str(run_dir), moved)
        write(f"moved the previous run in {run_dir} to {moved}")
    run_dir.mkdir(parents=True, exist_ok=True)
