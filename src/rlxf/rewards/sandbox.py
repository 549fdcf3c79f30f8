"""Run untrusted Python (programs written by the policy) in a contained child process.

Layers, strongest available picked at runtime (see docs/sandbox.md for what each stops and what is weak):

* ``namespaces`` (root): ``unshare --pid --mount --net --ipc --uts --fork --kill-child --mount-proc``;
  inside, every mount is remounted read-only except a bind of the run's own temp dir, and the candidate
  runs as a fresh unprivileged uid (so RLIMIT_NPROC is enforced and /proc of others is unreadable).
* ``userns`` (non-root with unprivileged user namespaces): same namespaces inside a user namespace;
  the candidate keeps the mapped uid but loses all capabilities (securebits NOROOT + empty bounding set).
* ``basic`` (no namespaces): a session/process group, a child-subreaper init that kills whatever the
  candidate left behind, uid drop when root, rlimits and the parent's watchdog. No network isolation.

Always: rlimits (CPU, AS, NPROC, FSIZE, NOFILE, CORE=0), ``no_new_privs``, a scrubbed environment, a
fresh temp cwd that is deleted afterwards, a wall-clock deadline, an output byte cap read incrementally,
and a process-count watchdog; on exit everything the run started is killed (by namespace, process tree
and recorded pids).
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import random
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from rlxf.rewards.sandbox_init import INIT_SOURCE
from rlxf.rewards.sandbox_limits import SandboxLimits, SandboxResult
from rlxf.rewards.sandbox_procs import PROCS, descendants, remove_tree, sweep, terminate

__all__ = [
    "CodeSandbox",
    "SandboxJob",
    "SandboxLimits",
    "SandboxResult",
    "available_isolation",
    "resolve_isolation",
    "run_python",
]

ISOLATION_MODES = ("auto", "namespaces", "userns", "basic")
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
_SCAN_INTERVAL = 0.1  # seconds between process-count checks
_UNSHARE_FLAGS = ["--fork", "--kill-child", "--pid", "--mount-proc", "--net", "--ipc", "--uts"]

# --------------------------------------------------------------------------------------------------
# what isolation this machine allows


@functools.cache
def _probe(mode: str) -> bool:
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    argv = [
        unshare,
        *(_UNSHARE_FLAGS if mode == "namespaces" else ["--user", "--map-root-user", *_UNSHARE_FLAGS]),
    ]
    argv += [sys.executable, "-I", "-S", "-c", "import os; assert os.getpid() == 1"]
    try:
        proc = subprocess.run(
            argv, env={"PATH": SAFE_PATH}, stdin=subprocess.DEVNULL, capture_output=True, timeout=20
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0


@functools.cache
def _works(mode: str) -> bool:
    """Whether a trivial program runs under ``mode`` (namespaces present *and* the setup inside succeeds)."""
    if mode in ("namespaces", "userns") and not _probe(mode):
        return False
    if mode == "namespaces" and os.geteuid() != 0:
        return False
    try:
        res = _run("print('ok')", "", SandboxLimits(wall_seconds=30), mode, sys.executable, time.monotonic())
    except Exception:  # noqa: BLE001
        return False
    return res.ok and res.stdout == "ok\n"


def available_isolation() -> str:
    """Strongest isolation mode that works here: "namespaces", "userns" or "basic"."""
    for mode in ("namespaces", "userns"):
        if _works(mode):
            return mode
    return "basic"


def resolve_isolation(isolation: str) -> str:
    """The mode a request for ``isolation`` gets here (a stronger mode falls back to a weaker one)."""
    if isolation not in ISOLATION_MODES:
        raise ValueError(f"isolation must be one of {ISOLATION_MODES}, got {isolation!r}")
    if isolation == "auto":
        return available_isolation()
    if isolation == "namespaces" and not _works("namespaces"):
        isolation = "userns"
    if isolation == "userns" and not _works("userns"):
        isolation = "basic"
    return isolation


def _mapped_uid_range() -> tuple[int, int] | None:
    """A range of uids that setresuid accepts and that normal accounts do not use."""
    try:
        with open("/proc/self/uid_map") as f:
            ranges = [tuple(int(x) for x in line.split()) for line in f if line.strip()]
    except OSError:
        return None
    lo, width = 1_000_000, 1 << 24
    for inside, _outside, count in ranges:
        if inside <= lo and lo + width <= inside + count:
            return lo, width
    return None


_uid_counter = itertools.count(random.randrange(1 << 24))


def _sandbox_uid() -> int | None:
    """A fresh uid per run (root only): RLIMIT_NPROC is then per run and runs cannot touch each other."""
    if os.geteuid() != 0:
        return None
    rng = _mapped_uid_range()
    if rng is None:
        return 65534
    lo, width = rng
    return lo + next(_uid_counter) % width


def _world_executable(path: str) -> bool:
    """Whether a process with an unrelated uid could execute ``path`` (o+x on the file and every dir)."""
    real = os.path.realpath(path)
    try:
        if not os.stat(real).st_mode & 0o001:
            return False
        parent = os.path.dirname(real)
        while True:
            if not os.stat(parent).st_mode & 0o001:
                return False
            if parent == os.path.dirname(parent):
                return True
            parent = os.path.dirname(parent)
    except OSError:
        return False


@functools.cache
def _python_for_other_uid(preferred: str) -> str | None:
    """``preferred`` if a dropped uid can run it, else a system python3 that it can run, else None."""
    for cand in (preferred, *(os.path.join(d, "python3") for d in SAFE_PATH.split(":"))):
        if os.path.exists(cand) and _world_executable(cand):
            return cand
    return None


# --------------------------------------------------------------------------------------------------
# one run


def _candidate_env(workdir: str) -> dict[str, str]:
    return {
        "PATH": SAFE_PATH,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": workdir,
        "TMPDIR": workdir,
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONHASHSEED": "0",
    }


def run_python(
    code: str,
    stdin: str = "",
    limits: SandboxLimits | None = None,
    *,
    isolation: str = "auto",
    python: str | None = None,
) -> SandboxResult:
    """Run ``code`` as ``main.py`` in a fresh sandbox and return what happened. Never raises because of
    the candidate; an infrastructure failure comes back as ``killed_reason="sandbox_error"``."""
    limits = limits or SandboxLimits()
    mode = resolve_isolation(isolation)
    t0 = time.monotonic()
    try:
        return _run(code, stdin, limits, mode, python or sys.executable, t0)
    except Exception as e:  # noqa: BLE001 - the caller (a reward) must never crash on a candidate
        return SandboxResult(
            returncode=None,
            stdout="",
            stderr="",
            killed_reason="sandbox_error",
            wall_seconds=time.monotonic() - t0,
            error=f"{type(e).__name__}: {e}",
        )


def _run(code: str, stdin: str, limits: SandboxLimits, mode: str, python: str, t0: float) -> SandboxResult:
    in_ns = mode in ("namespaces", "userns")
    uid = _sandbox_uid() if mode != "userns" else None
    if uid is not None:
        runnable = _python_for_other_uid(python)
        if runnable is None:  # nothing a dropped uid can execute: stay root but without capabilities
            uid = None
        else:
            python = runnable
    drop_caps = in_ns and uid is None
    workdir = os.path.realpath(tempfile.mkdtemp(prefix="rlxf-sandbox-"))
    report_r = report_w = -1
    proc = None
    try:
        script = os.path.join(workdir, "main.py")
        with open(script, "w", encoding="utf-8") as f:
            f.write(code)
        os.chmod(script, 0o644)
        if uid is not None:
            os.chown(workdir, uid, uid)
        os.chmod(workdir, 0o700)
        cfg = {
            "workdir": workdir,
            "script": "main.py",
            "python": python,
            "uid": uid,
            "drop_caps": drop_caps,
            "env": _candidate_env(workdir),
            "cpu_seconds": limits.cpu_seconds,
            "memory_mb": limits.memory_mb,
            "max_processes": limits.max_processes,
            "max_file_mb": limits.max_file_mb,
            "max_open_files": limits.max_open_files,
        }
        report_r, report_w = os.pipe()
        cfg["report_fd"] = report_w
        argv = [sys.executable, "-I", "-S", "-c", INIT_SOURCE, json.dumps(cfg)]
        if in_ns:
            ns = _UNSHARE_FLAGS if mode == "namespaces" else ["--user", "--map-root-user", *_UNSHARE_FLAGS]
            argv = [shutil.which("unshare") or "unshare", *ns, *argv]
        with tempfile.TemporaryFile() as stdin_file:
            stdin_file.write(stdin.encode("utf-8"))
            stdin_file.seek(0)
            proc = subprocess.Popen(
                argv,
                stdin=stdin_file,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=workdir,
                env={"PATH": SAFE_PATH, "LANG": "C.UTF-8"},
                start_new_session=True,
                pass_fds=(report_w,),
            )
        os.close(report_w)
        report_w = -1
        return _supervise(proc, report_r, limits, in_ns, t0)
    finally:
        if proc is not None and proc.poll() is None:
            terminate(proc, in_ns, set())
        for fd in (report_r, report_w):
            if fd >= 0:
                os.close(fd)
        remove_tree(workdir)


def _supervise(
    proc: subprocess.Popen, report_r: int, limits: SandboxLimits, in_ns: bool, t0: float
) -> SandboxResult:
    deadline = t0 + limits.wall_seconds
    cap = limits.max_output_bytes
    infra = 1 if in_ns else 0  # the init process inside unshare is ours, not the candidate's
    sel = selectors.DefaultSelector()
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    bufs = {out_fd: bytearray(), err_fd: bytearray()}
    for fd in bufs:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    total, truncated, reason = 0, False, None
    seen: set[tuple[int, int]] = set()
    next_scan = 0.0

    def pump(timeout: float) -> bool:
        """Read what is there; False once the output cap is exceeded."""
        nonlocal total, truncated
        if not sel.get_map():
            time.sleep(timeout)
            return True
        for key, _ in sel.select(timeout):
            try:
                data = os.read(key.fd, 65536)
            except BlockingIOError:
                continue
            if not data:
                sel.unregister(key.fd)
                continue
            room = cap - total
            bufs[key.fd] += data[: max(room, 0)]
            total += len(data)
            if total > cap:
                truncated = True
                return False
        return True

    try:
        while True:
            now = time.monotonic()
            if proc.poll() is not None:
                while sel.get_map() and sel.select(0):  # drain what is already written
                    if not pump(0):
                        reason = "output_limit"
                        break
                break
            if now >= deadline:
                reason = "wall_timeout"
                break
            if now >= next_scan:
                next_scan = now + _SCAN_INTERVAL
                table = PROCS.get()
                desc = descendants(proc.pid, table)
                seen.update((p, table[p][1]) for p in desc)
                if len(desc) - infra > limits.max_processes:
                    reason = "process_limit"
                    break
            if not pump(min(0.05, max(deadline - now, 0.0))):
                reason = "output_limit"
                break
        if reason is not None:
            terminate(proc, in_ns, seen)
        proc.wait(timeout=10)
    finally:
        sel.close()
        proc.stdout.close()
        proc.stderr.close()
        sweep(seen)

    rep: dict = {}
    chunks = []
    while True:
        try:
            data = os.read(report_r, 65536)
        except BlockingIOError:
            break
        if not data:
            break
        chunks.append(data)
    for line in b"".join(chunks).decode(errors="replace").splitlines():
        try:
            rep.update(json.loads(line))
        except ValueError:
            pass

    status = rep.get("status")
    returncode = os.waitstatus_to_exitcode(status) if status is not None else None
    if returncode is None and reason is not None:
        returncode = -signal.SIGKILL
    if reason is None and rep.get("error"):
        reason = "sandbox_error"
    if reason is None and status is None:
        reason = "sandbox_error"
        rep.setdefault("error", f"sandbox init exited with {proc.returncode} without reporting")
    if reason is None and returncode is not None and returncode < 0:
        sig = -returncode
        reason = {signal.SIGXCPU: "cpu_limit", signal.SIGXFSZ: "file_size_limit"}.get(
            sig, f"signal:{signal.Signals(sig).name}" if sig in signal.valid_signals() else f"signal:{sig}"
        )
    return SandboxResult(
        returncode=returncode,
        stdout=bufs[out_fd].decode("utf-8", errors="replace"),
        stderr=bufs[err_fd].decode("utf-8", errors="replace"),
        timed_out=reason in ("wall_timeout", "cpu_limit"),
        killed_reason=reason,
        wall_seconds=time.monotonic() - t0,
        output_truncated=truncated,
        isolation=tuple(rep.get("layers", ())),
        error=rep.get("error"),
        pids=tuple(sorted(p for p, _ in seen)),
    )


# --------------------------------------------------------------------------------------------------
# many runs


@dataclass(frozen=True)
class SandboxJob:
    code: str
    stdin: str = ""
    limits: SandboxLimits | None = None  # None: the sandbox's default limits


class CodeSandbox:
    """Runs many jobs in parallel: a thread pool of at most ``max_workers`` sandboxed subprocesses."""

    def __init__(
        self,
        max_workers: int | None = None,
        limits: SandboxLimits | None = None,
        isolation: str = "auto",
        python: str | None = None,
    ) -> None:
        self.max_workers = max(1, max_workers or (os.cpu_count() or 1))
        self.limits = limits or SandboxLimits()
        self.isolation = resolve_isolation(isolation)
        self.python = python

    def run(self, code: str, stdin: str = "", limits: SandboxLimits | None = None) -> SandboxResult:
        return run_python(code, stdin, limits or self.limits, isolation=self.isolation, python=self.python)

    def run_many(self, jobs: Sequence[SandboxJob | tuple[str, str] | str]) -> list[SandboxResult]:
        """Results in the order of ``jobs``. A job is a SandboxJob, a ``(code, stdin)`` pair or a code string."""
        norm = [self._job(j) for j in jobs]
        if not norm:
            return []
        if len(norm) == 1 or self.max_workers == 1:
            return [self.run(j.code, j.stdin, j.limits) for j in norm]
        with ThreadPoolExecutor(
            max_workers=min(self.max_workers, len(norm)), thread_name_prefix="sandbox"
        ) as pool:
            return list(pool.map(lambda j: self.run(j.code, j.stdin, j.limits), norm))

    @staticmethod
    def _job(job: SandboxJob | tuple[str, str] | str) -> SandboxJob:
        if isinstance(job, SandboxJob):
            return job
        if isinstance(job, str):
            return SandboxJob(job)
        code, stdin = job
        return SandboxJob(code, stdin)
