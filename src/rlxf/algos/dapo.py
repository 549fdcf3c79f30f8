"""DAPO's reward-side tricks (Yu et al., "DAPO", 2025): overlong shaping and overlong filtering.

Dynamic sampling (keep only groups whose rewards differ) is :func:`rlxf.algos.groups.groups_with_signal`.
"""

from __future__ import annotations

import torch


def overlong_shaping_penalty(
    response_lengths: torch.Tensor, max_response_len: int, buffer_len: int, penalty: float
) -> torch.Tensor:
    """[B] soft overlong punishment (DAPO eq. 13), to ADD to the sequence scores.

    With ``L = max_response_len`` and ``c = buffer_len`` (capped at ``L``):
    0 when ``len <= L - c``; ``(L - c - len) / c * penalty`` (from 0 down to ``-penalty``) inside the
    buffer; ``-penalty`` beyond ``L``. ``buffer_len == 0`` turns it off (all zeros).
    """
    lengths = response_lengths.float()
    if buffer_len <= 0:
        return torch.zeros_like(lengths)
    buffer = min(buffer_len, max_response_len)
    start = max_response_len - buffer
    return ((start - lengths) / buffer * penalty).clamp(min=-penalty, max=0.0)


def drop_truncated(mask: torch.Tensor, truncated: torch.Tensor) -> torch.Tensor:
    """Overlong filtering: the loss mask with the rows of truncated responses zeroed."""
    return mask * (~truncated.bool()).to(mask.dtype).unsqueeze(1)
