"""Bradley–Terry reward models: a causal LM trunk with a scalar head (``AutoModelForSequenceClassification``
with one label), so a saved reward model loads with plain transformers and with
``reward.function: reward_model`` (rlxf/rewards/reward_model.py).

The score of a sequence is the head's value at its last non-padding token (transformers' rule for
sequence classification: the rightmost token that is not ``pad_token_id``).

Training (``loop: reward_model``) and scoring (``reward.function: reward_model``) read the same tokens: the
text the RL reward is given (the prompt as the rollout decodes it, special tokens dropped, then the
response) tokenized whole by :func:`encode_scored_texts`, positions from the attention mask. A chat model's
prompt is its rendered template without the special tokens (``system\n...\nuser\n...\nassistant\n``),
because that is the string the reward receives; training on the template's special tokens and scoring
without them would score text the model never saw.
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


def encode_scored_texts(tokenizer, texts: list[str], max_length: int | None = None):
    """The token batch a reward model scores: each text tokenized whole, no special tokens added (the
    prompt text already holds what the policy was given), padded on the tokenizer's side, cut to
    ``max_length`` tokens when given."""
    return tokenizer(texts, return_tensors="pt", padding=True, truncation=max_length is not None,
                     max_length=max_length, add_special_tokens=False)


def sequence_logits(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """[B, labels] the head's logits of each (padded) sequence; positions follow the attention mask, so
    left and right padding score alike."""
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids_from_mask(attention_mask))
    return out.logits.float()


def sequence_rewards(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """[B] the reward of each (padded) sequence: the first label's logit."""
    return sequence_logits(model, input_ids, attention_mask)[:, 0]
