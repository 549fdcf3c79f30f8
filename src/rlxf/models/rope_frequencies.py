"""Rotary-embedding frequencies of a Llama-family config (the rope types whose frequencies do not
depend on the sequence length): shared by the rollout decoder and the batch-invariant forward."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["STATIC_ROPE_TYPES", "rope_inv_freq", "rope_params"]

# rope types whose inv_freq does not depend on the sequence length (dynamic / longrope do: refused)
STATIC_ROPE_TYPES = frozenset({"default", "linear", "llama3", "yarn"})


def rope_params(config) -> dict:
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    params = dict(params)
    params.setdefault("rope_theta", getattr(config, "rope_theta", 10000.0))
    params["rope_type"] = params.get("rope_type", params.get("type", "default")) or "default"
    return params


def rope_inv_freq(config, head_dim: int) -> tuple[Tensor, float]:
    """(inv_freq [head_dim / 2] fp32 on the CPU, attention scaling)."""
    params = rope_params(config)
    rope_type = params["rope_type"]
    if rope_type not in STATIC_ROPE_TYPES:
        raise NotImplementedError(f"rope type {rope_type!r} is not supported (use HFDecoder)")
    if rope_type == "default":
        theta = float(params["rope_theta"])
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        return inv_freq, 1.0
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    inv_freq, scaling = ROPE_INIT_FUNCTIONS[rope_type](config, torch.device("cpu"))
    return inv_freq.float().cpu(), float(scaling)
