"""A learned reward model as a scorer: any sequence-classification checkpoint, batched.

    reward:
      function: reward_model
      kwargs: {path: runs/rm/checkpoints/step_000100/policy, batch_size: 32, device: cpu}

The checkpoint is anything ``transformers.AutoModelForSequenceClassification.from_pretrained`` loads
(a Bradley–Terry model trained by ``loop: reward_model`` saved in that format, or a hub RM in the
local cache); with one label the score is that logit, with several it is ``label``'s logit. The text
scored is ``template`` filled with the prompt and the response (default: their concatenation, which
is what the policy saw, as the rollout decodes it: a chat template's special tokens dropped). Tokens and
positions are those ``loop: reward_model`` trained on (:mod:`rlxf.models.reward_model`). Scores can be
shifted and scaled (``offset``, ``scale``) to a usable range.
"""

from __future__ import annotations

from collections.abc import Sequence

from rlxf.rewards.base import RewardOutput
from rlxf.rewards.registry import REWARDS


@REWARDS.register("reward_model")
class SequenceClassifierReward:
    def __init__(
        self, path: str, batch_size: int = 32, device: str = "cpu", max_length: int = 1024,
        template: str = "{prompt}{response}", label: int = 0, offset: float = 0.0, scale: float = 1.0,
        dtype: str = "float32",
    ) -> None:
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(path)
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForSequenceClassification.from_pretrained(path, torch_dtype=getattr(torch, dtype))
        self.model.to(device).eval().requires_grad_(False)
        if self.model.config.pad_token_id is None:
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.device, self.batch_size, self.max_length = device, batch_size, max_length
        self.template, self.label, self.offset, self.scale = template, label, offset, scale

    def score(self, prompts: Sequence[str], responses: Sequence[str], metadata: Sequence[dict]) -> RewardOutput:
        import torch

        from rlxf.models.reward_model import (  # torch and transformers: lazily
            encode_scored_texts,
            sequence_logits,
        )

        texts = [self.template.format(prompt=p, response=r) for p, r in zip(prompts, responses)]
        scores: list[float] = []
        with torch.no_grad():
            for start in range(0, len(texts), self.batch_size):
                enc = encode_scored_texts(self.tokenizer, texts[start: start + self.batch_size], self.max_length)
                enc = enc.to(self.device)
                logits = sequence_logits(self.model, enc["input_ids"], enc["attention_mask"])
                scores += (logits[:, self.label] * self.scale + self.offset).tolist()
        return RewardOutput(scores=scores, components={"reward_model": list(scores)})
