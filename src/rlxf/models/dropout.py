"""Dropout off for RL and preference training (TRL's default): with dropout on, the trainer's
log-probs of a sample differ from the rollout's by noise that grows with the run, and every
ratio/KL the algorithm reads is off by that noise."""

from __future__ import annotations

import torch


def disable_dropout(model: torch.nn.Module) -> torch.nn.Module:
    """Every ``nn.Dropout`` to p=0, and the float ``attention_dropout`` rates attention layers read
    directly (Llama/Qwen2/Mistral style) to 0; the saved config is left as the checkpoint had it."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
        if isinstance(getattr(module, "attention_dropout", None), float):
            module.attention_dropout = 0.0
    return model
