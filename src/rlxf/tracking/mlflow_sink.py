"""``logging.sinks: [mlflow]``: MLflow, with a local SQLite store by default (no server, no network).

The store is ``logging.mlflow.tracking_uri`` (default ``sqlite:///RUN_DIR/mlflow.db``; point several
runs at one file to compare them in ``mlflow ui --backend-store-uri ...``). The experiment is
``logging.project``, the run name ``logging.run_name``, each of ``logging.tags`` a tag; the resolved
config is logged as params, logged rollouts as ``samples/step_NNNNNN.jsonl`` artifacts. A resumed run
reopens the same MLflow run and sends only the steps after the last one MLflow was sent.
"""

from __future__ import annotations

import json
import time

from rlxf.tracking.metrics import SinkContext
from rlxf.tracking.sinks import METRIC_SINKS
from rlxf.tracking.tracker_run import SentOnceSink, TrackerRun, flatten, require

PARAMS_PER_CALL = 100  # MLflow's log_batch limit
PARAM_VALUE_CHARS = 6000


def default_tracking_uri(context: SinkContext) -> str:
    return f"sqlite:///{(context.run_dir / 'mlflow.db').resolve()}"


@METRIC_SINKS.register("mlflow")
class MlflowSink(SentOnceSink):
    def __init__(self, context: SinkContext) -> None:
        require("mlflow", "mlflow")
        import logging

        from mlflow.tracking import MlflowClient

        logging.getLogger("mlflow").setLevel(logging.WARNING)  # the store's "creating tables" lines
        logging.getLogger("alembic").setLevel(logging.WARNING)
        self.tracking_uri = context.settings.mlflow.tracking_uri or default_tracking_uri(context)
        self.client = MlflowClient(self.tracking_uri)
        self.record = TrackerRun(context.run_dir, "mlflow", context.resume_step)
        if self.record.resumed:
            self.client.update_run(self.record.run_id, status="RUNNING")
        else:
            self.record.start(self._create_run(context))
        self.run_id = self.record.run_id

    def _create_run(self, context: SinkContext) -> str:
        from mlflow.entities import Param

        name = context.settings.project
        experiment = self.client.get_experiment_by_name(name)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(
            name, artifact_location=(context.run_dir / "mlartifacts").resolve().as_uri()
        )
        tags = {tag: "true" for tag in context.settings.tags} | {"rlxf.run_dir": str(context.run_dir.resolve())}
        run_id = self.client.create_run(experiment_id, run_name=context.run_name, tags=tags).info.run_id
        params = [Param(k, str(v)[:PARAM_VALUE_CHARS]) for k, v in flatten(context.hyperparams).items()]
        for start in range(0, len(params), PARAMS_PER_CALL):
            self.client.log_batch(run_id, params=params[start: start + PARAMS_PER_CALL])
        return run_id

    def send_metrics(self, step: int, values: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, step) for k, v in values.items()])

    def send_samples(self, step: int, rows: list[dict]) -> None:
        text = "".join(json.dumps(row, default=str) + "\n" for row in rows)
        self.client.log_text(self.run_id, text, f"samples/step_{step:06d}.jsonl")

    def close(self) -> None:
        self.client.set_terminated(self.run_id)
