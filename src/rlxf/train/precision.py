"""Mixed precision for the train engines: an opt-in autocast around each micro-batch's forward.

``optim.autocast: bfloat16`` runs the forward (and so the backward) matmuls in bf16 while the
weights, gradients and optimizer state stay in the model's dtype. It pays where the hardware has
fast bf16 matmuls (GPUs; CPUs with AVX-512 BF16/AMX: about 1.2x on the tiny model's train pass on
this kind of machine). The price is log-prob consistency: the trainer's log-probs then differ from an
fp32 rollout engine's by about 1e-2, which matters only to corrections that compare the two
(truncated importance sampling); on-policy GRPO/PPO ratios use the trainer's own log-probs.
"""

from __future__ import annotations

import contextlib

import torch

AUTOCAST_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def autocast(model: torch.nn.Module, name: str | None):
    """``torch.autocast`` on the model's device for ``name`` ("bfloat16"), or a no-op for "none"/None."""
    if not name or name == "none":
        return contextlib.nullcontext()
    device = next(model.parameters()).device.type
    return torch.autocast(device_type=device, dtype=AUTOCAST_DTYPES[name])
