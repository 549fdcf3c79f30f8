"""DAPO dynamic sampling: fill a step's batch with prompt groups whose rewards differ.

A group whose responses all scored the same has zero group-relative advantage, so it only dilutes
the batch. With ``algorithm.dynamic_sampling`` the loop draws ``prompts_per_step`` prompts per round,
keeps the groups with signal (:func:`rlxf.algos.groups_with_signal`) and draws again until
``prompts_per_step`` groups are kept or ``max_sampling_rounds`` rounds are spent. A batch still short
after the last round is topped up with the dropped groups in draw order, so every step trains on
``prompts_per_step`` groups (the top-up groups carry no advantage under group baselines).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from rlxf.algos import AlgorithmConfig, groups_with_signal
from rlxf.batch import TrajectoryBatch
from rlxf.data.prompts import PromptStream

# (prompt rows, first group id) -> the scored batch of their responses
SampleFn = Callable[[list[dict], int], TrajectoryBatch]


def split_groups(batch: TrajectoryBatch) -> tuple[list[TrajectoryBatch], list[TrajectoryBatch]]:
    """(groups with signal, groups without), each a list of one-group batches in draw order."""
    signal = groups_with_signal(batch.rewards, batch.group_ids)
    with_signal, without = [], []
    for group in torch.unique(batch.group_ids).tolist():
        rows = torch.nonzero(batch.group_ids == group).squeeze(1)
        (with_signal if bool(signal[rows[0]]) else without).append(batch.select(rows))
    return with_signal, without


def fill_batch(
    sample: SampleFn, stream: PromptStream, prompts_per_step: int, algo: AlgorithmConfig,
    pad_id: int, metrics: dict[str, float],
) -> TrajectoryBatch:
    """One step's scored batch: a single draw, or DAPO dynamic sampling when the algorithm asks."""
    if not algo.dynamic_sampling:
        return sample(stream.take(prompts_per_step), 0)
    kept: list[TrajectoryBatch] = []
    dropped: list[TrajectoryBatch] = []
    rounds = 0
    while len(kept) < prompts_per_step and rounds < algo.max_sampling_rounds:
        with_signal, without = split_groups(sample(stream.take(prompts_per_step), rounds * prompts_per_step))
        kept += with_signal
        dropped += without
        rounds += 1
    drawn = rounds * prompts_per_step
    topped_up = max(prompts_per_step - len(kept), 0)
    metrics.update({
        "sampling/rounds": rounds,
        "sampling/signal_fraction": len(kept) / drawn,
        "sampling/topped_up_groups": topped_up,
    })
    groups = (kept + dropped[:topped_up])[:prompts_per_step]
    return TrajectoryBatch.concat(groups, pad_id)
