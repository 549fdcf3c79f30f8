"""Free space checked before rlxf writes something big (a checkpoint, a model into its cache), so that a write
that cannot fit stops with one line naming the folder, what it needs and what is free, before it fills the disk
for everything else on the machine that writes (the shell, git, trackers, the other seeds of a sweep).

:func:`free_bytes` is the one place that asks the file system (tests replace it); a leaf, so any layer may
check before it writes.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from rlxf.errors import RlxfError

MARGIN_FRACTION = 0.05  # the estimate's own error (file headers, the JSON beside the tensors)
HEADROOM_BYTES = 256 * 2**20  # left free after the write, for everything else on the machine


class DiskSpaceError(RlxfError, OSError):
    """Not enough free space for a write rlxf was about to start; nothing was written."""


def free_bytes(path: str | Path) -> int:
    """Free bytes (for this user) of the file system ``path`` is on, or will be on once created: the
    nearest folder of it that exists is asked."""
    folder = Path(path).absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return shutil.disk_usage(folder).free


def folder_bytes(path: str | Path) -> int:
    """Bytes of the files under ``path`` (links not followed; 0 when it does not exist)."""
    root = Path(path)
    if root.is_file():
        return root.stat().st_size
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:  # removed meanwhile (rotation, another process): not there to count
                pass
    return total


def required_bytes(estimate: int) -> int:
    """Free space a write of about ``estimate`` bytes asks for: the estimate, its margin, and the headroom."""
    return int(estimate * (1 + MARGIN_FRACTION)) + HEADROOM_BYTES


def space_shortfall(folder: str | Path, estimate: int) -> tuple[int, int] | None:
    """``(needed, free)`` when a write of about ``estimate`` bytes into ``folder`` does not fit, else None."""
    needed, free = required_bytes(estimate), free_bytes(folder)
    return (needed, free) if free < needed else None


def check_free_space(folder: str | Path, estimate: int, what: str) -> None:
    """Raise :class:`DiskSpaceError` naming ``what``, ``folder``, the need and the free space when a write of
    about ``estimate`` bytes would not fit."""
    short = space_shortfall(folder, estimate)
    if short:
        raise DiskSpaceError(f"not enough free space to write {what} in {folder}: {shortfall_text(estimate, *short)}")


def shortfall_text(estimate: int, needed: int, free: int) -> str:
    return (f"it needs {human_bytes(needed)} ({human_bytes(estimate)} plus a {MARGIN_FRACTION:.0%} margin and "
            f"{human_bytes(HEADROOM_BYTES)} left free), {human_bytes(free)} is free")


def human_bytes(count: float) -> str:
    """Decimal units, as ``df -H`` and file managers say them: 538 MB, 1.6 GB."""
    for unit in ("B", "kB", "MB", "GB"):
        if abs(count) < 1000:
            return f"{count:.0f} {unit}" if unit == "B" or abs(count) >= 100 else f"{count:.1f} {unit}"
        count /= 1000
    return f"{count:.1f} TB"
