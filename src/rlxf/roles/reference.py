"""Reference role: a frozen copy of the starting policy, forward only (for the KL term)."""

from __future__ import annotations

import torch

from rlxf.batch import TrajectoryBatch
from rlxf.train.log_probs import batch_log_probs


class ReferenceRole:
    def __init__(self, model: torch.nn.Module, micro_batch_size: int, temperature: float) -> None:
        self.model = model.eval().requires_grad_(False)
        self.micro_batch_size = micro_batch_size
        self.temperature = temperature or 1.0

    def compute_log_probs(self, batch: TrajectoryBatch) -> torch.Tensor:
        return batch_log_probs(self.model, batch, self.micro_batch_size, self.temperature)
