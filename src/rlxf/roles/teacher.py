"""Teacher role: a frozen model that shares the policy's tokenizer, forward only. It scores the tokens the
policy sampled (``teacher_log_probs``) for on-policy distillation; placed like the reference (in this
process, a child process or a Ray actor) and, like it, stateless."""

from __future__ import annotations

import torch

from rlxf.batch import TrajectoryBatch
from rlxf.train.log_probs import batch_log_probs


class TeacherRole:
    def __init__(self, model: torch.nn.Module, micro_batch_size: int, temperature: float,
                 logits_chunk_tokens: int = 0) -> None:
        self.model = model.eval().requires_grad_(False)
        self.micro_batch_size = micro_batch_size
        # the sampling temperature, as the policy's own log-probs use: both are the same tempered distribution
        self.temperature = temperature or 1.0
        self.logits_chunk_tokens = logits_chunk_tokens

    def compute_log_probs(self, batch: TrajectoryBatch) -> torch.Tensor:
        """[B, R] the teacher's log-prob of each response token of ``batch``."""
        return batch_log_probs(self.model, batch, self.micro_batch_size, self.temperature, self.logits_chunk_tokens)
