"""Per-token log-probs (and entropy) of response tokens under a causal LM, from one forward pass.

Position ids follow the attention mask (``cumsum - 1``) so a left-padded prompt is seen exactly as
the rollout engine saw it. Logits are divided by the sampling temperature, matching what the rollout
engine records (``rollout/sampling.py``). Only the last ``R + 1`` positions go through the LM head.
"""

from __future__ import annotations

import torch


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def response_logits(
    model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, response_width: int
) -> torch.Tensor:
    """[B, R, V] logits that predict the R response tokens (positions P-1 .. P+R-2)."""
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids_from_mask(attention_mask),
        logits_to_keep=response_width + 1,
        use_cache=False,
    )
    return out.logits[:, :-1].float()


def token_log_probs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    if temperature not in (0.0, 1.0):
        logits = logits / temperature
    return logits.log_softmax(-1).gather(-1, tokens[..., None]).squeeze(-1)


def entropy_from_logits(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    if temperature not in (0.0, 1.0):
        logits = logits / temperature
    log_p = logits.log_softmax(-1)
    return -(log_p.exp() * log_p).sum(-1)


def sequence_log_probs(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(log-probs [B, R], entropy [B, R] or None); zero where ``response_mask`` is 0."""
    input_ids = torch.cat([prompt_ids, response_ids], dim=1)
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
    logits = response_logits(model, input_ids, attention_mask, response_ids.shape[1])
    mask = response_mask.float()
    log_probs = token_log_probs(logits, response_ids, temperature) * mask
    entropy = entropy_from_logits(logits, temperature) * mask if with_entropy else None
    return log_probs, entropy


def pad_columns(values: torch.Tensor, width: int) -> torch.Tensor:
    """Right-pad [B, r] with zeros to [B, width] (micro-batches are trimmed to their longest response)."""
    if values.shape[1] == width:
        return values
    return torch.nn.functional.pad(values, (0, width - values.shape[1]))


@torch.no_grad()
def batch_log_probs(model: torch.nn.Module, batch, micro_batch_size: int, temperature: float = 1.0) -> torch.Tensor:
    """[B, R] log-probs of every response token of ``batch``, micro-batch by micro-batch, no grad."""
    from rlxf.train.micro_batches import micro_batches

    was_training = model.training
    model.eval()
    width = batch.response_ids.shape[1]
    parts = []
    for micro in micro_batches(batch, micro_batch_size):
        log_probs, _ = sequence_log_probs(
            model, micro.prompt_ids, micro.prompt_mask, micro.response_ids, micro.response_mask, temperature
        )
        parts.append(pad_columns(log_probs, width))
    model.train(was_training)
    return torch.cat(parts)
