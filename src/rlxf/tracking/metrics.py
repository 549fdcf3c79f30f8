"""Metric sinks: every step's metrics go to each configured sink (console line, JSONL file, ...)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Protocol

from rlxf.registry import Registry

METRIC_SINKS: Registry = Registry("metric sink")

# The compact console line shows these, in this order, when present.
CONSOLE_KEYS = [
    ("reward/mean", "reward"),
    ("train/loss", "loss"),
    ("reward/correct", "acc"),
    ("eval/accuracy", "eval_acc"),
    ("policy/kl", "kl"),
    ("policy/entropy", "ent"),
    ("response/length_mean", "len"),
    ("time/step", "s/step"),
]


class MetricSink(Protocol):
    def log(self, step: int, metrics: dict[str, float]) -> None: ...

    def close(self) -> None: ...


@METRIC_SINKS.register("jsonl")
class JsonlSink:
    """``metrics.jsonl``: one JSON object per step with ``step`` and the metric values."""

    def __init__(self, run_dir: Path, resume_step: int | None = None) -> None:
        self.path = run_dir / "metrics.jsonl"
        if resume_step is not None and self.path.exists():
            # Steps after the checkpoint will be run again: drop their old lines.
            kept = [
                line for line in self.path.read_text().splitlines()
                if line.strip() and json.loads(line)["step"] <= resume_step
            ]
            self.path.write_text("".join(line + "\n" for line in kept))
            self.logged_steps = {json.loads(line)["step"] for line in kept}
        self.handle = self.path.open("a")

    logged_steps: set[int] = set()  # steps already in the file when the run resumed

    def restore(self, step: int, metrics: dict[str, float]) -> None:
        """Write ``step``'s row kept in its checkpoint, if the run died before logging it."""
        if metrics and step not in self.logged_steps:
            self.log(step, metrics)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        row = {"step": step, **{k: _finite(v) for k, v in metrics.items()}}
        self.handle.write(json.dumps(row) + "\n")
        self.handle.flush()

    def close(self) -> None:
        self.handle.close()


@METRIC_SINKS.register("console")
class ConsoleSink:
    def __init__(self, run_dir: Path, resume_step: int | None = None, write=print) -> None:
        self.write = write

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.write(format_metrics_line(step, metrics))

    def close(self) -> None:
        pass


def format_metrics_line(step: int, metrics: dict[str, float]) -> str:
    parts = [f"step {step:>4}"]
    for key, label in CONSOLE_KEYS:
        if key in metrics:
            parts.append(f"{label} {metrics[key]:.3g}")
    if metrics.get("monitor/alarm"):
        parts.append("ALARM: reward up while held-out score down")
    return " | ".join(parts)


def _finite(value: float) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


class MetricsLogger:
    def __init__(self, run_dir: Path, sinks: list[str], resume_step: int | None = None, write=print) -> None:
        self.sinks = []
        for name in sinks:
            factory = METRIC_SINKS.get(name)
            if name == "console":
                self.sinks.append(factory(run_dir, resume_step, write=write))
            else:
                self.sinks.append(factory(run_dir, resume_step))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for sink in self.sinks:
            sink.log(step, metrics)

    def restore(self, step: int, metrics: dict[str, float]) -> None:
        """On resume: the checkpointed step's metrics, for sinks that lost them (a kill between the
        checkpoint and the log line)."""
        for sink in self.sinks:
            if hasattr(sink, "restore"):
                sink.restore(step, metrics)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()
