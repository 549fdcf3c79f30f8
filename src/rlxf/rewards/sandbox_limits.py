"""Limits and results of one sandboxed run (see ``rlxf.rewards.sandbox`` and docs/sandbox.md)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SandboxLimits:
    """Per-run limits. CPU/memory/file limits are per process (``setrlimit``); the rest are per run."""

    cpu_seconds: float = 5.0  # RLIMIT_CPU of each process (SIGXCPU, then SIGKILL one second later)
    wall_seconds: float = 10.0  # whole run, enforced by the parent; everything is killed at the deadline
    memory_mb: int = 512  # RLIMIT_AS (address space) of each process
    max_processes: int = 16  # processes of the run at once (RLIMIT_NPROC where enforced + watchdog)
    max_file_mb: int = 16  # RLIMIT_FSIZE: largest file a process may write
    max_output_bytes: int = 1_000_000  # stdout + stderr kept; the run is killed once it writes more
    max_open_files: int = 64  # RLIMIT_NOFILE
    max_disk_mb: int = 64  # the tmpfs /tmp that holds a job's work directories (namespace modes): all files

    def __post_init__(self) -> None:
        for name in (
            "cpu_seconds",
            "wall_seconds",
            "memory_mb",
            "max_processes",
            "max_file_mb",
            "max_output_bytes",
            "max_open_files",
            "max_disk_mb",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"SandboxLimits.{name} must be > 0, got {getattr(self, name)!r}")


@dataclass
class SandboxResult:
    returncode: int | None  # exit code of the candidate; -N when killed by signal N; None if it never ran
    stdout: str
    stderr: str
    timed_out: bool = False  # wall clock or CPU limit hit
    # None for a normal exit (any returncode); otherwise why the run was stopped: "wall_timeout",
    # "cpu_limit", "output_limit", "process_limit", "file_size_limit", "signal:<NAME>", "sandbox_error"
    killed_reason: str | None = None
    wall_seconds: float = 0.0
    output_truncated: bool = False
    isolation: tuple[str, ...] = ()  # layers that were actually in force, e.g. ("pid_ns", "net_ns", ...)
    error: str | None = None  # set when the sandbox itself failed (the candidate is then not trusted)
    pids: tuple[int, ...] = field(default=(), repr=False)  # host pids of candidate processes seen

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.killed_reason is None and self.error is None
