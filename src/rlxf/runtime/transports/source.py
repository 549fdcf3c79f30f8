"""The trainer side's tensors, one bucket at a time: a sharded trainer gathers only the bucket it sends.

``trainer_tensors`` gives name -> tensor without gathering: plain tensors, or FSDP2's DTensor shards
(their ``shape`` is the whole tensor's, enough to plan buckets). ``whole_bucket`` gathers one bucket's
tensors (``full_tensor``: every rank of the trainer takes part), so the peak extra memory of a sharded
sync is one bucket, not the model. DeepSpeed ZeRO-3 keeps partitions behind hooks: its engine's
``full_state_dict`` (the whole model on every rank) is used instead. A LoRA policy (models/lora.py)
sends its merged weights under the base model's names: rollout engines never see an adapter.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from rlxf.models.lora import is_lora, merged_state_dict


def trainer_tensors(engine) -> dict[str, torch.Tensor]:
    if is_lora(engine.model):
        return merged_state_dict(engine.model)
    if getattr(engine, "zero_stage", 0) == 3:
        return engine.full_state_dict()
    return engine.model.state_dict()


def whole_bucket(tensors: dict[str, torch.Tensor], names: tuple[str, ...]) -> dict[str, torch.Tensor]:
    return {name: whole_tensor(tensors[name]) for name in names}


def whole_tensor(tensor: torch.Tensor) -> torch.Tensor:
    full_tensor = getattr(tensor, "full_tensor", None)  # a DTensor shard: all-gather it
    return full_tensor() if full_tensor is not None else tensor


def is_sending_rank() -> bool:
    """Rank 0 of the trainer's group sends (every rank gathers)."""
    return not dist.is_initialized() or dist.get_rank() == 0
