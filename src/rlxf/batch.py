"""The one data type that flows between roles: a batch of trajectories.

Layout. Each row is one trajectory: a prompt, then a response.

* ``prompt_ids``   [B, P] left-padded with ``pad_id``; ``prompt_mask`` [B, P] is 1 on real prompt tokens.
* ``response_ids`` [B, R] right-padded; ``response_mask`` [B, R] is 1 on every real response token,
  ``loss_mask`` [B, R] is 1 only where the policy produced the token (environment / tool tokens of a
  multi-turn transcript and padding are 0, so they are never trained on).

The full sequence a model sees is ``cat(prompt_ids, response_ids)``; the log-prob of response token
``t`` comes from the logits at position ``P + t - 1``. All per-token quantities below are [B, R] and
aligned with ``response_ids``. Nothing is ever re-tokenized: token ids in, token ids out.

Per-token fields (filled in by the stage named):

* ``rollout_log_probs`` — log-probs of the sampling policy, from the rollout engine.
* ``policy_version``    — the policy version that produced each token (rollout engine).
* ``old_log_probs``     — log-probs of the policy before this update (trainer; equals
  ``rollout_log_probs`` up to numerics when on-policy).
* ``ref_log_probs``     — the frozen reference model's log-probs (only when a KL term is used).
* ``teacher_log_probs`` — a teacher model's log-probs of the sampled tokens (same tokenizer; only with
  a teacher-reading advantage estimator such as ``on_policy_distillation``).
* ``values``            — the critic's value estimates (PPO only).
* ``token_rewards``     — per-token reward (sequence score on the last response token, KL penalty
  spread over tokens when the KL sits in the reward).
* ``advantages`` / ``returns`` — from the advantage estimator.

Per-sample fields: ``rewards`` [B] (the scorer's sequence score), ``baseline_rewards`` [B] (ReMax:
the score of the greedy response to the row's prompt), ``group_ids`` [B] (rows with the same id
answer the same prompt), ``truncated`` [B] (hit the length budget without stopping), and
``metadata`` (a list of B dicts: the task's answer, reward components, ...).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

import torch

TENSOR_FIELDS = (
    "prompt_ids",
    "prompt_mask",
    "response_ids",
    "response_mask",
    "loss_mask",
    "rollout_log_probs",
    "policy_version",
    "old_log_probs",
    "ref_log_probs",
    "teacher_log_probs",
    "values",
    "token_rewards",
    "advantages",
    "returns",
    "rewards",
    "baseline_rewards",
    "group_ids",
    "truncated",
)


@dataclass
class TrajectoryBatch:
    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    response_ids: torch.Tensor
    response_mask: torch.Tensor
    loss_mask: torch.Tensor
    group_ids: torch.Tensor
    rollout_log_probs: torch.Tensor | None = None
    policy_version: torch.Tensor | None = None
    truncated: torch.Tensor | None = None
    old_log_probs: torch.Tensor | None = None
    ref_log_probs: torch.Tensor | None = None
    teacher_log_probs: torch.Tensor | None = None
    values: torch.Tensor | None = None
    rewards: torch.Tensor | None = None
    baseline_rewards: torch.Tensor | None = None
    token_rewards: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    metadata: list[dict] = field(default_factory=list)

    def __len__(self) -> int:
        return self.prompt_ids.shape[0]

    @property
    def input_ids(self) -> torch.Tensor:
        """[B, P + R] the full token sequence."""
        return torch.cat([self.prompt_ids, self.response_ids], dim=1)

    @property
    def attention_mask(self) -> torch.Tensor:
        """[B, P + R] 1 on real tokens (prompt and response), 0 on padding."""
        return torch.cat([self.prompt_mask, self.response_mask], dim=1)

    @property
    def response_lengths(self) -> torch.Tensor:
        return self.response_mask.sum(dim=1)

    def select(self, index: torch.Tensor | list[int]) -> TrajectoryBatch:
        """Rows ``index`` as a new batch (tensors indexed, metadata picked)."""
        index = torch.as_tensor(index, dtype=torch.long)
        updates = {
            name: getattr(self, name)[index]
            for name in TENSOR_FIELDS
            if getattr(self, name) is not None
        }
        updates["metadata"] = [self.metadata[i] for i in index.tolist()] if self.metadata else []
        return replace(self, **updates)

    def to(self, device: torch.device | str) -> TrajectoryBatch:
        updates = {
            name: getattr(self, name).to(device)
            for name in TENSOR_FIELDS
            if getattr(self, name) is not None
        }
        return replace(self, **updates)

    @staticmethod
    def concat(batches: list[TrajectoryBatch], pad_id: int) -> TrajectoryBatch:
        """Stack batches row-wise, re-padding prompts on the left and responses on the right."""
        if len(batches) == 1:
            return batches[0]
        prompt_len = max(b.prompt_ids.shape[1] for b in batches)
        response_len = max(b.response_ids.shape[1] for b in batches)
        merged: dict = {}
        for f in fields(TrajectoryBatch):
            name = f.name
            if name == "metadata":
                merged[name] = [m for b in batches for m in b.metadata]
                continue
            values = [getattr(b, name) for b in batches]
            if any(v is None for v in values):
                merged[name] = None
                continue
            if values[0].dim() == 1:
                merged[name] = torch.cat(values)
                continue
            width = prompt_len if name.startswith("prompt") else response_len
            fill = pad_id if name.endswith("_ids") else 0
            left = name.startswith("prompt")
            merged[name] = torch.cat([_pad_to(v, width, fill, left) for v in values])
        return TrajectoryBatch(**merged)


def _pad_to(t: torch.Tensor, width: int, fill: float, left: bool) -> torch.Tensor:
    missing = width - t.shape[1]
    if missing == 0:
        return t
    pad = torch.full((t.shape[0], missing), fill, dtype=t.dtype, device=t.device)
    return torch.cat([pad, t] if left else [t, pad], dim=1)


def left_pad(prompts: list[list[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Token lists -> (ids [B, P], mask [B, P]) padded on the left."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, tokens in enumerate(prompts):
        if tokens:
            ids[row, width - len(tokens):] = torch.tensor(tokens, dtype=torch.long)
            mask[row, width - len(tokens):] = 1
    return ids.to(device), mask.to(device)


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids for a left-padded batch: 0 at the first real token of each row (pads get 0 too)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
