"""What a sweep's output folder already holds for one seed, and whether it ran with the config asked for now.

A seed's run folder is ``finished`` (``summary.json`` without ``stopped_by``: the run reached its last step),
``partial`` (its ``config.yaml`` is there but the run did not finish: cut by a signal, a kill or a crash; it
continues from its last checkpoint through ``rlxf train --resume``), or ``new`` (nothing there yet). A
finished or partial seed is continued only when its saved config is the one the sweep would run now: a
sweep rerun with other overrides into the same folder would otherwise mix two experiments in one table.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FINISHED, PARTIAL, NEW = "finished", "partial", "new"


def read_summary(run_dir: Path) -> dict | None:
    """``summary.json`` of a run, or None when it is missing or unreadable (a run killed while writing it)."""
    try:
        return json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None


def seed_state(run_dir: Path) -> str:
    summary = read_summary(run_dir)
    if summary is not None and not summary.get("stopped_by"):
        return FINISHED
    return PARTIAL if (run_dir / "config.yaml").exists() else NEW


def _flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict) and tree:
        out: dict[str, Any] = {}
        for key, value in tree.items():
            out.update(_flat(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: tree}


_ABSENT = "(absent)"


def config_difference(saved: dict, wanted: dict, most: int = 3) -> str | None:
    """The keys whose values differ between two resolved configs (``Config.model_dump(mode="json")``), as
    ``key is A on disk, B now``; None when they are equal."""
    on_disk, now = _flat(saved), _flat(wanted)
    keys = [k for k in sorted(on_disk.keys() | now.keys()) if on_disk.get(k, _ABSENT) != now.get(k, _ABSENT)]
    if not keys:
        return None
    said = "; ".join(f"{k} is {on_disk.get(k, _ABSENT)!r} on disk, {now.get(k, _ABSENT)!r} now" for k in keys[:most])
    return said + (f" (and {len(keys) - most} more keys)" if len(keys) > most else "")
