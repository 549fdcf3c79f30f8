"""LoRA through peft: the actor trains adapters, everything else sees plain weights.

* the reference policy is the same model with its adapter switched off (no second copy);
* rollout engines get *merged* weights (``W + scale * B @ A``) under the base model's names, so the
  built-in decoder, HF ``generate`` and vLLM need no adapter support;
* a checkpoint holds the adapter alone (``policy_adapter/``, peft's format) and a merged export
  (``policy/``) that plain ``AutoModelForCausalLM.from_pretrained`` loads.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from rlxf.config_error import ConfigError
from rlxf.models.lora_config import LoraConfig

ADAPTER_DIR = "policy_adapter"
BASE_LAYER = ".base_layer."


def _peft():
    try:
        import peft
    except ImportError:
        raise ConfigError("model.lora needs peft: pip install 'rlxf[lora]'") from None
    return peft


def is_lora(model: torch.nn.Module) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "disable_adapter")


def apply_lora(model: torch.nn.Module, cfg: LoraConfig) -> torch.nn.Module:
    """``model`` with fresh adapters (B = 0: the policy starts where ``model`` is); only they train."""
    peft = _peft()
    settings = peft.LoraConfig(
        r=cfg.r, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout, target_modules=cfg.target_modules,
        task_type="CAUSAL_LM",
    )
    return peft.get_peft_model(model, settings)


def load_lora(base: torch.nn.Module, adapter_dir: str | Path) -> torch.nn.Module:
    """A saved adapter on ``base``, trainable (resume)."""
    return _peft().PeftModel.from_pretrained(base, str(adapter_dir), is_trainable=True)


@torch.no_grad()
def merged_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The weights the adapted model computes with, under the base model's own names (nothing mutated)."""
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    deltas = {
        f"{name}{BASE_LAYER}weight": module.get_delta_weight(adapter)
        for name, module in base.named_modules() if isinstance(module, LoraLayer)
        for adapter in module.active_adapters if adapter in module.lora_A
    }
    merged = {}
    for key, value in base.state_dict().items():
        if ".lora_" in key:
            continue
        if key in deltas:
            value = value + deltas[key].to(value.dtype)
        merged[key.replace(BASE_LAYER, ".")] = value
    return merged


def save_lora_checkpoint(model: torch.nn.Module, out_dir: str | Path) -> None:
    """``policy_adapter/`` (adapter only) and ``policy/`` (merged, plain transformers) into ``out_dir``."""
    out_dir = Path(out_dir)
    model.save_pretrained(out_dir / ADAPTER_DIR)
    model.get_base_model().save_pretrained(out_dir / "policy", state_dict=merged_state_dict(model))


@contextmanager
def adapter_off(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """The base model's forward (the reference policy) for the duration."""
    with model.disable_adapter():
        yield model
