"""What the tracker sinks share: the missing-library message, flattened hyperparameters, and the
record of a tracker run that lets a resumed rlxf run continue it.

``RUN_DIR/tracking/NAME.json`` holds the tracker's run id and the last step it was sent. A resumed rlxf
run reopens that tracker run and sends only steps after it: the tracker never sees a step twice (steps
between the checkpoint and a crash keep their first values there; ``metrics.jsonl`` has the re-run's).
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import ModuleType

from rlxf.errors import MissingPackageError
from rlxf.tracking.metrics import finite_or_none


def require(module: str, sink: str) -> ModuleType:
    """Import ``module`` for ``sink``, or fail with what to install."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise MissingPackageError(
            f"logging.sinks has {sink!r}, which needs the {module.split('.')[0]!r} package: "
            f"pip install 'rlxf[tracking]' (or drop {sink!r} from logging.sinks)"
        ) from err


def flatten(tree: dict, prefix: str = "") -> dict[str, str | int | float | bool]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``; lists and None become strings (what trackers accept)."""
    flat: dict[str, str | int | float | bool] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten(value, name + "."))
        elif isinstance(value, (bool, int, float, str)):
            flat[name] = value
        else:
            flat[name] = json.dumps(value)
    return flat


class TrackerRun:
    """A tracker's run id and the last step it was sent, kept in the run directory."""

    def __init__(self, run_dir: Path, tracker: str, resume_step: int | None) -> None:
        self.path = run_dir / "tracking" / f"{tracker}.json"
        saved = json.loads(self.path.read_text()) if resume_step is not None and self.path.exists() else {}
        self.run_id: str | None = saved.get("run_id")
        self.last_step: int = saved.get("last_step", -1)

    @property
    def resumed(self) -> bool:
        return self.run_id is not None

    def start(self, run_id: str) -> None:
        self.run_id = run_id
        self._save()

    def is_new(self, step: int) -> bool:
        """Whether ``step`` is past what the tracker already holds."""
        return step > self.last_step

    def sent(self, step: int) -> None:
        self.last_step = max(self.last_step, step)
        self._save()

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps({"run_id": self.run_id, "last_step": self.last_step}))


class SentOnceSink:
    """Base of the sinks whose tracker run outlives a resume (W&B, MLflow): each step is sent once.
    A subclass sets ``self.record`` and implements ``send_metrics`` (finite values only) and ``send_samples``."""

    record: TrackerRun

    def send_metrics(self, step: int, values: dict[str, float]) -> None:
        raise NotImplementedError

    def send_samples(self, step: int, rows: list[dict]) -> None:
        raise NotImplementedError

    def log(self, step: int, metrics: dict[str, float]) -> None:
        if self.record.is_new(step):
            finite = {k: finite_or_none(v) for k, v in metrics.items()}
            self.send_metrics(step, {k: v for k, v in finite.items() if v is not None})
            self.record.sent(step)

    def restore(self, step: int, metrics: dict[str, float]) -> None:
        if metrics:
            self.log(step, metrics)

    def log_samples(self, step: int, rows: list[dict]) -> None:
        if self.record.is_new(step):
            self.send_samples(step, rows)
