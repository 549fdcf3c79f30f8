"""The trainer's log-prob pass of exact on-policy training (``rollout.engine_options.batch_invariant``).

It runs the batch-invariant forward (``models/batch_invariant``) that the rollout engine's
``ExactDecoder`` samples from, on the trainer's own weights: each response token's log-prob is the
same float the engine recorded when it drew the token, so ``old_log_probs - rollout_log_probs`` is
exactly 0 (``policy/rollout_log_prob_diff_max``). The gradient pass keeps the model's own forward.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rlxf.models.batch_invariant.llama import InvariantLlama, canonical_rows
from rlxf.train.log_probs import pad_columns, token_log_probs
from rlxf.train.micro_batches import micro_batches

__all__ = ["exact_batch_log_probs", "exact_sequence_log_probs"]


def exact_sequence_log_probs(
    net: InvariantLlama, prompt_ids: Tensor, prompt_mask: Tensor, response_ids: Tensor, response_mask: Tensor,
    temperature: float = 1.0,
) -> Tensor:
    """[B, R] log-probs of the response tokens (0 where ``response_mask`` is 0); prompts LEFT-padded."""
    prompt_lengths = prompt_mask.long().sum(1)
    width = response_ids.shape[1]
    lengths = prompt_lengths + response_mask.long().sum(1)  # the response's padding is left out
    ids = torch.cat([prompt_ids, response_ids], dim=1)
    rows = canonical_rows(ids, lengths, prompt_ids.shape[1] - prompt_lengths, pad_id=0)
    hidden, _ = net.full_forward(rows, lengths)
    # response token r of row b is predicted at canonical slot prompt_length + r - 1 (past the row's
    # length for padding: a zero state whose log-prob the mask drops)
    slot = (prompt_lengths[:, None] - 1 + torch.arange(width, device=rows.device)[None, :]).clamp(max=rows.shape[1] - 1)
    at = torch.arange(len(rows), device=rows.device)[:, None] * rows.shape[1] + slot
    logits = net.logits(hidden.index_select(0, at.reshape(-1))).view(len(rows), width, -1)
    return token_log_probs(logits, response_ids, temperature) * response_mask.float()


@torch.no_grad()
def exact_batch_log_probs(
    config, weights: dict[str, Tensor], batch, micro_batch_size: int, temperature: float = 1.0
) -> Tensor:
    """[B, R] log-probs of every response token of ``batch`` under ``weights`` (transformers names, fp32)."""
    net = InvariantLlama.of(config, weights)
    width = batch.response_ids.shape[1]
    parts = [
        pad_columns(exact_sequence_log_probs(net, m.prompt_ids, m.prompt_mask, m.response_ids, m.response_mask,
                                             temperature), width)
        for m in micro_batches(batch, micro_batch_size)
    ]
    return torch.cat(parts)
