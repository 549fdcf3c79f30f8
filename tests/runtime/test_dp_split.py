"""Splitting a batch over data-parallel ranks and merging the results (runtime/dp_split.py,
train/data_parallel.py): no Ray, no process group."""

from __future__ import annotations

import torch

from rlxf.batch import TrajectoryBatch
from rlxf.runtime.dp_split import merge_step_metrics, shard_rows
from rlxf.train.data_parallel import DataShard


def make_batch(rows: int) -> TrajectoryBatch:
    ones = torch.ones(rows, 3, dtype=torch.long)
    return TrajectoryBatch(prompt_ids=ones, prompt_mask=ones, response_ids=torch.arange(rows * 3).view(rows, 3),
                           response_mask=ones, loss_mask=ones.float(), group_ids=torch.arange(rows) // 2)


def test_whole_groups_stay_on_one_rank_and_merge_restores_row_order():
    groups = torch.tensor([2, 0, 2, 1, 0, 1, 3, 3])  # 4 groups of 2, rows interleaved
    shards = shard_rows(groups, 2)
    assert [groups[r].tolist() for r in shards.rows] == [[2, 2, 0, 0], [1, 1, 3, 3]]
    assert [len(p) for p in shards.padded] == [4, 4]
    values = torch.arange(8.0)[:, None] * torch.ones(1, 3)  # a per-row result, [B, R]
    merged = shards.merge([values[p] for p in shards.padded])
    assert torch.equal(merged, values)


def test_uneven_groups_split_by_rows_and_pad_to_equal_lengths():
    groups = torch.tensor([0, 0, 0, 1, 1, 2, 2])  # 3 groups of unequal size over 2 ranks
    shards = shard_rows(groups, 2)
    assert sorted(torch.cat(shards.rows).tolist()) == list(range(7))
    assert [len(r) for r in shards.rows] == [4, 3] and [len(p) for p in shards.padded] == [4, 4]
    assert shards.padded[1].tolist() == [4, 5, 6, 6]  # the short rank repeats its last row
    values = torch.arange(7.0) * 10
    assert torch.equal(shards.merge([values[p] for p in shards.padded]), values)


def test_more_ranks_than_rows_still_gives_every_rank_a_row():
    shards = shard_rows(torch.tensor([0]), 2)
    assert [p.tolist() for p in shards.padded] == [[0], [0]]
    assert torch.equal(shards.merge([torch.tensor([5.0]), torch.tensor([7.0])]), torch.tensor([5.0]))


def test_each_rank_takes_a_contiguous_slice_of_the_global_mini_batch():
    batch = make_batch(8)
    slices = [DataShard(rank, 2).rows(batch) for rank in range(2)]
    assert torch.equal(torch.cat([s.response_ids for s in slices]), batch.response_ids)
    assert DataShard().rows(batch) is batch


def test_whole_micro_batches_are_dealt_round_robin_to_the_ranks():
    batch = make_batch(8)
    ids = batch.response_ids[:, 0].tolist()
    shares = [DataShard(rank, 2).rows(batch, micro_batch_size=2).response_ids[:, 0].tolist() for rank in range(2)]
    assert shares == [ids[0:2] + ids[4:6], ids[2:4] + ids[6:8]]  # micro-batches 0, 2 and 1, 3
    # 8 rows do not split into whole micro-batches of 3 per rank: contiguous slices
    assert DataShard(1, 2).rows(batch, micro_batch_size=3).response_ids[:, 0].tolist() == ids[4:8]


def test_step_metrics_global_from_rank_0_others_averaged():
    rank0 = [{"loss": 0.5, "grad_norm": 2.0, "lr": 1e-4, "clip_fraction": 0.2}]
    rank1 = [{"loss": 0.5, "grad_norm": 2.0, "lr": 1e-4, "clip_fraction": 0.4}]
    assert merge_step_metrics([rank0, rank1]) == [{"loss": 0.5, "grad_norm": 2.0, "lr": 1e-4,
                                                  "clip_fraction": 0.30000000000000004}]


def test_the_update_pads_long_responses_together():
    """ppo_update sorts each mini-batch by response length (groups by their longest; here every row is a
    group of its own): one long response among short ones pads only its own micro-batch."""
    from rlxf.train.ppo_batches import ppo_update

    batch = make_batch(4)
    batch.group_ids = torch.arange(4)
    batch.response_ids = torch.zeros(4, 10, dtype=torch.long)
    batch.response_mask = torch.tensor([[1] * 10, [1, 1] + [0] * 8, [1, 1] + [0] * 8, [1] * 3 + [0] * 7])
    batch.loss_mask = batch.response_mask.float()

    class Recorder:
        widths: list[int] = []

        def optimizer_step(self, micros, loss_of):
            self.widths = [m.response_ids.shape[1] for m in micros]
            return {}

    engine = Recorder()
    ppo_update(engine, batch, 4, 2, 1, torch.Generator().manual_seed(0), lambda micro, normaliser: None)
    assert engine.widths == [2, 10]  # the two 2-token rows together, the 3- and 10-token rows together
