"""Preparing a run directory: a fresh run never overwrites an earlier one, and a run that fails (or is
stopped) before its first checkpoint leaves the folder as it found it.

A fresh run in a folder that holds an earlier run moves that run aside (``RUN.old-<time>``). Until the
new run has written its first checkpoint, :class:`RunFolder` can undo that: the new run's files are
removed and the earlier run is moved back, so a mistake that only shows once the model or the task is
built (a bad task argument, a model folder that does not load, a stop during the SFT warm-up) does not
cost the user a finished run. A folder that cannot be written is one ``rlxf:`` line naming it, before
anything is built or moved.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from rlxf.config import ConfigError


class RunFolder:
    """The run directory as this run found it, until :meth:`keep` says the run has something to keep."""

    def __init__(self, run_dir: Path, existed: bool, moved: Path | None, write: Callable[[str], None]) -> None:
        self.run_dir, self.existed, self.moved, self.write = run_dir, existed, moved, write
        self.kept = False

    def keep(self) -> None:
        """The run has a checkpoint: from now on its folder stays, whatever happens."""
        self.kept = True

    def undo(self) -> None:
        """Put the folder back as it was found (nothing of a run without a checkpoint is worth keeping)."""
        if self.kept:
            return
        self.kept = True
        if self.run_dir.exists():
            shutil.rmtree(self.run_dir, ignore_errors=True)
        if self.moved is not None:
            shutil.move(str(self.moved), self.run_dir)
            self.write(f"moved the previous run back from {self.moved} to {self.run_dir}")
        elif self.existed:
            self.run_dir.mkdir(parents=True, exist_ok=True)


def prepare_run_dir(run_dir: Path, resume: bool, write: Callable[[str], None]) -> RunFolder:
    """The run directory, created; on a fresh run an earlier run in it is moved aside first. On a resume
    the folder is already the run's: it is kept as it is whatever happens."""
    check_writable_dir(run_dir, "run_dir")
    existed, moved = run_dir.exists(), None
    if not resume and existed and any(run_dir.iterdir()):
        moved = run_dir.with_name(f"{run_dir.name}.old-{time.strftime('%Y%m%d-%H%M%S')}")
        try:
            os.rename(run_dir, moved)  # one rename: it happens whole or not at all
        except OSError as err:
            raise ConfigError(f"run_dir {run_dir}: the previous run there cannot be moved aside to {moved} "
                              f"({err.strerror or err}); choose another run_dir") from None
        write(f"moved the previous run in {run_dir} to {moved}")
    writable_dir(run_dir, "run_dir")
    folder = RunFolder(run_dir, existed, moved, write)
    if resume:
        folder.keep()
    return folder


def check_writable_dir(folder: Path, key: str) -> None:
    """Refuse, creating nothing, a folder that cannot be made or written: it is a file, a file stands
    where one of its parents should be, or the nearest existing parent (or itself) is read-only."""
    problem = folder_problem(folder)
    if problem:
        raise ConfigError(f"{key} {folder}: {problem}; choose another {key}")


def folder_problem(folder: Path) -> str | None:
    """Why ``folder`` cannot be made or written ("cannot be a folder (it is a file)", ...), or None."""
    existing = next((p for p in (folder, *folder.parents) if p.exists()), None)
    if existing is None:
        return None
    if not existing.is_dir():
        where = "it is a file" if existing == folder else f"{existing} is a file, not a folder"
        return f"cannot be a folder ({where})"
    if not os.access(existing, os.W_OK | os.X_OK):
        what = "it is" if existing == folder else f"its parent {existing} is"
        return f"cannot be written ({what} read-only or not ours)"
    return None


def writable_dir(folder: Path, key: str) -> Path:
    """``folder``, created with its parents; an ``OSError`` on the way (read-only, a file in the way, no
    space) is one ConfigError naming the folder and ``key``."""
    check_writable_dir(folder, key)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"{key} {folder}: cannot be created ({err.strerror or err}); choose another {key}") from None
    return folder
