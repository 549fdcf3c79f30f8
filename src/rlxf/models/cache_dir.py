"""Where rlxf keeps what it builds once per machine (the tiny models): a user cache directory, not the
folder the command runs from.

``$RLXF_CACHE_DIR`` when set, else ``$XDG_CACHE_HOME/rlxf``, else ``~/.cache/rlxf`` (the XDG base
directory default). Tests point ``RLXF_CACHE_DIR`` at a temporary folder (tests/conftest.py).
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "RLXF_CACHE_DIR"


def user_cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "rlxf"
