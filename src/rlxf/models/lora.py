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
                value = value + _layer_delta(layer, adapter).to(value.dtype)
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self.templates)

    def __len__(self) -> int:
        return len(self.templates)


def lora_delta(weight_a: torch.Tensor, weight_b: torch.Tensor, scale: float) -> torch.Tensor:
    """``scale * B @ A`` as peft computes it for a plain ``Linear`` adapter (16-bit weights on CPU multiply
    in fp32). The trainer's merged weights and an engine merging a synced adapter (runtime/sync_modes.py)
    both call this one function, so on one device type they agree bit for bit."""
    dtype = weight_b.dtype
    if weight_b.device.type == "cpu" and dtype in (torch.float16, torch.bfloat16):
        weight_a, weight_b = weight_a.float(), weight_b.float()
    return ((weight_b @ weight_a) * scale).to(dtype)


def _is_plain(layer, adapter: str) -> bool:
    return not getattr(layer, "fan_in_fan_out", False) and not getattr(layer, "use_dora", {}).get(adapter, False) \
        and isinstance(layer.lora_A[adapter], torch.nn.Linear)


def _layer_delta(layer, adapter: str) -> torch.Tensor:
    if _is_plain(layer, adapter):
        weight_a, weight_b = layer.lora_A[adapter].weight, layer.lora_B[adapter].weight
        return lora_delta(weight_a, weight_b, layer.scaling[adapter])
    return layer.get_delta_weight(adapter)  # DoRA, Conv1D (fan_in_fan_out): peft's own


def adapter_parts(model: torch.nn.Module) -> dict[str, tuple[torch.Tensor, torch.Tensor, float]]:
    """base weight name -> (A, B, scale) of its one active plain adapter: what an adapter-only weight sync
    sends. One active adapter per layer, no DoRA, no ``fan_in_fan_out`` (their merge is not ``B @ A``)."""
    from peft.tuners.lora import LoraLayer

    parts = {}
    for name, layer in model.get_base_model().named_modules():
        if not isinstance(layer, LoraLayer):
            continue
        active = [a for a in layer.active_adapters if a in layer.lora_A]
        if len(active) != 1 or not _is_plain(layer, active[0]):
            raise ConfigError(
                f"runtime.weight_sync.mode: an adapter-only sync needs one plain LoRA adapter per layer; {name} has "
                f"{active} (DoRA or fan_in_fan_out layers merge otherwise): use mode full"
            )
        adapter = active[0]
        parts[f"{name}.weight"] = (layer.lora_A[adapter].weight, layer.lora_B[adapter].weight,
                                   float(layer.scaling[adapter]))
    return parts


def trainable_base_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Trainable parameters outside the adapters, under the base model's names (an adapter-only sync
    sends them whole)."""
    return {key.replace(BASE_LAYER, "."): p for key, p in model.get_base_model().named_parameters()
            if p.requires_grad and ".lora_" not in key}


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
