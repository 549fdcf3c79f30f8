"""The ``logging`` section of the config tree: where metrics and samples go, and how trackers name the run.

* ``sinks``          metric sinks by name (``rlxf.tracking.sinks.METRIC_SINKS``): console, jsonl, tensorboard,
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

from rlxf.tracking.sinks import METRIC_SINKS


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class WandbConfig(_Section):
    """The wandb sink."""

    mode: Literal["offline", "online", "disabled"] = Field("offline", description="offline: files in "
                                                           "RUN_DIR/wandb, no network")
    entity: str | None = Field(None, description="W&B entity (team or user); null = the account's default")


class MlflowConfig(_Section):
    """The mlflow sink."""

    tracking_uri: str | None = Field(None, description="null = sqlite:///RUN_DIR/mlflow.db (a local file, no server)")


class LoggingConfig(_Section):
    progress_bar: bool = Field(True, description="a progress bar on the console")
    plot: bool = Field(True, description="rlxf train writes RUN_DIR/plots.png at the end (needs rlxf[plot])")
    sinks: list[str] = Field(default_factory=lambda: ["console", "jsonl"], description="metric sinks: console, jsonl, "
                             "tensorboard, wandb, mlflow (trackers: pip install 'rlxf[tracking]')")
    project: str = Field("rlxf", description="W&B project / MLflow experiment")
    run_name: str | None = Field(None, description="the trackers' run name; null = the run directory's name")
    tags: list[str] = Field(default_factory=list, description="the trackers' tags")
    samples_every: int = Field(10, ge=0, description="steps between logged rollouts (samples.jsonl); 0 = never")
    samples_per_step: int = Field(8, ge=1, description="trajectories kept each time (one per prompt first)")
    samples_max_mb: float = Field(20.0, gt=0, description="samples.jsonl rotates to samples.1.jsonl past this size")
    wandb: WandbConfig = Field(default_factory=WandbConfig, description=WandbConfig.__doc__)
    mlflow: MlflowConfig = Field(default_factory=MlflowConfig, description=MlflowConfig.__doc__)

    @field_validator("sinks")
    @classmethod
    def _known_sinks(cls, names: list[str]) -> list[str]:
        unknown = [n for n in names if n not in METRIC_SINKS.names()]
        if unknown:
            raise ValueError(f"unknown metric sink(s) {unknown}; known: {METRIC_SINKS.names()}")
        return names
