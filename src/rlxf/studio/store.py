"""The studio's embedded store: one SQLite file in WAL mode, every write its own committed transaction.

Tables: ``campaigns`` (a set of pairs to label, with its provenance: source, checkpoint, sampling
parameters, overlap), ``pairs`` (a prompt and two responses, in a fixed canonical order ``first`` /
``second``), ``issues`` (a pair handed to one labeller, with a random token and the left/right order it
was shown in), ``labels`` (one verdict per issue; an undone label stays, marked), ``ai_labels`` (a
judge's or reward model's verdict on a pair). WAL with ``synchronous=FULL``: a label whose request
returned survives a killed server (SIGKILL, power loss of the process).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rlxf.errors import RlxfError

SCHEMA = """
CREATE TABLE IF NOT EXISTS campaigns (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, source TEXT NOT NULL, checkpoint TEXT,
    sampling TEXT NOT NULL DEFAULT '{}', overlap INTEGER NOT NULL DEFAULT 1, created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS pairs (
    id INTEGER PRIMARY KEY, campaign_id INTEGER NOT NULL REFERENCES campaigns(id), position INTEGER NOT NULL,
    prompt TEXT NOT NULL, first TEXT NOT NULL, second TEXT NOT NULL, meta TEXT NOT NULL DEFAULT '{}',
    UNIQUE (campaign_id, position)
);
CREATE TABLE IF NOT EXISTS issues (
    token TEXT PRIMARY KEY, pair_id INTEGER NOT NULL REFERENCES pairs(id), labeller TEXT NOT NULL,
    swapped INTEGER NOT NULL, issued REAL NOT NULL, closed INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS issues_open ON issues(labeller, closed);
CREATE INDEX IF NOT EXISTS issues_by_pair ON issues(pair_id, closed);
CREATE TABLE IF NOT EXISTS labels (
    id INTEGER PRIMARY KEY, campaign_id INTEGER NOT NULL, pair_id INTEGER NOT NULL REFERENCES pairs(id),
    labeller TEXT NOT NULL, verdict TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '', swapped INTEGER NOT NULL,
    issue_token TEXT NOT NULL REFERENCES issues(token), created REAL NOT NULL, undone INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX IF NOT EXISTS one_label_per_issue ON labels(issue_token) WHERE undone = 0;
CREATE INDEX IF NOT EXISTS labels_by_pair ON labels(pair_id, undone);
CREATE TABLE IF NOT EXISTS ai_labels (
    id INTEGER PRIMARY KEY, campaign_id INTEGER NOT NULL, pair_id INTEGER NOT NULL REFERENCES pairs(id),
    judge TEXT NOT NULL, verdict TEXT NOT NULL, score_first REAL, score_second REAL, created REAL NOT NULL,
    UNIQUE (pair_id, judge)
);
"""


class LabelStoreError(RlxfError, OSError):
    """The label store cannot be created or opened (a read-only folder, a file that is not a database)."""

    exit_code = 2  # refused before the studio serves anything


class Store:
    """A thread-safe handle on the studio database (one connection, serialised by a lock: the studio's
    writes are a few per second, so one writer never waits long)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.lock = threading.RLock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.conn = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
            self.conn.row_factory = sqlite3.Row
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=FULL")
            self.conn.execute("PRAGMA foreign_keys=ON")
            self.conn.execute("PRAGMA busy_timeout=5000")
            self.conn.executescript(SCHEMA)
        except (OSError, sqlite3.Error) as err:  # a folder that cannot be made, a file that is no database
            raise LabelStoreError(f"studio: the label store {self.path} cannot be opened ({err}); give --db PATH, "
                                  "a new file in a writable folder") from err

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on any error): all or nothing."""
        with self.lock:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield self.conn
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")

    def query(self, sql: str, params: tuple | dict = ()) -> list[dict]:
        with self.lock:
            return [dict(row) for row in self.conn.execute(sql, params).fetchall()]

    def one(self, sql: str, params: tuple | dict = ()) -> dict | None:
        rows = self.query(sql, params)
        return rows[0] if rows else None

    def close(self) -> None:
        with self.lock:
            self.conn.close()


def now() -> float:
    return time.time()


def as_json(value) -> str:
    return json.dumps(value, sort_keys=True, default=str)
