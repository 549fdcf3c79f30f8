"""Prompt datasets from JSONL or Parquet files: ``prompt`` (text) or ``messages`` (chat) plus metadata."""

from __future__ import annotations

import json
from pathlib import Path

from rlxf.data.tasks import TASKS, TaskSplits
from rlxf.errors import RlxfError


class DatasetError(RlxfError, ValueError):
    """A dataset file or row that cannot be used; the message names the file and the row."""

    exit_code = 2  # a usage mistake, like a bad recipe


def read_records(path: str | Path) -> list[dict]:
    """The raw JSON objects of a JSONL or Parquet file (row ``i`` is line / record ``i + 1``)."""
    path = Path(path)
    if not path.exists():
        raise DatasetError(f"dataset {str(path)!r} does not exist")
    if path.suffix == ".parquet":
        return _read_parquet(path)
    if path.suffix in (".jsonl", ".json"):
        return _read_jsonl(path)
    raise DatasetError(f"dataset {str(path)!r}: expected .jsonl or .parquet")


def read_rows(path: str | Path) -> list[dict]:
    rows = read_records(path)
    for number, row in enumerate(rows, start=1):
        validate_row(row, f"{path}:{number}")
    return rows


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    with path.open() as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise DatasetError(f"{path}:{number}: not valid JSON ({err.msg})") from None
            if not isinstance(row, dict):
                raise DatasetError(f"{path}:{number}: a row must be a JSON object")
            rows.append(row)
    return rows


def _read_parquet(path: Path) -> list[dict]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DatasetError("reading Parquet needs pyarrow: pip install 'rlxf[parquet]'") from None
    return pq.read_table(path).to_pylist()


def validate_row(row: dict, where: str) -> None:
    if "prompt" in row:
        if not isinstance(row["prompt"], str):
            raise DatasetError(f"{where}: `prompt` must be a string")
        return
    messages = row.get("messages")
    if messages is None:
        raise DatasetError(f"{where}: a row needs `prompt` (text) or `messages` (chat)")
    if not isinstance(messages, list) or not all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        for m in messages
    ):
        raise DatasetError(f"{where}: `messages` must be a list of {{role, content}} strings")


def split_files(read, path: str, eval_path: str | None, eval_size: int) -> TaskSplits:
    """Rows ``read(path)``; held-out rows from ``read(eval_path)`` or, without one, the last ``eval_size`` rows."""
    rows = read(path)
    if eval_path:
        return TaskSplits(train=rows, eval=read(eval_path))
    if eval_size >= len(rows):
        raise DatasetError(f"dataset {path!r} has {len(rows)} rows: too few to hold out {eval_size}")
    return TaskSplits(train=rows[:-eval_size], eval=rows[-eval_size:])


@TASKS.register("file")
def file_task(seed: int, eval_size: int, path: str, eval_path: str | None = None) -> TaskSplits:
    """Prompt rows from ``path`` (see ``split_files`` for the held-out split)."""
    return split_files(read_rows, path, eval_path, eval_size)
