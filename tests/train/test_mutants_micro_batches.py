"""Micro-batch trimming and the token budget at its edges: cases the mutation check
(tools/mutation_check.py) found unasserted."""

import torch

from rlxf.batch import TrajectoryBatch
from rlxf.train.micro_batches import micro_batches, token_budget_rows, trim_padding

PER_TOKEN = ("rollout_log_probs", "policy_version", "old_log_probs", "ref_log_probs", "values", "token_rewards",
             "advantages", "returns")


def left_padded_batch() -> TrajectoryBatch:
    # prompts of 2, 3 and 1 tokens left-padded to 5 columns: the first 2 columns are padding in every row;
    # responses of 2, 1 and 3 tokens right-padded to 4: the last column is padding in every row
    prompt_mask = torch.tensor([[0, 0, 0, 1, 1], [0, 0, 1, 1, 1], [0, 0, 0, 0, 1]])
    response_mask = torch.tensor([[1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0]])
    per_token = torch.arange(12.0).view(3, 4)
    return TrajectoryBatch(
        prompt_ids=torch.arange(15).view(3, 5), prompt_mask=prompt_mask, response_ids=torch.arange(12).view(3, 4),
        response_mask=response_mask, loss_mask=response_mask.float(), group_ids=torch.tensor([0, 0, 1]),
        **{name: per_token + i for i, name in enumerate(PER_TOKEN)},
    )


def test_trim_padding_drops_shared_left_prompt_padding_and_right_response_padding():
    batch = left_padded_batch()
    trimmed = trim_padding(batch)
    assert torch.equal(trimmed.prompt_ids, batch.prompt_ids[:, 2:])
    assert torch.equal(trimmed.prompt_mask, batch.prompt_mask[:, 2:])
    for name in ("response_ids", "response_mask", "loss_mask", *PER_TOKEN):
        assert torch.equal(getattr(trimmed, name), getattr(batch, name)[:, :3]), name
    assert torch.equal(trimmed.group_ids, batch.group_ids)


def test_each_micro_batch_is_trimmed_to_its_own_rows():
    micros = micro_batches(left_padded_batch(), size=2)
    assert [m.prompt_ids.shape[1] for m in micros] == [3, 1]  # rows 0-1 need 3 prompt columns; row 2 one
    assert [m.response_ids.shape[1] for m in micros] == [2, 3]
    assert micros[1].prompt_ids.tolist() == [[14]] and micros[1].response_ids.tolist() == [[8, 9, 10]]


def test_a_batch_without_prompt_tokens_keeps_every_prompt_column():
    batch = left_padded_batch()
    batch.prompt_mask = torch.zeros_like(batch.prompt_mask)
    assert trim_padding(batch).prompt_ids.shape == (3, 5)


def test_token_budget_keeps_a_chunk_that_fills_it_exactly():
    # 2 rows x (2 + 3) = 10 tokens: exactly the budget, one chunk; the third row would make 15
    assert token_budget_rows([2, 2, 2], [3, 3, 3], 10) == [[0, 1], [2]]
    # widths come from the chunk's longest prompt and longest response, which may be different rows
    assert token_budget_rows([4, 1], [1, 4], 16) == [[0, 1]]  # 2 x (4 + 4) = 16
    assert token_budget_rows([4, 1], [1, 4], 15) == [[0], [1]]
    # after a chunk closes, the next one is measured from its first row alone
    assert token_budget_rows([5, 1, 1], [5, 1, 1], 10) == [[0], [1, 2]]
    # widths start at 0: two rows with empty responses fit 2 x (2 + 0) = 4 tokens
    assert token_budget_rows([2, 2], [0, 0], 4) == [[0, 1]]
