"""``logging.sinks: [wandb]``: Weights & Biases, offline by default (``logging.wandb.mode``).

Offline, the run's files land in ``RUN_DIR/wandb`` and nothing touches the network; ``wandb sync
RUN_DIR/wandb/offline-run-*`` uploads them later. The resolved config is the run's config, logged
rollouts a ``wandb.Table`` per step. A resumed run reopens the same W&B run id (``resume="allow"``)
and sends only the steps after the last one W&B was sent.
"""

from __future__ import annotations

import uuid

from rlxf.tracking.metrics import SinkContext
from rlxf.tracking.sinks import METRIC_SINKS
from rlxf.tracking.tracker_run import SentOnceSink, TrackerRun, require


@METRIC_SINKS.register("wandb")
class WandbSink(SentOnceSink):
    def __init__(self, context: SinkContext) -> None:
        wandb = require("wandb", "wandb")
        self.wandb = wandb
        self.record = TrackerRun(context.run_dir, "wandb", context.resume_step)
        run_id = self.record.run_id or uuid.uuid4().hex[:8]
        settings = context.settings
        self.run = wandb.init(
            project=settings.project, entity=settings.wandb.entity, name=context.run_name, tags=settings.tags,
            config=context.hyperparams, dir=str(context.run_dir), mode=settings.wandb.mode, id=run_id,
            resume="allow", settings=wandb.Settings(console="off", silent=True, x_disable_stats=True),
            reinit="create_new",
        )
        self.record.start(run_id)

    def send_metrics(self, step: int, values: dict[str, float]) -> None:
        self.run.log(values, step=step)

    def send_samples(self, step: int, rows: list[dict]) -> None:
        columns = list(dict.fromkeys(k for row in rows for k in row))
        table = self.wandb.Table(columns=columns, data=[[_cell(row.get(c)) for c in columns] for row in rows])
        # Samples go with the step's metrics (logged after them): W&B keeps one row per step.
        self.run.log({"rollouts": table}, step=step, commit=False)

    def close(self) -> None:
        self.run.finish()


def _cell(value):
    return value if value is None or isinstance(value, (str, int, float, bool)) else str(value)
