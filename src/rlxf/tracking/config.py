"""The ``logging`` section of the config tree: where metrics and samples go, and how trackers name the run.

* ``sinks``          metric sinks by name (``rlxf.tracking.METRIC_SINKS``): console, jsonl, tensorboard,
  wandb, mlflow. The trackers are optional extras (``pip install rlxf[tracking]``), imported when chosen.
* ``project`` / ``run_name`` / ``tags``  how the trackers file the run (W&B project, MLflow experiment);
  ``run_name`` defaults to the run directory's name.
* ``samples_every``  steps between logged rollouts (``samples.jsonl`` and the trackers' tables); 0 = never.
* ``samples_per_step`` trajectories kept each time (one per prompt first, then more answers per prompt).
* ``samples_max_mb`` ``samples.jsonl`` rotates to ``samples.1.jsonl`` past this size, so the two files
  together stay under twice that, however long the run.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class WandbConfig(_Section):
    mode: Literal["offline", "online", "disabled"] = "offline"  # offline: files in RUN_DIR/wandb, no network
    entity: str | None = None


class MlflowConfig(_Section):
    tracking_uri: str | None = None  # default: sqlite:///RUN_DIR/mlflow.db (a local file, no server)


class LoggingConfig(_Section):
    progress_bar: bool = True
    plot: bool = True  # `rlxf train` writes RUN_DIR/plots.png at the end (needs matplotlib: rlxf[plot])
    sinks: list[str] = Field(default_factory=lambda: ["console", "jsonl"])
    project: str = "rlxf"
    run_name: str | None = None
    tags: list[str] = Field(default_factory=list)
    samples_every: int = Field(10, ge=0)
    samples_per_step: int = Field(8, ge=1)
    samples_max_mb: float = Field(20.0, gt=0)
    wandb: WandbConfig = Field(default_factory=WandbConfig)
    mlflow: MlflowConfig = Field(default_factory=MlflowConfig)

    @field_validator("sinks")
    @classmethod
    def _known_sinks(cls, names: list[str]) -> list[str]:
        from rlxf.tracking.metrics import METRIC_SINKS

        unknown = [n for n in names if n not in METRIC_SINKS.names()]
        if unknown:
            raise ValueError(f"unknown metric sink(s) {unknown}; known: {METRIC_SINKS.names()}")
        return names
