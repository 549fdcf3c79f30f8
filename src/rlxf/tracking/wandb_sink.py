"""``logging.sinks: [wandb]``: Weights & Biases, offline by default (``logging.wandb.mode``).

Offline, the run's files land in ``RUN_DIR/wandb`` and nothing touches the network; ``wandb sync
RUN_DIR/wandb/offline-run-*`` uploads them later. The resolved config is the run's config, logged
rollouts a ``wandb.Table`` per step. A resumed run reopens the same W&B run id (``resume="allow"``)
and sends only the steps after the last one W&B was sent.
"""

from __future__ import annotations

import uuid

from rlxf.tracking.metrics import METRIC_SINKS, SinkContext, finite_or_none
from rlxf.tracking.tracker_run import TrackerRun, require


@METRIC_SINKS.register("wandb")
class WandbSink:
    def __init__(self, context: SinkContext) -> None:
        wandb = require("wandb", "wandb")
        self.wandb = wandb
        self.record = TrackerRun(context.run_dir, "wandb", context.resume_step)
        run_id = self.record.run_id or uuid.uuid4().hex[:8]
        settings = context.settings
        self.run = wandb.init(
            project=settings.project, entity=settings.wandb.entity, name=context.run_name, tags=settings.tags,
            config=context.hyperparams, dir=str(context.run_dir), mode=settings.wandb.mode, id=run_id,
            resume="allow", settings=wandb.Settings(console="off", quiet=True, x_disable_stats=True),
            reinit="create_new",
        )
        self.record.start(run_id)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        if not self.record.is_new(step):
            return
        values = {k: finite_or_none(v) for k, v in metrics.items()}
        self.run.log({k: v for k, v in values.items() if v is not None}, step=step)
        self.record.sent(step)

    def restore(self, step: int, metrics: dict[str, float]) -> None:
        if metrics:
            self.log(step, metrics)

    def log_samples(self, step: int, rows: list[dict]) -> None:
        if not self.record.is_new(step):
            return
        columns = list(dict.fromkeys(k for row in rows for k in row))
        table = self.wandb.Table(columns=columns, data=[[_cell(row.get(c)) for c in columns] for row in rows])
        # Samples go with the step's metrics (logged after them): W&B keeps one row per step.
        self.run.log({"rollouts": table}, step=step, commit=False)

    def close(self) -> None:
        self.run.finish()


def _cell(value):
    return value if value is None or isinstance(value, (str, int, float, bool)) else str(value)
