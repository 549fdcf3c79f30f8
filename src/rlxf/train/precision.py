"""Mixed precision for the train engines: an opt-in autocast around each micro-batch's forward.

``optim.autocast: bfloat16`` runs the forward (and so the backward) matmuls in bf16 while the
weights, gradients and optimizer state stay in the model's dtype. It pays where the hardware has
fast bf16 matmuls (GPUs; CPUs with AVX-512 BF16/AMX: about 1.7x on the tiny model's train pass on
this kind of machine). The price is log-prob consistency: the trainer's log-probs then differ from an
fp32 rollout engine's by about 1e-2, which matters only to corrections that compare the two
(truncated importance sampling); on-policy GRPO/PPO ratios use the trainer's own log-probs.

On the CPU, attention stays in fp32 under autocast (``CPU_AUTOCAST_ATTENTION``): PyTorch's bf16
flash-attention backward there is ~6x slower than its fp32 one (tiny model, 64 rows: 7.4 vs 1.2 ms a
call), more than the bf16 matmuls save. On GPUs the model's own attention runs in bf16.
"""

from __future__ import annotations

import contextlib

import torch

AUTOCAST_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


CPU_AUTOCAST_ATTENTION = "rlxf_sdpa_fp32"


def _sdpa_in_fp32(module, query, key, value, attention_mask, **kwargs):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    # autocast off: it would cast SDPA's inputs to bf16 (the next projection casts the output back)
    with torch.autocast(query.device.type, enabled=False):
        return sdpa_attention_forward(module, query.float(), key.float(), value.float(), attention_mask, **kwargs)


def _fp32_attention_on_cpu(model: torch.nn.Module) -> None:
    """Switch a transformers model that uses SDPA to ``_sdpa_in_fp32`` (once; other models are left as
    they are)."""
    hf_model = next((m for m in model.modules() if hasattr(m, "set_attn_implementation")), None)
    config = getattr(hf_model, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) != "sdpa":
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    AttentionInterface.register(CPU_AUTOCAST_ATTENTION, _sdpa_in_fp32)
    # the mask too: transformers builds NO mask (padding ignored) for a name it has no mask function for
    AttentionMaskInterface.register(CPU_AUTOCAST_ATTENTION, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    hf_model.set_attn_implementation(CPU_AUTOCAST_ATTENTION)


def autocast_paused(model: torch.nn.Module):
    """Autocast off inside an autocast region (for ``loss.backward()``), without ending the region: its cache
    of cast weights lives on (it is emptied only when the outermost region exits)."""
    return torch.autocast(next(model.parameters()).device.type, enabled=False)


def autocast(model: torch.nn.Module, name: str | None):
    """``torch.autocast`` on the model's device for ``name`` ("bfloat16"), or a no-op for "none"/None."""
    if not name or name == "none":
        return contextlib.nullcontext()
    device = next(model.parameters()).device.type
    if device == "cpu":
        _fp32_attention_on_cpu(model)
    return torch.autocast(device_type=device, dtype=AUTOCAST_DTYPES[name])
