"""A size-bounded JSONL log (``samples.jsonl``, ``eval_problems.jsonl``): rows with a ``step``.

When the file would pass ``max_mb`` it is renamed to ``NAME.1.jsonl`` (replacing the previous one) and a
fresh file starts, so the two together never hold more than twice the cap, however long the run. A
resumed run first drops the rows of steps after its checkpoint (they are run again).
"""

from __future__ import annotations

import json
from pathlib import Path


class SampleLog:
    def __init__(self, path: Path, max_mb: float, resume_step: int | None = None) -> None:
        self.path = path
        self.rotated = path.with_suffix(".1" + path.suffix)
        self.max_bytes = int(max_mb * 1024 * 1024)
        if resume_step is not None:
            for file in (self.path, self.rotated):
                if file.exists():
                    kept = [r for r in _read(file) if r["step"] <= resume_step]
                    file.write_text("".join(json.dumps(r) + "\n" for r in kept))

    def write(self, rows: list[dict]) -> None:
        text = "".join(json.dumps(row, default=str) + "\n" for row in rows)
        size = self.path.stat().st_size if self.path.exists() else 0
        if size and size + len(text.encode()) > self.max_bytes:
            self.path.replace(self.rotated)
        with self.path.open("a") as handle:
            handle.write(text)

    def rows(self) -> list[dict]:
        """Every row still kept, oldest first."""
        return [r for file in (self.rotated, self.path) if file.exists() for r in _read(file)]

    def last_rows_by(self, key: str) -> dict:
        """The rows of the latest step logged, keyed by ``row[key]``."""
        for file in (self.path, self.rotated):
            rows = _read(file) if file.exists() else []
            if rows:
                last = max(r["step"] for r in rows)
                return {r[key]: r for r in rows if r["step"] == last}
        return {}


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
