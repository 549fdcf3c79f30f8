"""Run untrusted Python (programs written by the policy) in a contained process, and decide whether it
passes tests in a process the candidate cannot touch.

A run is forked from a *zygote*, a sandboxed interpreter started once (``rewards/sandbox_pool.py``,
``rewards/jail/``). Isolation modes, the strongest available picked at runtime (docs/sandbox.md says
what each stops and what each lets a candidate see):

* ``namespaces`` (root): the zygote lives in its own pid/mount/net/ipc/uts namespaces and a minimal
  read-only filesystem (the interpreter, its standard library, allowed packages; nothing else of the
  host); every run gets fresh namespaces of its own, a private tmpfs /tmp, a fresh uid and rlimits.
* ``userns`` (non-root with unprivileged user namespaces): the same inside a user namespace; runs keep
  the mapped uid but lose every capability.
* ``basic`` (no namespaces): a subreaper init per run that kills what the candidate leaves behind, a
  fresh uid when root, rlimits. No network isolation, and the host's filesystem is visible.

Always: rlimits (CPU, AS, NPROC, FSIZE, NOFILE, CORE=0), ``no_new_privs``, a scrubbed environment, a
wall-clock deadline, an output byte cap read incrementally, and cleanup of every process a run started.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from rlxf.rewards.sandbox_limits import SandboxLimits, SandboxResult
from rlxf.rewards.sandbox_pool import CheckReport, SandboxStartError, Zygote, fresh_uid, pool_for
from rlxf.rewards.sandbox_view import base_interpreter, filesystem_view

__all__ = [
    "CheckReport",
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


# --------------------------------------------------------------------------------------------------
# what isolation this machine allows


@functools.cache
def _works(mode: str) -> bool:
    """Whether a trivial program runs under ``mode`` (namespaces present *and* the set-up inside works)."""
    if mode in ("namespaces", "userns") and shutil.which("unshare") is None:
        return False
    if mode == "namespaces" and os.geteuid() != 0:
        return False
    try:
        res = Sandbox(mode).run("print('ok')", "", SandboxLimits(wall_seconds=30))[0]
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


def _world_executable(path: str) -> bool:
    """Whether a process with an unrelated uid could read and execute ``path`` (o+x up the tree)."""
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
def _python_for_basic_mode(preferred: str) -> str:
    """Without a mount namespace a dropped uid reads the interpreter's files from the host as they are:
    ``preferred`` if it can, else the first system python3 that it can."""
    if os.geteuid() != 0:
        return preferred
    for cand in (preferred, *(os.path.join(d, "python3") for d in SAFE_PATH.split(":"))):
        if os.path.exists(cand) and _world_executable(cand):
            return os.path.realpath(cand)
    return preferred


# --------------------------------------------------------------------------------------------------
# one kind of sandbox


class Sandbox:
    """Runs jobs in zygotes of one mode, interpreter and set of allowed packages."""

    def __init__(self, mode: str, python: str | None = None, allowed_packages: Sequence[str] = ()) -> None:
        self.mode = mode
        python = base_interpreter(python)
        self.python = _python_for_basic_mode(python) if mode == "basic" else python
        self.view = filesystem_view(self.python, tuple(sorted(allowed_packages))) if mode != "basic" else None
        self.pool = pool_for(mode, self.python, self.view)

    def _uids(self, roles: int) -> dict:
        if self.mode == "userns" or os.geteuid() != 0:
            return {}
        return {"candidate": fresh_uid(), "checker": fresh_uid()} if roles == 2 else {"candidate": fresh_uid()}

    def run(self, program: str, stdin: str, limits: SandboxLimits,
            checks: dict | None = None) -> tuple[SandboxResult, CheckReport | None]:
        zygote: Zygote = self.pool.acquire()
        try:
            return zygote.run(program, stdin, limits, checks, self._uids(2 if checks is not None else 1))
        finally:
            self.pool.release(zygote)


def _failed_start(err: BaseException, checks: dict | None) -> tuple[SandboxResult, CheckReport | None]:
    res = SandboxResult(returncode=None, stdout="", stderr="", killed_reason="sandbox_error",
                        error=f"{type(err).__name__}: {err}")
    return res, (CheckReport(error=res.error) if checks is not None else None)


def run_python(
    code: str,
    stdin: str = "",
    limits: SandboxLimits | None = None,
    *,
    isolation: str = "auto",
    python: str | None = None,
    allowed_packages: Sequence[str] = (),
) -> SandboxResult:
    """Run ``code`` as ``main.py`` in a fresh sandbox and return what happened. Never raises because of
    the candidate; an infrastructure failure comes back as ``killed_reason="sandbox_error"``."""
    return CodeSandbox(1, limits, isolation, python, allowed_packages).run(code, stdin)


# --------------------------------------------------------------------------------------------------
# many runs


@functools.cache
def _warn_basic_mode() -> None:
    warnings.warn("the code sandbox runs in 'basic' isolation: candidate programs can read the host's files "
                  "(datasets with answers included) and reach the network; their verdicts still cannot be forged. "
                  "Use root or unprivileged user namespaces for RL on untrusted code (docs/sandbox.md).",
                  RuntimeWarning, stacklevel=3)


@dataclass(frozen=True)
class SandboxJob:
    code: str
    stdin: str = ""
    limits: SandboxLimits | None = None  # None: the sandbox's default limits
    checks: dict | None = None  # function tests for the checker (see jail/check.py); None: a plain run


class CodeSandbox:
    """Runs many jobs in parallel, at most ``max_workers`` at once, each in a run forked from a zygote."""

    def __init__(
        self,
        max_workers: int | None = None,
        limits: SandboxLimits | None = None,
        isolation: str = "auto",
        python: str | None = None,
        allowed_packages: Sequence[str] = (),
    ) -> None:
        self.max_workers = max(1, max_workers or (os.cpu_count() or 1))
        self.limits = limits or SandboxLimits()
        self.isolation = resolve_isolation(isolation)
        if self.isolation == "basic":
            _warn_basic_mode()
        self.python = python or sys.executable
        self.allowed_packages = tuple(allowed_packages)
        self._sandbox: Sandbox | None = None

    def _kind(self) -> Sandbox:
        if self._sandbox is None:
            self._sandbox = Sandbox(self.isolation, self.python, self.allowed_packages)
        return self._sandbox

    def run_checked(self, job: SandboxJob) -> tuple[SandboxResult, CheckReport | None]:
        try:
            return self._kind().run(job.code, job.stdin, job.limits or self.limits, job.checks)
        except (SandboxStartError, OSError, ValueError) as err:
            return _failed_start(err, job.checks)

    def run(self, code: str, stdin: str = "", limits: SandboxLimits | None = None) -> SandboxResult:
        return self.run_checked(SandboxJob(code, stdin, limits))[0]

    def run_many_checked(self, jobs: Sequence[SandboxJob]) -> list[tuple[SandboxResult, CheckReport | None]]:
        if len(jobs) <= 1 or self.max_workers == 1:
            return [self.run_checked(j) for j in jobs]
        with ThreadPoolExecutor(max_workers=min(self.max_workers, len(jobs)), thread_name_prefix="sandbox") as pool:
            return list(pool.map(self.run_checked, jobs))

    def run_many(self, jobs: Sequence[SandboxJob | tuple[str, str] | str]) -> list[SandboxResult]:
        """Results in the order of ``jobs``. A job is a SandboxJob, a ``(code, stdin)`` pair or a code string."""
        return [res for res, _ in self.run_many_checked([self._job(j) for j in jobs])]

    @staticmethod
    def _job(job: SandboxJob | tuple[str, str] | str) -> SandboxJob:
        if isinstance(job, SandboxJob):
            return job
        if isinstance(job, str):
            return SandboxJob(job)
        code, stdin = job
        return SandboxJob(code, stdin)
