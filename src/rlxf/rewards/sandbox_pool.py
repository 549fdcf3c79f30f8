"""The parent's side of the sandbox: zygote processes (``jail/zygote.py``) and one job's supervision.

A ``Zygote`` is one sandboxed interpreter that forks runs; ``ZygotePool`` keeps idle ones per
(isolation mode, interpreter, allowed packages) so that a reward reuses them across calls and threads.
``Zygote.run`` sends one job (the candidate's program and stdin, plus the checker's tests when there are
function tests), pumps the pipes, enforces the output cap and an outer deadline, and turns what the
zygote reports into a ``SandboxResult`` and the checker's verdicts.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import random
import selectors
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field

from rlxf.rewards import jail
from rlxf.rewards.sandbox_limits import SandboxLimits, SandboxResult
from rlxf.rewards.sandbox_procs import PROCS, descendants, kill_pid, sweep

SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
UNSHARE_FLAGS = ["--fork", "--kill-child", "--pid", "--mount-proc", "--net", "--ipc", "--uts"]
NAMESPACE_PREFIX = {"namespaces": UNSHARE_FLAGS, "userns": ["--user", "--map-root-user", *UNSHARE_FLAGS]}
_SCAN_INTERVAL = 0.1  # seconds between the parent's looks at the run's processes
_GRACE = 3.0  # seconds past the wall clock before the parent gives up on a zygote
_CHECK_REPORT_CAP = 4 << 20
TMP_MB = SandboxLimits().max_disk_mb  # the zygote's tmpfs /tmp at start; each job sets its own size
_CHECKER_STDERR_CAP = 64 << 10


class SandboxStartError(RuntimeError):
    """A zygote could not be started (the isolation mode does not work here)."""


@dataclass
class CheckReport:
    """The checker's verdict per test, or why there is none."""

    results: list[tuple[bool, str | None]] = field(default_factory=list)
    error: str | None = None  # the checker itself failed: every test counts as failed
    stderr: str = ""


_uid_counter = itertools.count(random.randrange(1 << 24))


def fresh_uid() -> int:
    """A uid no account uses, one per run (root only): RLIMIT_NPROC per run, runs cannot touch each other."""
    return 1_000_000 + next(_uid_counter) % (1 << 24)


class Zygote:
    def __init__(self, mode: str, python: str, view: dict | None) -> None:
        self.mode = mode
        self.owner = os.getpid()
        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        mount_point = tempfile.mkdtemp(prefix="rlxf-sandbox-root-") if view is not None else None
        cfg = {
            "sources": jail.sources(),
            "in_ns": mode != "basic",
            "job_fd": child_end.fileno(),
            "view": None if view is None else {**view, "mount_point": mount_point, "tmp_mb": TMP_MB},
        }
        argv = [*(["unshare", *NAMESPACE_PREFIX[mode]] if mode in NAMESPACE_PREFIX else []),
                python, "-I", "-S", "-c", jail.BOOT]
        self.sock = parent_end
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            pass_fds=(child_end.fileno(),), start_new_session=True, env={"PATH": SAFE_PATH, "LANG": "C.UTF-8"},
        )
        child_end.close()
        try:
            self.proc.stdin.write(json.dumps(cfg).encode())
            self.proc.stdin.close()
            self.sock.settimeout(60)
            hello = json.loads(self.sock.recv(65536) or b"{}")
            self.sock.settimeout(None)
        except (OSError, ValueError) as err:
            hello = {"error": repr(err)}
        finally:
            if mount_point:
                os.rmdir(mount_point)  # the zygote mounted its root on it in its own namespace only
        if not hello.get("ready"):
            if self.proc.poll() is None:
                self.proc.kill()
            detail = self.proc.stderr.read().decode(errors="replace")[-2000:] if self.proc.stderr else ""
            self.close()
            raise SandboxStartError(f"{mode} sandbox did not start: {hello.get('error', '')} {detail}".strip())
        self.layers = tuple(hello["layers"])
        self.alive = True

    def close(self) -> None:
        self.alive = False
        try:
            self.sock.close()
        except OSError:
            pass
        if self.proc.poll() is None:
            for pid in descendants(self.proc.pid, PROCS.get(fresh=True)):
                kill_pid(pid)
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        if self.proc.stderr:
            self.proc.stderr.close()

    # ------------------------------------------------------------------------------------- one job

    def run(self, program: str, stdin: str, limits: SandboxLimits, checks: dict | None = None,
            uids: dict | None = None) -> tuple[SandboxResult, CheckReport | None]:
        t0 = time.monotonic()
        job = Job(self, program, stdin, limits, checks, uids or {})
        try:
            return job.run(t0)
        finally:
            job.close()


