"""A rollout with fixed answers, for hand-computed evaluation numbers: the ``Generates`` protocol of
eval/protocols.py, answering each prompt from a script (greedy at temperature 0, else the sampled list)."""

from __future__ import annotations

import torch

from rlxf.batch import TrajectoryBatch


class ScriptedRollout:
    def __init__(self, greedy: dict[str, str], sampled: dict[str, list[str]]) -> None:
        self.greedy, self.sampled = greedy, sampled

    def generate(self, rows, params, generator=None, first_group=0) -> TrajectoryBatch:
        pairs = [(i, row, text) for i, row in enumerate(rows)
                 for text in ([self.greedy[row["prompt"]]] if params.temperature == 0
                              else self.sampled[row["prompt"]][: params.n])]
        ones = torch.ones(len(pairs), 1, dtype=torch.long)  # the text travels in the metadata
        return TrajectoryBatch(
            prompt_ids=ones, prompt_mask=ones, response_ids=ones, response_mask=ones, loss_mask=ones,
            group_ids=torch.tensor([i for i, *_ in pairs]) + first_group,
            metadata=[{**{k: v for k, v in row.items() if k != "prompt"}, "stopped": True,
                       "scripted_prompt": row["prompt"], "scripted_response": text} for _, row, text in pairs],
        )

    def decode_prompts(self, batch) -> list[str]:
        return [m["scripted_prompt"] for m in batch.metadata]

    def decode_responses(self, batch) -> list[str]:
        return [m["scripted_response"] for m in batch.metadata]

    shown_prompts, shown_responses = decode_prompts, decode_responses  # scripted text has no special tokens
