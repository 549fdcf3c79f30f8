"""``model.lora`` in an RL run: where the adapted policy's base comes from, fresh or resumed.

A fresh run wraps the policy after SFT and saves that base as ``run_dir/reference`` (the reference
policy's weights, and what a resume starts from); a resumed run loads the base from there and the
adapter from the checkpoint's ``policy_adapter/``.
"""

from __future__ import annotations

from pathlib import Path

import torch

from rlxf.config import Config, ConfigError
from rlxf.models.lora import ADAPTER_DIR, apply_lora, load_lora
from rlxf.models.saving import save_model


def lora_start_path(config: Config, run_dir: Path, checkpoint: Path | None) -> str | None:
    """The folder a resumed LoRA run loads its base from; None when the usual path applies."""
    if config.model.lora is None or checkpoint is None:
        return None
    return str(run_dir / "reference")


def attach_lora(config: Config, policy: torch.nn.Module, run_dir: Path, checkpoint: Path | None) -> torch.nn.Module:
    if config.train.backend != "single":
        raise ConfigError(f"model.lora: train.backend {config.train.backend!r} is not supported yet (use single)")
    if checkpoint is None:
        save_model(policy, run_dir / "reference")
        return apply_lora(policy, config.model.lora)
    return load_lora(policy, checkpoint / ADAPTER_DIR)
