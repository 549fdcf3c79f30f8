"""What ``GET /metrics`` of the reward server reports: counts, latency percentiles, errors, memory."""

from __future__ import annotations

import collections
import threading
import time


def resident_bytes() -> int:
    """This process's resident set size (0 where /proc is missing and psutil is not installed)."""
    try:
        with open("/proc/self/statm") as statm:
            import os

            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        try:
            import psutil

            return int(psutil.Process().memory_info().rss)
        except ImportError:
            return 0


def percentile(sorted_values: list[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (0 < q <= 100) of an ascending list; 0.0 when empty."""
    if not sorted_values:
        return 0.0
    rank = max(1, -(-len(sorted_values) * q // 100))  # ceil(n * q / 100), at least the first
    return sorted_values[int(rank) - 1]


class ServerMetrics:
    """Thread-safe counters; latencies of the last ``window`` requests (bounded memory under a soak)."""

    def __init__(self, window: int = 2048) -> None:
        self.started = time.monotonic()
        self.requests = 0
        self.samples = 0
        self.batches = 0  # reward calls; fewer than requests when concurrent requests were merged
        self.in_flight = 0
        self.errors: collections.Counter[int] = collections.Counter()  # status -> count
        self.latencies: collections.deque[float] = collections.deque(maxlen=window)
        self._lock = threading.Lock()

    def started_request(self) -> None:
        with self._lock:
            self.in_flight += 1

    def finished_request(self, status: int, seconds: float, samples: int) -> None:
        with self._lock:
            self.in_flight -= 1
            self.requests += 1
            self.latencies.append(seconds)
            if status >= 400:
                self.errors[status] += 1
            else:
                self.samples += samples

    def scored_batch(self) -> None:
        with self._lock:
            self.batches += 1

    def snapshot(self) -> dict:
        with self._lock:
            ordered = sorted(self.latencies)
            return {
                "uptime_seconds": round(time.monotonic() - self.started, 3),
                "requests": self.requests, "samples_scored": self.samples, "reward_calls": self.batches,
                "in_flight": self.in_flight, "errors": sum(self.errors.values()),
                "errors_by_status": {str(k): v for k, v in sorted(self.errors.items())},
                "latency_ms": {f"p{q}": round(percentile(ordered, q) * 1e3, 3) for q in (50, 90, 99)}
                | {"window": len(ordered)},
                "rss_bytes": resident_bytes(),
            }


class MetricsMiddleware:
    """Counts every request to ``path`` with its final status and latency, whoever answered it (the
    body limit's 413 included); the route leaves the sample count in ``scope["state"]["samples"]``."""

    def __init__(self, app, metrics: ServerMetrics, path: str) -> None:
        self.app, self.metrics, self.path = app, metrics, path

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["path"].rstrip("/") != self.path:
            return await self.app(scope, receive, send)
        start, status = time.perf_counter(), 500
        self.metrics.started_request()

        async def send_and_note(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            samples = scope.get("state", {}).get("samples", 0)
            self.metrics.finished_request(status, time.perf_counter() - start, samples)
