"""Micro-batches by rows and by padded-token budget (train.micro_batch_tokens)."""

import torch

from rlxf.batch import TrajectoryBatch
from rlxf.train.micro_batches import micro_batches, token_budget_rows


def test_token_budget_packs_rows_while_the_padded_chunk_fits():
    prompts = [3, 3, 4, 3, 5, 3]
    responses = [2, 2, 2, 3, 10, 30]
    # [0,1,2]: 3 x (4 + 2) = 18 <= 20; adding row 3 -> 4 x (4 + 3) = 28 > 20
    # [3]: then row 4 -> 2 x (5 + 10) = 30 > 20; [4]: 15; row 5 alone is 33 > 20 but gets its own chunk
    assert token_budget_rows(prompts, responses, 20) == [[0, 1, 2], [3], [4], [5]]
    assert token_budget_rows(prompts, responses, 1000) == [[0, 1, 2, 3, 4, 5]]


def test_micro_batches_by_tokens_cover_every_row_once_trimmed():
    lengths = torch.tensor([2, 2, 3, 3, 9, 12])
    width = int(lengths.max())
    response_mask = (torch.arange(width)[None, :] < lengths[:, None]).long()
    batch = TrajectoryBatch(
        prompt_ids=torch.ones(6, 4, dtype=torch.long), prompt_mask=torch.ones(6, 4, dtype=torch.long),
        response_ids=torch.arange(6)[:, None].expand(6, width).clone(), response_mask=response_mask,
        loss_mask=response_mask.float(), group_ids=torch.arange(6),
    )
    micros = micro_batches(batch, size=2, max_tokens=32)
    assert [m.response_ids[:, 0].tolist() for m in micros] == [[0, 1, 2, 3], [4, 5]]  # 4 x 7 = 28; 2 x 16
    assert [m.response_ids.shape[1] for m in micros] == [3, 12]  # each trimmed to its longest response
    assert [len(m) for m in micro_batches(batch, size=2)] == [2, 2, 2]
