"""Serving the studio with uvicorn: loopback unless told otherwise, and then only with a token."""

from __future__ import annotations

from pathlib import Path

import uvicorn

from rlxf.config_error import ConfigError
from rlxf.loops.run_dir import check_writable_dir, folder_problem, writable_dir
from rlxf.serving.ports import bound_socket
from rlxf.studio.app import StudioSettings, make_app
from rlxf.studio.security import token_for_bind

DB_NAME = "studio.sqlite"


def serve(runs_dir: str | Path, host: str = "127.0.0.1", port: int = 8765, token: str | None = None,
          db_path: str | Path | None = None, print_fn=print) -> None:
    runs_dir = Path(runs_dir)
    token = token_for_bind(host, token)
    db = Path(db_path) if db_path else runs_dir / DB_NAME
    # folders that cannot be made or written: one line, before the port is taken or anything is created (a
    # read-only RUNS_DIR is fine to watch when --db puts the label store elsewhere)
    if runs_dir.exists() and not runs_dir.is_dir():
        raise ConfigError(f"studio {runs_dir}: RUNS_DIR is a file, not a folder of runs")
    problem = folder_problem(db.parent)
    if problem:
        raise ConfigError(f"studio: the label store {db} cannot be made: its folder {db.parent} {problem}; "
                          "give --db PATH in a writable folder")
    if not runs_dir.is_dir():
        check_writable_dir(runs_dir, "RUNS_DIR")
    sock = bound_socket(host, port)  # a port that is taken is one line, before any URL is shown
    try:
        if not runs_dir.is_dir():
            writable_dir(runs_dir, "RUNS_DIR")
        settings = StudioSettings(runs_dir=runs_dir, db_path=db, token=token)
        app = make_app(settings)
        shown_host = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        url = f"http://{shown_host}:{sock.getsockname()[1]}/" + (f"?token={token}" if token else "")
        print_fn(f"rlxf studio: runs in {runs_dir}, labels in {settings.db_path}\nopen {url}")
        uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2)).run(sockets=[sock])
    finally:
        sock.close()
