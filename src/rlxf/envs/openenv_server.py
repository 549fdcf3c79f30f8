"""An OpenEnv server that rlxf starts itself: ``uvicorn APP`` on a free loopback port, one per app and process.

``APP`` is an import string (``my_env.server.app:app``, from an installed environment package or a folder on
``PYTHONPATH``). The server is started on first use, checked on ``/health``, restarted when it has died, and
stopped with the run (at the process's exit, or ``stop_servers()``). A server that does not answer
``/health`` within ``start_timeout_s`` is killed and named, with the last line of what it printed.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from rlxf.errors import RlxfError
from rlxf.serving.ports import bound_socket


class OpenEnvServerError(RlxfError, RuntimeError):
    """An OpenEnv server that would not start, died, or stopped answering, after its retries."""


class LocalServer:
    def __init__(self, app: str, host: str = "127.0.0.1", start_timeout_s: float = 60.0) -> None:
        self.app, self.host, self.start_timeout_s = app, host, start_timeout_s
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.starts = 0
        self.lock = threading.Lock()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ensure(self) -> str:
        """The server's URL, (re)starting it when it is not running."""
        with self.lock:
            if not self.alive():
                self._start()
            return self.url

    def restart(self) -> str:
        with self.lock:
            self._kill()
            self._start()
            return self.url

    def _start(self) -> None:
        sock = bound_socket(self.host, 0)
        port = sock.getsockname()[1]
        sock.close()  # uvicorn binds it again; a loopback port freed a moment ago stays free in practice
        self.log = tempfile.TemporaryFile()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", self.app, "--host", self.host, "--port", str(port), "--log-level", "warning"],
            stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.starts += 1
        self.url = f"http://{self.host}:{port}"
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise OpenEnvServerError(f"OpenEnv server {self.app!r} exited with status {self.proc.returncode} "
                                         f"while starting: {self.last_line()}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        self._kill()
        raise OpenEnvServerError(f"OpenEnv server {self.app!r} did not answer /health within "
                                 f"start_timeout_s={self.start_timeout_s}: {self.last_line()}")

    def last_line(self) -> str:
        try:
            self.log.seek(0)
            lines = [line for line in self.log.read().decode(errors="replace").splitlines() if line.strip()]
        except (OSError, ValueError, AttributeError):
            return ""
        return lines[-1][:300] if lines else "(it printed nothing)"

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(5)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait()
        self.proc = None

    def stop(self) -> None:
        with self.lock:
            self._kill()


SERVERS: dict[tuple[str, str], LocalServer] = {}
_SERVERS_LOCK = threading.Lock()


def local_server(app: str, host: str, start_timeout_s: float) -> LocalServer:
    with _SERVERS_LOCK:
        key = (app, host)
        if key not in SERVERS:
            SERVERS[key] = LocalServer(app, host, start_timeout_s)
        return SERVERS[key]


@atexit.register
def stop_servers() -> None:
    """Stop every server this process started (the run is over)."""
    with _SERVERS_LOCK:
        servers = list(SERVERS.values())
        SERVERS.clear()
    for server in servers:
        server.stop()
