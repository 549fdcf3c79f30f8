"""Reading back what each tracker library wrote, with its own readers: TensorBoard's event
accumulator, MLflow's client, and the W&B offline transaction log (``run-ID.wandb``: LevelDB log
records of W&B's protobuf ``Record`` messages)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

BLOCK = 32768  # LevelDB log format: records never straddle a 32 KiB block
HEADER = 7  # file header ":W&B" + magic + version; record header crc32c(4) + length(2) + type(1)
FULL, LAST = 1, 4


def json_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def tensorboard_scalars(log_dir: Path) -> dict[str, dict[int, float]]:
    """tag -> {step: value} of every event file in ``log_dir`` (purged steps already dropped)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    return {tag: {e.step: e.value for e in events.Scalars(tag)} for tag in events.Tags()["scalars"]}


def tensorboard_text(log_dir: Path, tag: str) -> dict[int, str]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    events = EventAccumulator(str(log_dir), size_guidance={"tensors": 0})
    events.Reload()
    return {e.step: tensor_util.make_ndarray(e.tensor_proto).item().decode() for e in events.Tensors(f"{tag}/text_summary")}


def _wandb_records(path: Path):
    data, pos, pending = path.read_bytes(), HEADER, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # block trailer padding
            pos += left
            continue
        length, kind = int.from_bytes(data[pos + 4: pos + 6], "little"), data[pos + 6]
        pending += data[pos + HEADER: pos + HEADER + length]
        pos += HEADER + length
        if kind in (FULL, LAST):
            yield pending
            pending = b""


def wandb_offline_run(wandb_dir: Path) -> dict:
    """All offline sessions of the run in ``wandb_dir`` (one per start or resume): ``ids`` (run ids),
    ``history`` {key: {step: value}}, ``steps`` (every step sent, in order, with repeats), ``config``,
    ``tags``, ``name``, ``tables`` {step: the rollouts table's JSON}."""
    from wandb.proto import wandb_internal_pb2

    out = {"ids": set(), "history": defaultdict(dict), "steps": [], "config": {}, "tags": [], "name": None,
           "tables": {}}
    for path in sorted(wandb_dir.glob("offline-run-*/run-*.wandb")):
        for raw in _wandb_records(path):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(raw)
            kind = record.WhichOneof("record_type")
            if kind == "run":
                out["ids"].add(record.run.run_id)
                out["tags"], out["name"] = list(record.run.tags), record.run.display_name
                out["config"].update({i.key: json.loads(i.value_json) for i in record.run.config.update})
            elif kind == "history":
                items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item}
                step = items.pop("_step")
                out["steps"].append(step)
                for key, value in items.items():
                    if key == "rollouts/path":  # a table: its rows are a JSON file of the session
                        out["tables"][step] = json.loads((path.parent / "files" / value).read_text())
                    elif not key.startswith(("_", "rollouts/")):
                        out["history"][key][step] = value
    return out


def mlflow_run(tracking_uri: str, run_id: str) -> dict:
    """``metrics`` {key: [(step, value), ...]} (every value MLflow holds), ``params``, ``tags``, ``name``,
    ``artifacts`` (paths under samples/)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    run = client.get_run(run_id)
    metrics = {key: sorted((m.step, m.value) for m in client.get_metric_history(run_id, key)) for key in run.data.metrics}
    artifacts = [a.path for a in client.list_artifacts(run_id, "samples")]
    return {"metrics": metrics, "params": run.data.params, "tags": run.data.tags, "name": run.info.run_name,
            "status": run.info.status, "artifacts": artifacts}
