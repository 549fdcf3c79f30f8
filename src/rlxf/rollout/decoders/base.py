"""Decoder protocol: the inner prefill/step machinery behind rlxf's built-in rollout engine.

A decoder owns a KV cache for one batch of sequences at a time. The engine calls ``prefill`` once per batch,
then ``step`` once per generated token, and ``keep`` whenever some rows finished (so later steps are cheaper).
All logits come back as float32 on the decoder's device.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

from rlxf.batch import position_ids_from_mask

__all__ = ["Decoder", "as_row_index", "position_ids_from_mask", "prefill_expanded"]


@runtime_checkable
class Decoder(Protocol):
    def prefill(
        self, input_ids: torch.LongTensor, attention_mask: torch.LongTensor, max_new_tokens: int
    ) -> Tensor:
        """input_ids [B, P] LEFT-padded (attention_mask 0 on pads). Allocates the KV cache for P + max_new_tokens,
        runs the prompt, returns float32 logits [B, V] of the last position of each row."""
        ...

    def step(self, tokens: torch.LongTensor) -> Tensor:
        """tokens [B_active]: the token just sampled for each active row; returns logits [B_active, V] for the next one."""
        ...

    def keep(self, rows: torch.LongTensor) -> None:
        """Keep only these rows (indices into the current active batch)."""
        ...

    def load_state_dict(self, state_dict: dict[str, Tensor]) -> None:
        """New policy weights (HF parameter names, as model.state_dict() gives) copied in place."""
        ...


def as_row_index(rows, device: torch.device) -> Tensor:
    """``keep`` argument -> LongTensor of row indices on ``device`` (a bool mask over the active rows works too)."""
    rows = torch.as_tensor(rows, device=device)
    if rows.dtype == torch.bool:
        rows = rows.nonzero().squeeze(1)
    return rows.to(torch.long).view(-1)


def prefill_expanded(
    decoder: Decoder, input_ids: Tensor, attention_mask: Tensor, max_new_tokens: int, expand: Tensor | None = None
) -> Tensor:
    """``prefill``, then (optionally) repeat its rows: ``expand`` [rows] names the prompt of each row, so
    the ``n`` samples of a prompt share one prefill and their KV cache starts as copies of its."""
    logits = decoder.prefill(input_ids, attention_mask, max_new_tokens)
    if expand is None:
        return logits
    decoder.keep(expand)
    return logits.index_select(0, as_row_index(expand, logits.device))
