"""Bradley–Terry reward models: a causal LM trunk with a scalar head (``AutoModelForSequenceClassification``
with one label), so a saved reward model loads with plain transformers and with
``reward.function: reward_model`` (rlxf/rewards/reward_model.py).

The score of a sequence is the head's value at its last non-padding token (transformers' rule for
sequence classification: the rightmost token that is not ``pad_token_id``).
"""

from __future__ import annotations

import torch
from transformers import AutoModelForSequenceClassification

from rlxf.batch import position_ids_from_mask


def reward_model_from_lm(lm: torch.nn.Module) -> torch.nn.Module:
    """A sequence classifier (one label) with ``lm``'s trunk weights and a freshly initialised head."""
    config = lm.config.__class__.from_dict({**lm.config.to_dict(), "num_labels": 1})
    model = AutoModelForSequenceClassification.from_config(config)
    missing, _ = model.load_state_dict(lm.state_dict(), strict=False)
    unexpected_missing = [k for k in missing if not k.startswith("score.")]
    if unexpected_missing:
        raise ValueError(f"the LM's weights do not fit a sequence classifier: missing {unexpected_missing[:3]}")
    return model.to(next(lm.parameters()).device)


def load_reward_model(path: str, device: str = "cpu") -> torch.nn.Module:
    return AutoModelForSequenceClassification.from_pretrained(path, num_labels=1).to(device)


def sequence_rewards(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """[B] the reward of each (padded) sequence; positions follow the attention mask."""
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids_from_mask(attention_mask))
    return out.logits[:, 0].float()
