"""Critic role (PPO): value estimates per response token and the clipped value-loss update."""

from __future__ import annotations

from pathlib import Path

import torch

from rlxf.algos import AlgorithmConfig, LossNormaliser, value_loss
from rlxf.batch import TrajectoryBatch
from rlxf.train import checkpoint as ckpt
from rlxf.train.data_parallel import DataShard, is_writer
from rlxf.train.log_probs import pad_columns
from rlxf.train.micro_batches import micro_batches
from rlxf.train.optim_config import OptimConfig
from rlxf.train.ppo_batches import ppo_update
from rlxf.train.process_group import build_rank_engine
from rlxf.train.value_model import ValueModel


def response_values(model: ValueModel, micro: TrajectoryBatch) -> torch.Tensor:
    """[B, R]: the value of the state before each response token (positions P-1 .. P+R-2)."""
    return model(micro.input_ids, micro.attention_mask, response_width=micro.response_ids.shape[1]) * micro.response_mask


class CriticRole:
    def __init__(
        self, model: ValueModel, optim: OptimConfig, algo: AlgorithmConfig,
        mini_batch_size: int, micro_batch_size: int, backend: str = "single",
        engine_options: dict | None = None, micro_batch_tokens: int | None = None,
        max_response_len: int | None = None,
    ) -> None:
        self.model = model
        # train.backend (train/backends.py) with its options (TrainConfig.engine_options, e.g. zero_stage)
        self.engine = build_rank_engine(backend, model, optim, **(engine_options or {}))
        self.shard = DataShard.current()
        self.algo = algo
        self.mini_batch_size = mini_batch_size
        self.micro_batch_size = micro_batch_size
        self.micro_batch_tokens = micro_batch_tokens  # update micro-batches by padded tokens (train/micro_batches.py)
        self.max_response_len = max_response_len  # the generation budget: Dr. GRPO's constant (ppo_update)

    @torch.no_grad()
    def compute_values(self, batch: TrajectoryBatch) -> torch.Tensor:
        self.model.eval()
        width = batch.response_ids.shape[1]
        return torch.cat([
            pad_columns(response_values(self.model, micro), width)
            for micro in micro_batches(batch, self.micro_batch_size)
        ])

    def update(self, batch: TrajectoryBatch, generator: torch.Generator) -> list[dict[str, float]]:
        """PPO epochs over mini-batches; one metrics dict per optimizer step."""
        return ppo_update(
            self.engine, batch, self.mini_batch_size, self.micro_batch_size, self.algo.ppo_epochs, generator, self._loss,
            self.shard, self.micro_batch_tokens, self.max_response_len,
        )

    def save_checkpoint(self, out_dir: Path) -> None:
        weights = self.engine.full_state_dict()  # every rank takes part in the gather
        if is_writer():
            ckpt.save_tensors(weights, Path(out_dir) / "critic.safetensors")
        self.engine.save_state(Path(out_dir), "critic")

    def load_checkpoint(self, in_dir: Path) -> None:
        self.engine.load_full_state_dict(ckpt.load_tensors(Path(in_dir) / "critic.safetensors"))
        self.engine.load_state(Path(in_dir), "critic")

    def _loss(self, micro: TrajectoryBatch, normaliser: LossNormaliser) -> tuple[torch.Tensor, dict[str, float]]:
        values = response_values(self.model, micro)
        return value_loss(self.algo, values, micro.values, micro.returns, micro.loss_mask, normaliser)
