"""Tensor parallelism, alone or on a 2-D ``("dp", "tp")`` mesh with FSDP2: the ``tp`` train engine.

``tensor_parallel`` ranks (default: all of them) hold one replica of the model with its decoder
layers split Megatron-style (train/tensor_parallel.py); with more ranks than that, the replicas form
the ``dp`` dimension and FSDP2 shards each over it (``fully_shard`` on the ``dp`` sub-mesh, after TP).
Rank r sits at (dp r // tp, tp r % tp), so a TP group is consecutive ranks (on GPUs: one node's NVLink).

The ranks of one TP group must see the same rows: the caller gives dp rank ``engine.dp_rank`` its share
of the mini-batch and divides by counts summed over the ``dp`` group (``engine.dp_group``). FSDP averages
gradients over the ``dp`` ranks only, so the loss is scaled by the dp size. The mini-batch loss is the
sum over the ``dp`` group. The weight sync's ``trainer_tensors`` / ``whole_bucket`` gather each DTensor
a bucket at a time (``full_tensor``) as for FSDP2; checkpoints are FSDP2's (the single-process format).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from rlxf.config_error import ConfigError
from rlxf.train.backends import TRAIN_ENGINES
from rlxf.train.data_parallel import all_reduce_values
from rlxf.train.fsdp_engine import FSDP2TrainEngine, transformer_blocks
from rlxf.train.optim_config import OptimConfig
from rlxf.train.tensor_parallel import apply_tensor_parallel, clip_gradients


def mesh_shape(world_size: int, tensor_parallel: int | None) -> tuple[int, int]:
    """(dp, tp) for ``world_size`` ranks; ``ConfigError`` when the degree does not divide them."""
    tp = tensor_parallel or world_size
    if tp < 1 or world_size % tp:
        raise ConfigError(f"train.tensor_parallel={tp} must divide the trainer's ranks ({world_size}): the ranks "
                          "form a (data-parallel x tensor-parallel) grid")
    return world_size // tp, tp


@TRAIN_ENGINES.register("tp")
class TensorParallelTrainEngine(FSDP2TrainEngine):
    def __init__(self, model: torch.nn.Module, cfg: OptimConfig, tensor_parallel: int | None = None) -> None:
        self.tensor_parallel = tensor_parallel
        super().__init__(model, cfg)

    def shard(self, model: torch.nn.Module) -> int:
        from torch.distributed.device_mesh import init_device_mesh

        dp, tp = mesh_shape(self.world_size, self.tensor_parallel)
        device = "cuda" if dist.get_backend() == "nccl" else "cpu"
        self.mesh = init_device_mesh(device, (dp, tp), mesh_dim_names=("dp", "tp"))
        apply_tensor_parallel(model, self.mesh["tp"])
        if dp > 1:
            from torch.distributed.fsdp import fully_shard

            for block in transformer_blocks(model):
                fully_shard(block, mesh=self.mesh["dp"])
            fully_shard(model, mesh=self.mesh["dp"])
        self.dp_group = self.mesh.get_group("dp")
        self.dp_rank, self.dp_size = self.mesh.get_local_rank("dp"), dp
        return dp

    def _global_loss(self, local_loss: float) -> float:
        # a TP group's ranks computed the same loss: sum the data-parallel replicas' shares only
        return all_reduce_values([local_loss], group=self.dp_group)[0]

    def _clip_gradients(self) -> float:
        params = [p for p in self.model.parameters() if p.grad is not None]
        return clip_gradients(params, self.cfg.grad_clip if self.cfg.grad_clip else float("inf"))
