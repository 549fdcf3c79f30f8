"""Dr. GRPO's constant length is the generation budget, not the batch's longest answer."""

import torch

from rlxf.algos import aggregate_loss
from rlxf.batch import TrajectoryBatch
from rlxf.config import Config, OptimConfig
from rlxf.loops.setup import generation_budget
from rlxf.train.engine import TrainEngine
from rlxf.train.ppo_batches import ppo_update


class UnitLoss(torch.nn.Module):
    """Per-token loss ``w`` (w = 1) on every loss token: the aggregation's constant is all that counts."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(()))


def two_rows_of_2_and_4_tokens() -> TrajectoryBatch:
    response_mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])  # the engine pads to the longest: width 4
    return TrajectoryBatch(
        prompt_ids=torch.ones(2, 1, dtype=torch.long), prompt_mask=torch.ones(2, 1, dtype=torch.long),
        response_ids=torch.ones(2, 4, dtype=torch.long), response_mask=response_mask,
        loss_mask=response_mask.clone(), group_ids=torch.tensor([0, 0]),
    )


def drgrpo_loss(budget: int | None) -> float:
    model = UnitLoss()

    def loss_of(micro, normaliser):
        per_token = model.w * torch.ones(micro.loss_mask.shape)
        return aggregate_loss(per_token, micro.loss_mask, "seq_mean_token_sum_norm", normaliser), {}

    engine = TrainEngine(model, OptimConfig(lr=1e-3))
    history = ppo_update(engine, two_rows_of_2_and_4_tokens(), 2, 2, 1, torch.Generator().manual_seed(0), loss_of,
                         max_response_len=budget)
    return history[0]["loss"]


def test_constant_is_the_generation_budget():
    # (2 + 4) / (2 rows * budget 6) = 0.5 (the paper, TRL); the engine's width 4 would give 0.75
    assert drgrpo_loss(6) == 0.5


def test_without_a_budget_the_width_is_used():
    assert drgrpo_loss(None) == 0.75


def test_generation_budget_of_a_config():
    assert generation_budget(Config(rollout={"max_new_tokens": 6})) == 6
    assert generation_budget(Config(env={"name": "tool_use", "max_total_tokens": 40})) == 40  # all turns together
