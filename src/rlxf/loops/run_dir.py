"""Preparing a run directory: a fresh run never overwrites an earlier one, and a folder that cannot be
written is one ``rlxf:`` line naming it, before anything is built."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from rlxf.config import ConfigError


def prepare_run_dir(run_dir: Path, resume: bool, write: Callable[[str], None]) -> None:
    check_writable_dir(run_dir, "run_dir")
    if not resume and run_dir.exists() and any(run_dir.iterdir()):
        moved = run_dir.with_name(f"{run_dir.name}.old-{time.strftime('%Y%m%d-%H%M%S')}")
        try:
            os.rename(run_dir, moved)  # one rename: it happens whole or not at all
        except OSError as err:
            raise ConfigError(f"run_dir {run_dir}: the previous run there cannot be moved aside to {moved} "
                              f"({err.strerror or err}); choose another run_dir") from None
        write(f"moved the previous run in {run_dir} to {moved}")
    writable_dir(run_dir, "run_dir")


def check_writable_dir(folder: Path, key: str) -> None:
    """Refuse, creating nothing, a folder that cannot be made or written: it is a file, a file stands
    where one of its parents should be, or the nearest existing parent (or itself) is read-only."""
    existing = next((p for p in (folder, *folder.parents) if p.exists()), None)
    if existing is None:
        return
    if not existing.is_dir():
        where = "it is a file" if existing == folder else f"{existing} is a file, not a folder"
        raise ConfigError(f"{key} {folder}: cannot be a folder ({where}); choose another {key}")
    if not os.access(existing, os.W_OK | os.X_OK):
        what = "it is" if existing == folder else f"its parent {existing} is"
        raise ConfigError(f"{key} {folder}: cannot be written ({what} read-only or not ours); choose another {key}")


def writable_dir(folder: Path, key: str) -> Path:
    """``folder``, created with its parents; an ``OSError`` on the way (read-only, a file in the way, no
    space) is one ConfigError naming the folder and ``key``."""
    check_writable_dir(folder, key)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"{key} {folder}: cannot be created ({err.strerror or err}); choose another {key}") from None
    return folder
