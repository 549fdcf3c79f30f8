"""Token ids as a person reading a log should see them: the chat template's special tokens kept
(``<|im_start|>system ...``), the padding dropped.

Rewards get text decoded with ``skip_special_tokens`` (a verifier or judge reads the words); logs
(``samples.jsonl``, ``eval_problems.jsonl``, the studio's sample browser) get this, so a prompt rendered
through a chat template reads as the model saw it, not as "system\\nYou are ..." with its markers gone.
Padding is told apart by the mask, not by the token: a tokenizer that pads with ``<|im_end|>`` (SmolLM2)
keeps the real ones.
"""

from __future__ import annotations

import torch


def shown_texts(tokenizer, ids: torch.Tensor, mask: torch.Tensor) -> list[str]:
    """One string per row of ``ids``: the tokens where ``mask`` is set, special tokens included."""
    keep = mask.bool()
    return [tokenizer.decode(row[kept].tolist(), skip_special_tokens=False) for row, kept in zip(ids.cpu(), keep.cpu())]
