"""Rollout role: rows in, a trajectory batch out (token ids, sampling log-probs, versions)."""

from __future__ import annotations

import torch
from transformers import PreTrainedTokenizerBase

from rlxf.batch import TrajectoryBatch, left_pad
from rlxf.data.prompt_tokens import encode_prompts, row_prompt_text
from rlxf.models.shown_text import shown_texts
from rlxf.rollout.engine import RolloutEngine
from rlxf.rollout.generation import Generation
from rlxf.rollout.sampling import SamplingParams
from rlxf.runtime.transports import endpoint
from rlxf.runtime.weight_sync import WeightBuckets, load_and_verify


class RolloutRole:
    def __init__(
        self, engine: RolloutEngine, tokenizer: PreTrainedTokenizerBase, chat_template: bool, max_prompt_tokens: int
    ) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.max_prompt_tokens = max_prompt_tokens

    @property
    def version(self) -> int:
        return self.engine.version

    def update_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        self.engine.update_weights(state_dict, version)

    @property
    def shares_policy_weights(self) -> bool:
        """The engine decodes with the trainer's own tensors (``engine_options.share_weights``)."""
        return getattr(self.engine, "shares_policy_weights", False)

    def mark_version(self, version: int) -> None:
        """A sync with nothing to send (a shared engine already holds the step): the version only."""
        self.engine.version = version

    def load_weights(self, packed: WeightBuckets, checksum: bool = False) -> dict:
        """A bucketed sync (runtime/weight_sync.py): load, verify (``StaleWeightsError`` if the engine
        does not hold the version, or with ``checksum`` the exact weights, sent); returns its report."""
        return load_and_verify(self.engine, packed, checksum)

    def receive_weights(self, channel, sent, checksum: bool = False) -> dict:
        """A sync over ``channel``'s transport (runtime/transports/); ``sent`` is what the trainer's
        ``send_weights`` returned (a handle, or None for a collective that runs alongside it)."""
        return endpoint(channel, "Receiver").receive(self.engine, sent, checksum)

    def generate(
        self, rows: list[dict], params: SamplingParams, generator: torch.Generator | None = None,
        first_group: int = 0,
    ) -> TrajectoryBatch:
        prompts = self.encode(rows)
        return self.to_batch(rows, prompts, self.engine.generate(prompts, params, generator), first_group)

    def encode(self, rows: list[dict]) -> list[list[int]]:
        return encode_prompts(rows, self.tokenizer, self.chat_template, self.max_prompt_tokens)

    def to_batch(self, rows: list[dict], prompts: list[list[int]], gen: Generation, first_group: int = 0) -> TrajectoryBatch:
        """The trajectory batch of ``gen`` (responses to ``prompts``, encoded from ``rows``); a
        ``VersionedGeneration`` (interruptible) brings a version per token."""
        index = gen.prompt_index
        prompt_ids, prompt_mask = left_pad([prompts[i] for i in index.tolist()], self.tokenizer.pad_token_id, torch.device("cpu"))
        # the row's fields but its (long) prompt or messages; its own question as text stays, as prompt_text
        texts = [row_prompt_text(row) for row in rows]
        metadata = [
            {**{k: v for k, v in rows[i].items() if k not in ("prompt", "messages")}, "stopped": bool(s),
             **({"prompt_text": texts[i]} if texts[i] is not None else {})}
            for i, s in zip(index.tolist(), gen.stopped.tolist())
        ]
        versions = getattr(gen, "token_versions", None)
        return TrajectoryBatch(
            prompt_ids=prompt_ids,
            prompt_mask=prompt_mask,
            response_ids=gen.response_ids,
            response_mask=gen.response_mask,
            loss_mask=gen.response_mask.clone(),
            group_ids=index + first_group,
            rollout_log_probs=gen.log_probs,
            policy_version=versions if versions is not None else torch.full_like(gen.response_ids, gen.version) * gen.response_mask,
            truncated=~gen.stopped,
            metadata=metadata,
        )

    def decode_responses(self, batch: TrajectoryBatch) -> list[str]:
        return self.tokenizer.batch_decode(batch.response_ids * batch.response_mask, skip_special_tokens=True)

    def decode_prompts(self, batch: TrajectoryBatch) -> list[str]:
        return self.tokenizer.batch_decode(batch.prompt_ids, skip_special_tokens=True)

    def shown_prompts(self, batch: TrajectoryBatch) -> list[str]:
        """For logs: the chat template's special tokens kept, padding dropped (models/shown_text.py)."""
        return shown_texts(self.tokenizer, batch.prompt_ids, batch.prompt_mask)

    def shown_responses(self, batch: TrajectoryBatch) -> list[str]:
        return shown_texts(self.tokenizer, batch.response_ids, batch.response_mask)