class Job:
    """One job's pipes and supervision (in the parent)."""

    def __init__(self, zygote: Zygote, program: str, stdin: str, limits: SandboxLimits, checks: dict | None,
                 uids: dict) -> None:
        self.zygote, self.limits, self.checks = zygote, limits, checks
        self.uids = uids
        self.ours: list[int] = []  # parent-side descriptors to close
        self.theirs: list[int] = []  # descriptors handed to the zygote, closed once sent
        self.writes: dict[int, bytes] = {}

        def pipe(payload: bytes | None = None) -> tuple[int, int]:
            r, w = os.pipe()
            if payload is not None:  # we write, they read
                self.theirs.append(r)
                self.ours.append(w)
                self.writes[w] = payload
            else:  # they write, we read
                self.theirs.append(w)
                self.ours.append(r)
            return r, w

        self.out_fds = {}
        pipe(program.encode("utf-8"))
        pipe(stdin.encode("utf-8"))
        self.out_fds["stdout"] = pipe()[0]
        self.out_fds["stderr"] = pipe()[0]
        if checks is not None:
            a, b = socket.socketpair()
            self.theirs.append(a.detach())
            pipe(json.dumps(checks).encode("utf-8"))
            self.out_fds["report"] = pipe()[0]
            self.out_fds["checker_stderr"] = pipe()[0]
            self.theirs.append(b.detach())

    def close(self) -> None:
        for fd in self.ours + self.theirs:
            try:
                os.close(fd)
            except OSError:
                pass
        self.ours, self.theirs = [], []

    def run(self, t0: float) -> tuple[SandboxResult, CheckReport | None]:
        self._send()
        self.sel = selectors.DefaultSelector()
        self.bufs = {fd: bytearray() for fd in self.out_fds.values()}
        self.caps = {self.out_fds["stdout"]: None, self.out_fds["stderr"]: None}  # None: the shared output cap
        self.caps.update({self.out_fds[k]: cap for k, cap in (("report", _CHECK_REPORT_CAP),
                                                              ("checker_stderr", _CHECKER_STDERR_CAP))
                          if k in self.out_fds})
        self.total, self.killed = 0, None
        self.seen: set[tuple[int, int]] = set()
        for fd, event in [*((fd, selectors.EVENT_READ) for fd in self.bufs),
                          *((fd, selectors.EVENT_WRITE) for fd in self.writes)]:
            os.set_blocking(fd, False)
            self.sel.register(fd, event)
        self.sel.register(self.zygote.sock, selectors.EVENT_READ)
        try:
            reply = self._pump(t0)
            self._drain()
        finally:
            self.sel.close()
            sweep(self.seen)
        return self._results(reply, t0)

    def _send(self) -> None:
        roles = ["candidate", "checker"] if self.checks is not None else ["candidate"]
        job = {"roles": roles, "serve": self.checks is not None, "uids": self.uids, "limits": {**self.limits.__dict__}}
        socket.send_fds(self.zygote.sock, [json.dumps(job).encode()], self.theirs)
        for fd in self.theirs:
            os.close(fd)
        self.theirs = []

    def _pump(self, t0: float) -> dict:
        """Feed the pipes and read them until the zygote replies (or stops answering)."""
        zygote = self.zygote
        deadline = t0 + self.limits.wall_seconds + _GRACE
        next_scan = t0 + _SCAN_INTERVAL
        while True:
            now = time.monotonic()
            if now >= deadline:
                zygote.close()  # it stopped answering: start a fresh one next time
                return {"error": "the sandbox did not finish the run"}
            if now >= next_scan:
                next_scan = now + _SCAN_INTERVAL
                self._record_pids()
            for key, _ in self.sel.select(min(0.25, deadline - now)):
                if key.fd == zygote.sock.fileno():
                    data = zygote.sock.recv(65536)
                    if not data:
                        zygote.close()
                        return {"error": "the sandbox process died"}
                    return json.loads(data)
                if key.fd in self.writes:
                    self._write(key.fd)
                elif self._read(key.fd) and self.killed is None:
                    self.killed = "output_limit"
                    zygote.sock.send(json.dumps({"kill": self.killed}).encode())

    def _record_pids(self) -> None:
        """Host pids of the run's processes, so that the parent can check none outlives it."""
        table = PROCS.get()
        root = self.zygote.proc.pid
        inner = root if self.zygote.mode == "basic" else None  # else the zygote is unshare's child
        self.seen.update((p, table[p][1]) for p in descendants(root, table)
                         if p != inner and not (inner is None and table[p][0] == root))

    def _write(self, fd: int) -> None:
        try:
            sent = os.write(fd, self.writes[fd][:65536])
        except BlockingIOError:
            sent = 0
        except BrokenPipeError:  # the reader is gone (the run ended): drop the rest
            sent = len(self.writes[fd])
        self.writes[fd] = self.writes[fd][sent:]
        if not self.writes[fd]:
            self.sel.unregister(fd)
            os.close(fd)
            self.ours.remove(fd)
            del self.writes[fd]

    def _read(self, fd: int) -> bool:
        """Read what is there into the fd's buffer, within its cap; True once the candidate's output
        (stdout and stderr together) is over ``max_output_bytes``."""
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return False
        if not data:
            self.sel.unregister(fd)
            return False
        cap = self.caps[fd]
        if cap is None:
            self.bufs[fd] += data[: max(self.limits.max_output_bytes - self.total, 0)]
            self.total += len(data)
            return self.total > self.limits.max_output_bytes
        self.bufs[fd] += data[: max(cap - len(self.bufs[fd]), 0)]
        return False

    def _drain(self) -> None:
        """Read what the runs wrote before they ended (their write ends are closed by now)."""
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            readable = [k.fd for k in self.sel.get_map().values() if k.fd in self.bufs]
            if not readable:
                return
            for fd in readable:
                self._read(fd)

    def _results(self, reply: dict, t0: float) -> tuple[SandboxResult, CheckReport | None]:
        text = lambda key: self.bufs[self.out_fds[key]].decode("utf-8", errors="replace")  # noqa: E731
        error = reply.get("error")
        roles = reply.get("roles", {})
        cand = roles.get("candidate", {})
        status, reason = cand.get("status"), cand.get("reason")
        returncode = os.waitstatus_to_exitcode(status) if status is not None else None
        reason = self.killed or reason
        if error is not None:
            reason = "sandbox_error"
        elif returncode is None and reason is None and self.checks is None:
            reason, error = "sandbox_error", "the run ended without a status"
        if returncode is None and reason not in (None, "sandbox_error"):
            returncode = -signal.SIGKILL
        if reason is None and returncode is not None and returncode == 125:
            reason, error = "sandbox_error", text("stderr")[-500:] or "sandbox setup failed"
        if reason is None and returncode is not None and returncode < 0:
            sig = -returncode
            reason = {signal.SIGXCPU: "cpu_limit", signal.SIGXFSZ: "file_size_limit"}.get(
                sig, f"signal:{signal.Signals(sig).name}" if sig in signal.valid_signals() else f"signal:{sig}")
        result = SandboxResult(
            returncode=returncode, stdout=text("stdout"), stderr=text("stderr"),
            timed_out=reason in ("wall_timeout", "cpu_limit"), killed_reason=reason,
            wall_seconds=time.monotonic() - t0, output_truncated=self.total > self.limits.max_output_bytes,
            isolation=self.zygote.layers + tuple(self._uid_layers()), error=error,
            pids=tuple(sorted(p for p, _ in self.seen)),
        )
        if self.checks is None:
            return result, None
        report = CheckReport(stderr=text("checker_stderr"))
        checker = roles.get("checker", {})
        try:
            report.results = [(bool(p), e) for p, e in json.loads(self.bufs[self.out_fds["report"]] or b"null")["results"]]
        except (ValueError, TypeError, KeyError):
            why = error or checker.get("reason") or f"status {checker.get('status')}"
            report.error = f"the checker gave no verdict ({why}): {report.stderr[-300:]}".strip()
        if len(report.results) != len(self.checks["tests"]) and report.error is None:
            report.error = "the checker's verdict does not cover every test"
        return result, report

    def _uid_layers(self) -> list[str]:
        uid = self.uids.get("candidate")
        return [f"uid:{uid}" if uid is not None else "uid:unchanged"] + (
            ["no_capabilities"] if uid is None and self.zygote.mode != "basic" else [])


