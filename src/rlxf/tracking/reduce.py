"""Combining a metric over micro-batches and optimizer steps: extremes stay extremes.

``ratio_max`` of a step is the largest ratio any token had, not the mean of per-micro-batch maxima
(which reads as a contradiction next to ``approx_kl``); everything else is a mean.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

# name suffix -> how values of that metric combine; the rest average
REDUCERS: dict[str, Callable[[list[float]], float]] = {"_max": max, "_min": min}


def reduce_metric(name: str, values: list[float]) -> float:
    for suffix, reduce in REDUCERS.items():
        if name.endswith(suffix):
            return float(reduce(values))
    return sum(values) / len(values)


def reduce_metrics(history: Iterable[dict[str, float]]) -> dict[str, float]:
    """One dict from many (a metric missing from some dicts combines the values it has)."""
    values: dict[str, list[float]] = {}
    for metrics in history:
        for name, value in metrics.items():
            values.setdefault(name, []).append(value)
    return {name: reduce_metric(name, vs) for name, vs in values.items()}
