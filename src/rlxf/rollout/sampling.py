"""Token sampling: temperature, top-k, top-p, and the log-prob the trainer will recompute.

The recorded log-prob is ``log_softmax(logits / temperature)`` of the chosen token — the policy at
the sampling temperature, before top-k/top-p truncation — which is exactly what the trainer's
forward pass computes for the same tokens (``train/log_probs.py``). Greedy decoding
(temperature 0) records the temperature-1 log-prob.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 16

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def filter_top_k_top_p(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Set logits outside the top-k / nucleus to -inf (the kept set always holds the best token)."""
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        # Drop a token when the tokens before it already reach top_p.
        drop_sorted = (cumulative - sorted_logits.softmax(-1)) >= top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def sample_tokens(
    logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [B, V] -> (tokens [B], log-probs [B])."""
    logits = logits.float()
    if params.greedy:
        tokens = logits.argmax(-1)
        log_probs = logits.log_softmax(-1)
    else:
        scaled = logits / params.temperature
        log_probs = scaled.log_softmax(-1)
        filtered = filter_top_k_top_p(scaled, params.top_k, params.top_p)
        tokens = inverse_cdf_sample(filtered.softmax(-1), generator)
    return tokens, log_probs.gather(-1, tokens[:, None]).squeeze(-1)


def inverse_cdf_sample(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token per row of ``probs`` [..., V]: the first whose cumulative probability passes a uniform draw.

    One random number a row and a cumulative sum, where an exponential race (argmax p_i / E_i) draws one
    per vocabulary entry and ``torch.multinomial`` is no faster on the CPU: at SmolLM2's 49,152-token vocabulary
    and 32 rows about 8 ms against 97 ms for either (``benchmarks/generation_smollm2.py``'s ``sampler_ms``).
    The sum runs in fp64, and the draw stays below the total, so a token of probability 0 (cut by top-k /
    top-p) is never chosen: its interval is empty."""
    cumulative = probs.double().cumsum(-1)
    total = cumulative[..., -1:]
    draw = torch.rand(total.shape, dtype=torch.float64, device=probs.device, generator=generator) * total
    draw = torch.minimum(draw, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cumulative, draw, right=True).squeeze(-1)
