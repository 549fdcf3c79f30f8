"""Process bookkeeping for sandbox runs through /proc (host pids): the process table, a run's
descendants, and killing what is left of them (``rewards/sandbox_pool.py``)."""

from __future__ import annotations

import os
import signal
import threading
import time


def read_stat(pid: int) -> tuple[int, int, str] | None:
    """(ppid, start time, state) from /proc/<pid>/stat; None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    rest = raw[raw.rfind(b")") + 2 :].split()  # after the command name, which may hold spaces or ")"
    return int(rest[1]), int(rest[19]), rest[0].decode()


class ProcTable:
    """A snapshot of pid -> (ppid, starttime, state), shared by the threads of a pool for a short ttl."""

    def __init__(self, ttl: float = 0.05) -> None:
        self.ttl = ttl
        self._lock = threading.Lock()
        self._at = -1.0
        self._table: dict[int, tuple[int, int, str]] = {}

    @staticmethod
    def scan() -> dict[int, tuple[int, int, str]]:
        table = {}
        for name in os.listdir("/proc"):
            if name.isdigit() and (stat := read_stat(int(name))) is not None:
                table[int(name)] = stat
        return table

    def get(self, fresh: bool = False) -> dict[int, tuple[int, int, str]]:
        with self._lock:
            now = time.monotonic()
            if fresh or now - self._at > self.ttl:
                self._table = self.scan()
                self._at = now
            return self._table


PROCS = ProcTable()


def descendants(root: int, table: dict[int, tuple[int, int, str]]) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _start, _state) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        for kid in children.get(todo.pop(), []):
            out.append(kid)
            todo.append(kid)
    return out


def kill_pid(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def alive(pid: int, start: int) -> bool:
    stat = read_stat(pid)
    return stat is not None and stat[1] == start and stat[2] not in ("Z", "X")






def sweep(seen: set[tuple[int, int]]) -> None:
    """Kill any recorded candidate process that is still alive (same pid *and* start time), and wait
    briefly until they are gone."""
    end = time.monotonic() + 2.0
    while True:
        live = [(p, s) for p, s in seen if alive(p, s)]
        if not live or time.monotonic() > end:
            return
        for p, _ in live:
            kill_pid(p)
        time.sleep(0.01)
