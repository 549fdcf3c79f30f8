"""Running a module's tests against one mutant at a time, in a scratch copy of the source tree.

The worktree is never edited: the source root is copied once to a temporary directory, each mutant is
written into the copy, its tests run with the copy first on ``sys.path`` (and ``PYTHONPATH`` for any
subprocess a test starts), and the original text is put back.

Fork mode (the default on POSIX): this process imports the heavy third-party packages once (torch,
transformers, ...) and forks a child per mutant that runs ``pytest.main``; the child imports the
project fresh from the copy. That saves the import time (seconds) on every mutant. ``--no-fork`` runs a
plain ``python -m pytest`` subprocess instead. Either way a child over its time limit is killed with
its whole process group (it runs in one of its own).
"""

from __future__ import annotations

import importlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

PYTEST_FLAGS = ["-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]


@dataclass
class Outcome:
    status: str  # "killed", "survived", "timeout" or "error" (the unmutated tests failed / none ran)
    seconds: float
    exit_code: int | None
    failed: str | None = None  # the first failing test (pytest's "FAILED ..." / "ERROR ..." line)


class ScratchTree:
    """A copy of ``root`` (no ``__pycache__``) where one file at a time is replaced by a mutant."""

    def __init__(self, root: Path) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="rlxf-mutation-"))
        self.root = self.tmp / "src"
        shutil.copytree(root, self.root, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))

    def write(self, relative: str, text: str) -> None:
        target = self.root / relative
        # A stale .pyc with the same size and mtime second would hide the change: children never write
        # bytecode for it (``dont_write_bytecode``), and any left from the baseline run goes here.
        for cached in (target.parent / "__pycache__").glob(f"{target.stem}.*.pyc"):
            cached.unlink()
        target.write_text(text)

    def cleanup(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


def preload(modules: list[str]) -> None:
    """Import third-party packages in the parent so each forked child has them already."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            pass


def _child_env(tree: ScratchTree) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tree.root)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _status(code: int | None, timed_out: bool) -> str:
    if timed_out:
        return "timeout"
    # pytest: 0 all passed, 1 a test failed, 2 interrupted (e.g. an import error at collection),
    # 3 internal error, 4 usage error, 5 no tests collected; a signal (negative) is a crash.
    return {0: "survived", 5: "error", 4: "error"}.get(code, "killed")


def first_failure(log: Path) -> str | None:
    """The first test pytest's short summary names as failed (or errored), without its message."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith(("FAILED ", "ERROR ")):
            return line.split(" - ")[0].split(" ", 1)[1]
    return None


class TestRunner:
    """Runs ``tests`` (pytest arguments) against the scratch tree; one call per mutant."""

    def __init__(self, tree: ScratchTree, package: str, fork: bool = True, log_dir: Path | None = None,
                 write_bytecode: bool = False) -> None:
        self.tree, self.package, self.fork = tree, package, fork and hasattr(os, "fork")
        self.log_dir = log_dir
        self.write_bytecode = write_bytecode

    def run(self, tests: list[str], timeout: float, log_name: str = "run") -> Outcome:
        start = time.perf_counter()
        log = (self.log_dir or self.tree.tmp) / f"{log_name}.log"
        if self.fork:
            code, timed_out = self._run_forked(tests, timeout, log)
        else:
            code, timed_out = self._run_subprocess(tests, timeout, log)
        failed = first_failure(log)
        if self.log_dir is None:
            log.unlink(missing_ok=True)
        return Outcome(_status(code, timed_out), time.perf_counter() - start, code, failed)

    def _run_subprocess(self, tests: list[str], timeout: float, log: Path) -> tuple[int | None, bool]:
        with open(log, "wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "pytest", *PYTEST_FLAGS, *tests], env=_child_env(self.tree),
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                return proc.wait(timeout=timeout), False
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return None, True

    def _run_forked(self, tests: list[str], timeout: float, log: Path) -> tuple[int | None, bool]:
        pid = os.fork()
        if pid == 0:  # the child: never returns
            code = 3
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                os.setsid()
                fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                code = self._child(tests)
            finally:
                os._exit(code)
        deadline = time.monotonic() + timeout
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status), False
            if time.monotonic() > deadline:
                os.killpg(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return None, True
            time.sleep(0.02)

    def _child(self, tests: list[str]) -> int:
        os.environ.update(_child_env(self.tree))
        sys.dont_write_bytecode = not self.write_bytecode
        sys.path.insert(0, str(self.tree.root))
        module = importlib.import_module(self.package)
        if not str(Path(module.__file__).resolve()).startswith(str(self.tree.root.resolve())):
            print(f"mutation: {self.package} imported from {module.__file__}, not the scratch copy", flush=True)
            return 4
        import pytest

        return int(pytest.main([*PYTEST_FLAGS, *tests]))
