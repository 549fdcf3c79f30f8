"""What a rollout engine returns: ``n`` sampled responses per prompt with their log-probs."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Generation:
    """``n`` responses for each of ``len(prompts)`` prompts; row ``i * n + j`` is sample j of prompt i.

    ``response_ids`` [N, R] right-padded with ``pad_id``; ``response_mask`` [N, R] 1 up to and
    including the end-of-sequence token; ``log_probs`` [N, R] of the sampling policy (0 on padding);
    ``stopped`` [N] True where the model emitted end-of-sequence within the budget;
    ``prompt_index`` [N] the prompt each row answers; ``version`` the policy version that sampled it.
    """

    prompt_index: torch.Tensor
    response_ids: torch.Tensor
    response_mask: torch.Tensor
    log_probs: torch.Tensor
    stopped: torch.Tensor
    version: int


def response_mask_from_lengths(response_ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """1 on positions < length (length counts the EOS token when there is one)."""
    positions = torch.arange(response_ids.shape[1], device=response_ids.device)
    return (positions[None, :] < lengths[:, None]).long()