class ZygotePool:
    """Idle zygotes of one kind, shared by threads; each job takes one for its duration."""

    def __init__(self, mode: str, python: str, view: dict | None) -> None:
        self.mode, self.python, self.view = mode, python, view
        self._idle: list[Zygote] = []
        self._lock = threading.Lock()

    def acquire(self) -> Zygote:
        with self._lock:
            while self._idle:
                z = self._idle.pop()
                if z.alive and z.proc.poll() is None:
                    return z
                z.close()
        return Zygote(self.mode, self.python, self.view)

    def release(self, zygote: Zygote) -> None:
        if not zygote.alive or zygote.proc.poll() is not None:
            zygote.close()
            return
        with self._lock:
            self._idle.append(zygote)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for z in idle:
            z.close()


_POOLS: dict[tuple, ZygotePool] = {}
_POOLS_LOCK = threading.Lock()


def pool_for(mode: str, python: str, view: dict | None) -> ZygotePool:
    key = (os.getpid(), mode, python, json.dumps(view, sort_keys=True))
    with _POOLS_LOCK:
        if key not in _POOLS:
            _POOLS[key] = ZygotePool(mode, python, view)
        return _POOLS[key]


@atexit.register
def _close_pools() -> None:
    for key, pool in list(_POOLS.items()):
        if key[0] == os.getpid():
            pool.close()
