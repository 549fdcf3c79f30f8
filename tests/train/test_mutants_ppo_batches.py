"""PPO's schedule (train/ppo_batches.py) seen through a recording engine: how many optimizer steps, which
rows each holds, in which order, split how, normalised by what. Cases the mutation check
(tools/mutation_check.py) found unasserted."""

import torch

from rlxf.batch import TrajectoryBatch
from rlxf.train.data_parallel import DataShard
from rlxf.train.micro_batches import group_order
from rlxf.train.ppo_batches import needs_old_log_probs, ppo_update


class Recorder:
    """An engine that records each optimizer step's micro-batches (row ids) and the normaliser it got."""

    def __init__(self) -> None:
        self.steps: list[list[list[int]]] = []
        self.normalisers = []

    def optimizer_step(self, micros, loss_of):
        self.steps.append([m.prompt_ids[:, 0].tolist() for m in micros])
        self.normalisers.append(loss_of(micros[0]))
        return {"step": float(len(self.steps))}


def batch_of(lengths: list[int], width: int = 6) -> TrajectoryBatch:
    """Row i has prompt ids i and ``lengths[i]`` loss tokens."""
    rows = len(lengths)
    mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).long()
    return TrajectoryBatch(
        prompt_ids=torch.arange(rows)[:, None].expand(rows, 2).clone(), prompt_mask=torch.ones(rows, 2, dtype=torch.long),
        response_ids=torch.ones(rows, width, dtype=torch.long), response_mask=mask,
        loss_mask=mask.float(), group_ids=torch.arange(rows),
    )


def run(batch, mini, micro, epochs, **kwargs):
    engine = Recorder()
    history = ppo_update(engine, batch, mini, micro, epochs, torch.Generator().manual_seed(0),
                         lambda micro_batch, normaliser: normaliser, **kwargs)
    return engine, history


def test_every_epoch_covers_every_row_once_in_mini_batches_of_the_given_size():
    engine, history = run(batch_of([1, 2, 3, 4, 5, 6]), mini=4, micro=2, epochs=2)
    assert history == [{"step": 1.0}, {"step": 2.0}, {"step": 3.0}, {"step": 4.0}]  # 2 epochs x 2 mini-batches
    rows = [sum(step, []) for step in engine.steps]
    assert [len(r) for r in rows] == [4, 2, 4, 2]
    assert sorted(rows[0] + rows[1]) == sorted(rows[2] + rows[3]) == [0, 1, 2, 3, 4, 5]
    assert rows[:2] != rows[2:]  # each epoch reshuffles


def test_each_mini_batch_is_sorted_by_response_length_then_split_into_micro_batches():
    lengths = [5, 1, 4, 2, 6, 3]
    engine, _ = run(batch_of(lengths), mini=6, micro=2, epochs=1)
    (step,) = engine.steps
    assert step == [[1, 3], [5, 2], [0, 4]]  # lengths 1, 2 | 3, 4 | 5, 6


def test_the_normaliser_counts_the_whole_mini_batch_with_the_budget_or_the_width():
    engine, _ = run(batch_of([1, 2, 3, 0]), mini=4, micro=1, epochs=1, max_response_len=10)
    norm = engine.normalisers[0]  # given to the first micro-batch (one row), counted over all four
    assert (norm.num_tokens, norm.num_seqs, norm.max_len) == (6.0, 3.0, 10.0)
    engine, _ = run(batch_of([1, 2, 3, 0]), mini=4, micro=1, epochs=1)
    assert engine.normalisers[0].max_len == 6.0  # the batch's width without a budget


def test_a_token_budget_sizes_micro_batches_on_one_process_only():
    lengths = [1, 1, 1, 6]  # prompts of 2: three short rows fit 3 x 3 = 9 tokens; the long row alone
    engine, _ = run(batch_of(lengths), mini=4, micro=1, epochs=1, micro_batch_tokens=9)
    assert engine.steps[0] == [[0, 1, 2], [3]]
    rank0, _ = run(batch_of(lengths), mini=4, micro=1, epochs=1, micro_batch_tokens=9, shard=DataShard(0, 2))
    assert rank0.steps[0] == [[0], [2]]  # data-parallel ranks split by rows: micro-batches 0 and 2 of 4


def test_old_log_probs_need_a_pass_unless_one_epoch_over_one_mini_batch():
    assert not needs_old_log_probs(8, 8, 1)
    assert not needs_old_log_probs(8, 16, 1)
    assert needs_old_log_probs(8, 4, 1)
    assert needs_old_log_probs(8, 8, 2)


def test_rows_of_equal_length_keep_the_shuffled_order():
    # a stable sort: ties stay in the generator's order, so the micro-batches (and their logged means) are
    # the generator's alone; an unstable sort reorders ties of 17+ rows on the CPU
    lengths = [1, 2] * 16
    engine, _ = run(batch_of(lengths), mini=32, micro=32, epochs=1)
    order = torch.randperm(32, generator=torch.Generator().manual_seed(0)).tolist()
    assert engine.steps[0] == [[r for r in order if lengths[r] == 1] + [r for r in order if lengths[r] == 2]]


def grouped_batch_of(groups: list[int], lengths: list[int], width: int = 6) -> TrajectoryBatch:
    batch = batch_of(lengths, width)
    batch.group_ids = torch.tensor(groups)
    return batch


def test_group_order_keeps_groups_whole_ordered_by_their_longest_response():
    # groups: 7 -> rows 0 (3), 2 (1): longest 3; 4 -> rows 1 (5), 3 (2): longest 5; 9 -> rows 4, 5 (4, 4)
    batch = grouped_batch_of([7, 4, 7, 4, 9, 9], [3, 5, 1, 2, 4, 4])
    assert group_order(batch).tolist() == [2, 0, 4, 5, 3, 1]


def test_micro_batches_of_a_grpo_mini_batch_hold_whole_groups():
    # 4 prompts x 4 samples (longest responses 5, 3, 6, 4), lengths that interleave the groups when
    # the rows are sorted by length alone
    groups = [g for g in range(4) for _ in range(4)]
    lengths = [5, 1, 2, 3, 3, 3, 1, 2, 6, 1, 4, 2, 4, 4, 2, 1]
    engine, _ = run(grouped_batch_of(groups, lengths, width=6), mini=16, micro=4, epochs=1)
    (step,) = engine.steps
    assert [sorted({groups[r] for r in micro}) for micro in step] == [[1], [3], [0], [2]]
    assert [[lengths[r] for r in micro] for micro in step] == [sorted(lengths[r] for r in micro) for micro in step]
