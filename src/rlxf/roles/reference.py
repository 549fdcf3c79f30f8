"""Reference role: a frozen copy of the starting policy, forward only (for the KL term); with LoRA, the
policy itself with its adapter switched off (no copy, and the base weights stay trainable-free)."""

from __future__ import annotations

import torch

from rlxf.batch import TrajectoryBatch
from rlxf.models.lora import adapter_off, is_lora
from rlxf.train.log_probs import batch_log_probs


class ReferenceRole:
    def __init__(self, model: torch.nn.Module, micro_batch_size: int, temperature: float,
                 logits_chunk_tokens: int = 0) -> None:
        self.adapted = is_lora(model)  # the actor's own model: leave its mode and its adapters' grads alone
        self.model = model if self.adapted else model.eval().requires_grad_(False)
        self.micro_batch_size = micro_batch_size
        self.temperature = temperature or 1.0
        self.logits_chunk_tokens = logits_chunk_tokens  # LM head a chunk of tokens at a time (train/chunked_head.py)

    def compute_log_probs(self, batch: TrajectoryBatch) -> torch.Tensor:
        if self.adapted:
            with adapter_off(self.model):
                return batch_log_probs(self.model, batch, self.micro_batch_size, self.temperature, self.logits_chunk_tokens)
        return batch_log_probs(self.model, batch, self.micro_batch_size, self.temperature, self.logits_chunk_tokens)
