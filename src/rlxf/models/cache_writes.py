"""Writing into rlxf's cache (models/cache_dir.py): each built folder is staged beside its target and renamed
into place, so no reader ever sees a half-written one.

A write that fails (disk full, a file-size limit, a read-only cache) is one :class:`CacheWriteError` naming what
was being written and where, and its staging folder is removed; a staging folder that a killed build left behind
(``.NAME.pidPID.HOST.XXXXXXXX``, or the older ``.NAME-XXXXXXXX`` / ``.NAME.XXXXXXXX``) is removed by the next
build once its process is gone (or, for the older names that carry no process, after an hour).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rlxf.errors import RlxfError

# An unnamed staging folder is someone's build for at most this long (a 7B GGUF conversion takes minutes).
UNOWNED_STALE_SECONDS = 3600
RANDOM_TAIL = r"[a-z0-9_]{8}"  # what tempfile.mkdtemp appends


class CacheWriteError(RlxfError, OSError):
    """Something rlxf builds in its cache could not be written; nothing half-written was left there."""


def _reason(err: BaseException) -> str:
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    return (str(err).splitlines() or [type(err).__name__])[0]


@contextmanager
def cache_write(action: str) -> Iterator[None]:
    """Any write error inside becomes one :class:`CacheWriteError` saying ``action`` ("writing X to FOLDER")
    failed, and why."""
    try:
        yield
    except RlxfError:
        raise
    except Exception as err:  # noqa: BLE001 - disk full, a file-size limit, read-only, a serializer's own error
        # (safetensors reports a failed write as SafetensorError, not OSError): all alike here, as for checkpoints
        raise CacheWriteError(f"{action} failed ({_reason(err)}); nothing was cached: free space "
                              "or point RLXF_CACHE_DIR at a writable folder with room") from err


@contextmanager
def staging_folder(target: Path, what: str) -> Iterator[Path]:
    """A fresh folder beside ``target`` to build ``what`` in (the caller renames it to ``target`` once whole);
    removed afterwards whatever happens. The cache folder is created first and stale staging folders of
    ``target`` are cleaned."""
    with cache_write(f"creating rlxf's cache folder {target.parent} for {what}"):
        target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(target)
    with cache_write(f"writing {what} to {target.parent}"):
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.pid{os.getpid()}.{socket.gethostname()}.",
                                        dir=target.parent))
    try:
        with cache_write(f"writing {what} to {staging}"):
            yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def built_once(target: Path, what: str, marker: str, build: Callable[[Path], str]) -> str:
    """``target``, built first unless it holds ``marker`` (written last, so a folder without it is not
    finished): ``build(staging)`` writes ``what`` into a staging folder and returns the marker's text, then the
    folder is renamed into place. When another process finished the same build first, its folder is kept."""
    if (target / marker).exists():
        return str(target)
    with staging_folder(target, what) as building:
        text = build(building)
        (building / marker).write_text(text)
        try:
            os.replace(building, target)
        except OSError:  # another process finished first: its folder is the same build
            if not (target / marker).exists():
                raise
    return str(target)


def content_sha256(files: Iterable[Path], prefix: bytes = b"") -> str:
    """The sha256 of ``prefix`` then each file's bytes in turn (the name a cached build gets from its sources)."""
    digest = hashlib.sha256(prefix)
    for file in files:
        with file.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def remove_stale_staging(target: Path) -> list[Path]:
    """Remove the staging folders of ``target`` whose build is over (its process on this machine is gone;
    an unowned one, older than ``UNOWNED_STALE_SECONDS``); the removed ones."""
    owned = re.compile(rf"\.{re.escape(target.name)}\.pid(\d+)\.(.+)\.{RANDOM_TAIL}")
    unowned = re.compile(rf"\.{re.escape(target.name)}[-.]{RANDOM_TAIL}")
    removed = []
    for folder in target.parent.glob(f".{target.name}*"):
        match = owned.fullmatch(folder.name)
        if match:
            stale = match.group(2) == socket.gethostname() and not _process_alive(int(match.group(1)))
        else:
            stale = bool(unowned.fullmatch(folder.name)) and _age_seconds(folder) > UNOWNED_STALE_SECONDS
        if stale and folder.is_dir():
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def _age_seconds(folder: Path) -> float:
    try:
        return time.time() - folder.stat().st_mtime
    except OSError:
        return 0.0
