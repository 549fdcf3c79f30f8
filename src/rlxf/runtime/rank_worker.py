"""One rank of a data-parallel trainer role on Ray: a ``RoleWorker`` that joins the process group
before it builds the role (a data-parallel engine shards the model over the group when it is built)."""

from __future__ import annotations

import torch

from rlxf.runtime.worker import RoleWorker
from rlxf.train import process_group


class RankWorker(RoleWorker):
    def __init__(self, threads: int) -> None:  # the role is built by build(), after join()
        if threads:
            torch.set_num_threads(threads)
        self.role = None

    def rendezvous_address(self) -> tuple[str, int]:
        """Called on rank 0: where the other ranks reach it."""
        return process_group.rendezvous_address()

    def join(self, host: str, port: int, rank: int, world_size: int) -> None:
        process_group.join(host, port, rank, world_size)

    def build(self, spec: tuple) -> None:
        factory, args, kwargs = spec
        self.role = factory(*args, **kwargs)
