"""LoRA through peft: the actor trains adapters, everything else sees plain weights.

* the reference policy is the same model with its adapter switched off (no second copy);
* rollout engines get *merged* weights (``W + scale * B @ A``) under the base model's names, so the
  built-in decoder, HF ``generate`` and vLLM need no adapter support;
* a checkpoint holds the adapter alone (``policy_adapter/``, peft's format) and a merged export
  (``policy/``) that plain ``AutoModelForCausalLM.from_pretrained`` loads;
* adapted ``nn.Linear`` layers are models/lora_layer.py's subclass of peft's, which adds the update into
  the base output in place (peft's forward makes three output-sized temporaries per layer).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import torch

from rlxf.config_error import ConfigError
from rlxf.models.lora_config import LoraConfig
from rlxf.models.saving import save_model

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
    return peft.get_peft_model(model, _in_place_layers(settings))


def load_lora(base: torch.nn.Module, adapter_dir: str | Path) -> torch.nn.Module:
    """A saved adapter on ``base``, trainable (resume)."""
    peft = _peft()
    settings = _in_place_layers(peft.LoraConfig.from_pretrained(str(adapter_dir)))
    return peft.PeftModel.from_pretrained(base, str(adapter_dir), is_trainable=True, config=settings)


def _in_place_layers(settings):
    """peft's config, its ``nn.Linear`` targets built as models/lora_layer.py's layer (no output-sized
    temporaries in the forward; the same parameters and checkpoint format). Not saved in the config."""
    from rlxf.models.lora_layer import InPlaceLoraLinear

    if hasattr(settings, "_register_custom_module"):  # peft's (experimental) hook; without it, peft's layer
        settings._register_custom_module({torch.nn.Linear: InPlaceLoraLinear})
    return settings


class MergedWeights(Mapping[str, torch.Tensor]):
    """The weights the adapted model computes with, under the base model's own names, each merged
    (``W + scale * B @ A``) only when it is read: a weight sync or a save holds one merged tensor at a
    time, not a merged copy of the model beside its deltas (nothing is mutated). ``templates`` are the
    unmerged tensors under the same names (same shapes and dtypes: what a bucket plan reads)."""

    def __init__(self, model: torch.nn.Module) -> None:
        from peft.tuners.lora import LoraLayer

        base = model.get_base_model()
        self._layers = {f"{name}.weight": module for name, module in base.named_modules() if isinstance(module, LoraLayer)}
        self.templates = {key.replace(BASE_LAYER, "."): value for key, value in base.state_dict().items()
                          if ".lora_" not in key}

    @torch.no_grad()
    def __getitem__(self, name: str) -> torch.Tensor:
        value = self.templates[name]
        layer = self._layers.get(name)
        for adapter in layer.active_adapters if layer is not None else ():
            if adapter in layer.lora_A:
                value = value + layer.get_delta_weight(adapter).to(value.dtype)
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self.templates)

    def __len__(self) -> int:
        return len(self.templates)


def merged_state_dict(model: torch.nn.Module) -> MergedWeights:
    """The adapted model's weights under the base model's names, merged as they are read."""
    return MergedWeights(model)


def save_lora_checkpoint(model: torch.nn.Module, out_dir: str | Path) -> None:
    """``policy_adapter/`` (adapter only) and ``policy/`` (merged, plain transformers) into ``out_dir``."""
    out_dir = Path(out_dir)
    model.save_pretrained(out_dir / ADAPTER_DIR)
    save_model(model.get_base_model(), out_dir / "policy", dict(merged_state_dict(model)))


@contextmanager
def adapter_off(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """The base model's forward (the reference policy) for the duration."""
    with model.disable_adapter():
        yield model
