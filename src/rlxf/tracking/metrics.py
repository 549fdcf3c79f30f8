"""Metric sinks: every step's metrics go to each configured sink (console line, JSONL file, trackers).

A sink is built from a ``SinkContext`` and has ``log(step, metrics)`` and ``close()``; it may also have
``restore(step, metrics)`` (resume: the checkpointed step's row, if the run died before logging it) and
``log_samples(step, rows)`` (logged rollouts, for trackers that show tables or text). The trackers
(TensorBoard, W&B, MLflow) live in their own modules, imported only when a run names them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from rlxf.tracking.config import LoggingConfig
from rlxf.tracking.sinks import METRIC_SINKS

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


@dataclass
class SinkContext:
    """What a sink is built from: the run directory, the ``logging`` section, the resolved config (the
    hyperparameters trackers record), and the step a resumed run restarts after (None on a fresh run)."""

    run_dir: Path
    settings: LoggingConfig = field(default_factory=LoggingConfig)
    resume_step: int | None = None
    hyperparams: dict = field(default_factory=dict)
    write: Callable[[str], None] = print

    @property
    def run_name(self) -> str:
        return self.settings.run_name or self.run_dir.resolve().name


class MetricSink(Protocol):
    def log(self, step: int, metrics: dict[str, float]) -> None: ...

    def close(self) -> None: ...


@METRIC_SINKS.register("jsonl")
class JsonlSink:
    """``metrics.jsonl``: one JSON object per step with ``step`` and the metric values."""

    def __init__(self, context: SinkContext) -> None:
        self.path = context.run_dir / "metrics.jsonl"
        self.logged_steps: set[int] = set()  # steps already in the file when the run resumed
        if context.resume_step is not None and self.path.exists():
            # Steps after the checkpoint will be run again: drop their old lines.
            kept = [
                line for line in self.path.read_text().splitlines()
                if line.strip() and json.loads(line)["step"] <= context.resume_step
            ]
            self.path.write_text("".join(line + "\n" for line in kept))
            self.logged_steps = {json.loads(line)["step"] for line in kept}
        self.handle = self.path.open("a")

    def restore(self, step: int, metrics: dict[str, float]) -> None:
        """Write ``step``'s row kept in its checkpoint, if the run died before logging it."""
        if metrics and step not in self.logged_steps:
            self.log(step, metrics)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        row = {"step": step, **{k: finite_or_none(v) for k, v in metrics.items()}}
        self.handle.write(json.dumps(row) + "\n")
        self.handle.flush()

    def close(self) -> None:
        self.handle.close()


@METRIC_SINKS.register("console")
class ConsoleSink:
    def __init__(self, context: SinkContext) -> None:
        self.write = context.write

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


def finite_or_none(value: float) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


class MetricsLogger:
    """Fans a run's metrics (and logged rollouts, and held-out per-problem results) out to its sinks."""

    def __init__(
        self, run_dir: Path, sinks: list[str], resume_step: int | None = None, write=print,
        settings: LoggingConfig | None = None, hyperparams: dict | None = None,
    ) -> None:
        from rlxf.tracking.samples import SampleLog

        settings = settings or LoggingConfig(sinks=sinks)
        context = SinkContext(Path(run_dir), settings, resume_step, hyperparams or {}, write)
        self.settings = settings
        self.sinks = [METRIC_SINKS.get(name)(context) for name in sinks]
        self.samples = SampleLog(context.run_dir / "samples.jsonl", settings.samples_max_mb, resume_step)
        self.eval_problems = SampleLog(context.run_dir / "eval_problems.jsonl", settings.samples_max_mb, resume_step)

    @classmethod
    def for_run(cls, config, resume_step: int | None, write=print) -> MetricsLogger:
        """From a run's whole config: its ``logging`` section, and the resolved config as hyperparameters."""
        return cls(Path(config.run_dir), config.logging.sinks, resume_step, write,
                   settings=config.logging, hyperparams=config.model_dump(mode="json"))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for sink in self.sinks:
            sink.log(step, metrics)

    def restore(self, step: int, metrics: dict[str, float]) -> None:
        """On resume: the checkpointed step's metrics, for sinks that lost them (a kill between the
        checkpoint and the log line)."""
        for sink in self.sinks:
            if hasattr(sink, "restore"):
                sink.restore(step, metrics)

    def samples_due(self, step: int) -> bool:
        every = self.settings.samples_every
        return bool(every) and step % every == 0

    def log_samples(self, step: int, batch, tokenizer) -> None:
        """Every ``logging.samples_every`` steps: a bounded pick of ``batch``'s trajectories (decoded
        with ``tokenizer``) to ``samples.jsonl`` and to the sinks that show tables."""
        if not self.samples_due(step):
            return
        from rlxf.tracking.rollout_rows import rollout_rows

        rows = rollout_rows(batch, tokenizer, step, self.settings.samples_per_step)
        self.samples.write(rows)
        for sink in self.sinks:
            if hasattr(sink, "log_samples"):
                sink.log_samples(step, rows)

    def log_eval_problems(self, step: int, rows: list[dict]) -> dict[str, float]:
        """Held-out per-problem results to ``eval_problems.jsonl``; returns how many problems flipped
        since the previous evaluation (``eval/flipped_to_correct``, ``eval/flipped_to_wrong``)."""
        previous = self.eval_problems.last_rows_by("problem")
        self.eval_problems.write([{"step": step, **row} for row in rows])
        if not previous:
            return {}
        was = {p: bool(r.get("correct")) for p, r in previous.items()}
        now = {r["problem"]: bool(r.get("correct")) for r in rows}
        common = was.keys() & now.keys()
        return {
            "eval/flipped_to_correct": float(sum(now[p] and not was[p] for p in common)),
            "eval/flipped_to_wrong": float(sum(was[p] and not now[p] for p in common)),
        }

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()
