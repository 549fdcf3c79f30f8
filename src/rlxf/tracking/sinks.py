"""``METRIC_SINKS``: metric sink names -> sink classes, each registered in the module that defines it.

A module of its own, importing nothing of the tracking package: ``LoggingConfig`` checks its sink names
here without importing the sinks (``tracking/metrics.py`` imports ``LoggingConfig``, so the registry
living there made a circle). Asking for a name imports its module (``Registry.modules``).
"""

from __future__ import annotations

from rlxf.registry import Registry

METRIC_SINKS: Registry = Registry("metric sink", modules={
    "console": "rlxf.tracking.metrics",
    "jsonl": "rlxf.tracking.metrics",
    "tensorboard": "rlxf.tracking.tensorboard_sink",
    "wandb": "rlxf.tracking.wandb_sink",
    "mlflow": "rlxf.tracking.mlflow_sink",
})
