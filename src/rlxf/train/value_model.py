"""PPO's critic: a causal LM trunk with a scalar value head on every position."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoModelForCausalLM

from rlxf.train.log_probs import decoder_response_states


class ValueModel(nn.Module):
    """``forward(input_ids, attention_mask) -> values [B, L]`` from the trunk's last hidden states."""

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.trunk = lm.get_decoder() if hasattr(lm, "get_decoder") else lm.model
        self.config = lm.config
        self.value_head = nn.Linear(lm.config.hidden_size, 1)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    @classmethod
    def from_pretrained(cls, path: str, dtype: torch.dtype = torch.float32) -> ValueModel:
        model = cls(AutoModelForCausalLM.from_pretrained(path, dtype=dtype))
        head = Path(path) / "value_head.safetensors"
        if head.exists():
            model.value_head.load_state_dict(load_file(str(head)))
        return model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                response_width: int | None = None) -> torch.Tensor:
        """[B, L] values at every position; with ``response_width`` R, [B, R] at the positions before each
        response token (P-1 .. P+R-2) only, a group's shared prompt run through the trunk once (as the
        policy's log-probs are: train/log_probs.py). Inside ``forward`` so that a sharded engine's hooks see it."""
        if response_width is not None:
            hidden = decoder_response_states(self.trunk, input_ids, attention_mask, response_width)
        else:
            position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
            hidden = self.trunk(
                input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids
            ).last_hidden_state
        return self.value_head(hidden).squeeze(-1).float()

    def save_head(self, out_dir: str | Path) -> None:
        save_file(self.value_head.state_dict(), str(Path(out_dir) / "value_head.safetensors"))
