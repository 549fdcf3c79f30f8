"""Training-time switches of a loaded model: dropout off, activation checkpointing on.

Dropout off for RL and preference training (TRL's default): with dropout on, the trainer's
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


def enable_activation_checkpointing(model: torch.nn.Module) -> torch.nn.Module:
    """Recompute each layer's activations in backward (non-reentrant: the same gradients as without)."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.x; the old name warns
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    return model
