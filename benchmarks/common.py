"""Shared helpers for benchmark scripts: alternating timed runs and JSON output."""

from __future__ import annotations

import json
import re
import statistics
import time
from collections.abc import Callable


def alternate(
    runs: dict[str, Callable[[], object]], reps: int, warmup: int = 1, sync: Callable[[], object] = lambda: None
) -> dict[str, list[float]]:
    """Time each callable ``reps`` times, interleaved (a, b, a, b, ...) so background load hits all alike.

    ``sync`` runs before each clock read (``torch.cuda.synchronize`` on a GPU: kernels are asynchronous).
    """
    for _ in range(warmup):
        for fn in runs.values():
            fn()
    sync()
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(reps):
        for name, fn in runs.items():
            start = time.perf_counter()
            fn()
            sync()
            seconds[name].append(time.perf_counter() - start)
    return seconds


def median(values: list[float]) -> float:
    return statistics.median(values)


def emit(result: dict) -> None:
    print(json.dumps(result, indent=1))


def operands(text: str) -> tuple[int, int]:
    """The first two numbers of a sums prompt ("What is 47 plus 8?", "47+8=")."""
    a, b = (int(n) for n in re.findall(r"\d+", text)[:2])
    return a, b
