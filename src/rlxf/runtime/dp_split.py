"""Splitting a call over data-parallel ranks and merging what the ranks return.

Rows (``compute_log_probs``, ``compute_values``): whole prompt groups stay on one rank when the
groups divide evenly (the shared-prompt forward in ``train/log_probs.py`` computes a group's prompt
once); otherwise rows are split into contiguous, balanced chunks. Every rank gets the same number
of rows — shorter shards repeat their last row (or row 0) — because FSDP ranks must run the same
number of forward passes; the padding rows' results are dropped when merging.

Update metrics: see ``merge_step_metrics``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlxf.tracking.reduce import reduce_metrics


@dataclass
class RowShards:
    rows: list[torch.Tensor]  # per rank: the original row indices it owns (unpadded)
    padded: list[torch.Tensor]  # per rank: the rows it is sent (equal lengths)

    def merge(self, results: list[torch.Tensor]) -> torch.Tensor:
        """Per-rank results [padded_len, ...] -> [B, ...] in the original row order."""
        total = sum(len(r) for r in self.rows)
        out = results[0].new_empty((total, *results[0].shape[1:]))
        for rows, result in zip(self.rows, results):
            out[rows] = result[: len(rows)].to(out.dtype)
        return out


def group_order(group_ids: torch.Tensor) -> list[torch.Tensor]:
    """The rows of each group (in order of the group's first row), each in row order."""
    _, inverse = torch.unique(group_ids, return_inverse=True)
    first_row = {}
    for row, group in enumerate(inverse.tolist()):
        first_row.setdefault(group, row)
    return [(inverse == g).nonzero().flatten() for g in sorted(first_row, key=first_row.get)]


def shard_rows(group_ids: torch.Tensor, world_size: int) -> RowShards:
    groups = group_order(group_ids)
    sizes = {len(g) for g in groups}
    if len(sizes) == 1 and len(groups) % world_size == 0:
        per_rank = len(groups) // world_size
        rows = [torch.cat(groups[r * per_rank:(r + 1) * per_rank]) for r in range(world_size)]
    else:
        rows = list(torch.cat(groups).tensor_split(world_size))
    width = max(len(r) for r in rows)
    padded = [torch.cat([r, (r[-1:] if len(r) else torch.zeros(1, dtype=torch.long)).repeat(width - len(r))])
              for r in rows]
    return RowShards(rows=rows, padded=padded)


GLOBAL_METRICS = ("loss", "grad_norm", "lr")  # already reduced over ranks by the engine


def merge_step_metrics(per_rank: list[list[dict[str, float]]]) -> list[dict[str, float]]:
    """One dict per optimizer step: the engine's global metrics from rank 0, the others (micro-batch
    means) averaged over ranks — equal to the single-process mean when the micro-batches coincide —
    and extremes (``*_max`` / ``*_min``) taken over ranks (tracking/reduce.py)."""
    merged = []
    for steps in zip(*per_rank):
        step = reduce_metrics(steps)
        step.update({k: steps[0][k] for k in GLOBAL_METRICS if k in steps[0]})
        merged.append(step)
    return merged
