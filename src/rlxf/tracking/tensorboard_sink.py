"""``logging.sinks: [tensorboard]``: TensorBoard event files in ``RUN_DIR/tensorboard``.

Scalars under their metric names, the resolved config as hyperparameters (the HParams tab) and as a
text block, logged rollouts as a markdown table per step (the Text tab). A resumed run writes into
the same folder with ``purge_step`` = the checkpoint's step + 1, so TensorBoard drops the old events of
the steps that are run again: each step appears once, with the re-run's values.
"""

from __future__ import annotations

import json

from rlxf.tracking.metrics import SinkContext, finite_or_none
from rlxf.tracking.sinks import METRIC_SINKS
from rlxf.tracking.tracker_run import flatten, require


@METRIC_SINKS.register("tensorboard")
class TensorBoardSink:
    def __init__(self, context: SinkContext) -> None:
        require("tensorboard", "tensorboard")
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = context.run_dir / "tensorboard"
        resumed = context.resume_step is not None
        self.writer = SummaryWriter(
            log_dir=str(self.log_dir), purge_step=context.resume_step + 1 if resumed else None,
        )
        if not resumed:
            self._log_config(context)

    def _log_config(self, context: SinkContext) -> None:
        from torch.utils.tensorboard.summary import hparams

        flat = flatten(context.hyperparams)
        for part in hparams(flat, {}):  # the HParams tab, in this run's own folder
            self.writer.file_writer.add_summary(part)
        block = json.dumps(context.hyperparams, indent=1).replace("\n", "\n    ")
        self.writer.add_text("config", f"run **{context.run_name}**, tags {context.settings.tags}\n\n    {block}", 0)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            value = finite_or_none(value)
            if value is not None:
                self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def log_samples(self, step: int, rows: list[dict]) -> None:
        self.writer.add_text("rollouts", markdown_table(rows), step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def markdown_table(rows: list[dict]) -> str:
    """Rows as a markdown table (the columns of all rows, in first-seen order); cells escape ``|``."""
    columns = list(dict.fromkeys(k for row in rows for k in row))
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = (json.dumps(row.get(c)) if not isinstance(row.get(c), str) else row[c] for c in columns)
        lines.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", "⏎") for c in cells) + " |")
    return "\n".join(lines)
