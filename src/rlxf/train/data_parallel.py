"""This rank's share of a data-parallel update: its rows of every global mini-batch, and the loss
normaliser of the whole mini-batch (counts summed over ranks).

``ppo_update`` takes a ``DataShard``: with the default (one rank) nothing changes; on N ranks every
rank draws the same global mini-batches (same generator state), trains on its share of each and
divides by the global counts, so the summed gradient is the single-process gradient on the union.
When the mini-batch splits into a multiple of N whole micro-batches, rank r takes micro-batches r,
r + N, ...: the ranks' micro-batches are the single process's (same per-micro-batch metrics), and
with length-sorted mini-batches every rank gets short and long rows alike. Otherwise each rank takes
a contiguous slice.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from rlxf.algos import LossNormaliser
from rlxf.batch import TrajectoryBatch


def distributed() -> bool:
    """True in a process that is one of several ranks of a process group."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def reduce_device() -> torch.device:
    """Where small tensors for a collective live: NCCL reduces CUDA tensors only, gloo CPU ones."""
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_values(values: list[float], op=dist.ReduceOp.SUM, group=None) -> list[float]:
    """``values`` reduced over all ranks, or those of ``group`` (as they are in a single process)."""
    if not (dist.is_available() and dist.is_initialized()):
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=reduce_device())
    dist.all_reduce(tensor, op=op, group=group)
    return tensor.tolist()


def global_counts(mask: torch.Tensor) -> tuple[float, float]:
    """(loss tokens, sequences with a loss token) of ``mask`` summed over all ranks."""
    per_row = mask.sum(dim=1)
    num_tokens, num_seqs = all_reduce_values([float(per_row.sum()), float((per_row > 0).sum())])
    return num_tokens, num_seqs


def all_ranks_agree(flag: bool) -> bool:
    """``flag`` on every rank (a collective: ranks that must run the same forward passes decide together)."""
    if not distributed():
        return flag
    return all_reduce_values([1.0 if flag else 0.0], op=dist.ReduceOp.MIN)[0] == 1.0


def is_writer() -> bool:
    """The process that writes files (rank 0, or the only process)."""
    return not distributed() or dist.get_rank() == 0


@dataclass(frozen=True)
class DataShard:
    rank: int = 0
    world_size: int = 1

    @classmethod
    def current(cls) -> DataShard:
        return cls(dist.get_rank(), dist.get_world_size()) if distributed() else cls()

    def rows(self, mini: TrajectoryBatch, micro_batch_size: int | None = None) -> TrajectoryBatch:
        """This rank's share of a global mini-batch (config: mini_batch_size % world_size == 0)."""
        if self.world_size == 1:
            return mini
        index = torch.arange(len(mini))
        if micro_batch_size and len(mini) % (micro_batch_size * self.world_size) == 0:
            chunks = index.split(micro_batch_size)
            return mini.select(torch.cat(chunks[self.rank::self.world_size]))
        return mini.select(index.tensor_split(self.world_size)[self.rank])

    def normaliser(self, local_mask: torch.Tensor, max_response_len: int) -> LossNormaliser:
        if self.world_size == 1:
            return LossNormaliser.from_mask(local_mask, max_response_len=max_response_len)
        num_tokens, num_seqs = global_counts(local_mask)
        return LossNormaliser.from_counts(num_tokens, num_seqs, max_response_len)


WHOLE = DataShard()
