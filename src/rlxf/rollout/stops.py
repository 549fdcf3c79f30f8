"""Stop tokens of a rollout engine: ``eos_id`` is one id or several (``generation_config.eos_token_id``)."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def stop_id_list(eos_id: int | Sequence[int]) -> list[int]:
    return [int(eos_id)] if isinstance(eos_id, int) else [int(i) for i in eos_id]


def stop_ids_tensor(eos_id: int | Sequence[int], device: torch.device | str) -> torch.Tensor:
    return torch.tensor(stop_id_list(eos_id), dtype=torch.long, device=device)


def is_stop(tokens: torch.Tensor, stop_ids: torch.Tensor) -> torch.Tensor:
    """True where ``tokens`` holds any stop token."""
    return torch.isin(tokens, stop_ids)
