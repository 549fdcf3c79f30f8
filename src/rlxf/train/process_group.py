"""Joining a torch.distributed process group: gloo on CPU, NCCL on CUDA.

Data-parallel engines need the group before they are built. Ray rank actors join an N-rank group
(rank 0 picks the address, ``rendezvous_address``); a data-parallel backend in a process that has no
group (the embedded runtime, ``train.world_size: 1``) gets a 1-rank group of its own.
"""

from __future__ import annotations

import socket

import torch
import torch.distributed as dist

from rlxf.train.backends import build_train_engine

SINGLE_PROCESS_BACKENDS = {"single"}  # engines that never need a process group
# engines whose ranks share rows (a tensor-parallel group computes one replica's forward together): the
# Ray runtime's split gives every rank rows of its own, so in a run these train on one rank for now
SHARED_ROWS_BACKENDS = {"tp"}


def device_backend() -> str:
    return "nccl" if torch.cuda.is_available() else "gloo"


def free_port(host: str = "") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def rendezvous_address() -> tuple[str, int]:
    """(this node's IP, a free port) for the others to reach rank 0."""
    import ray

    host = ray.util.get_node_ip_address()
    return host, free_port(host)


def join(host: str, port: int, rank: int, world_size: int) -> None:
    dist.init_process_group(device_backend(), init_method=f"tcp://{host}:{port}", rank=rank, world_size=world_size)


def build_rank_engine(backend: str, model: torch.nn.Module, optim, **options):
    """``build_train_engine`` after making sure a data-parallel backend has a process group to use."""
    if backend not in SINGLE_PROCESS_BACKENDS and not dist.is_initialized():
        join("127.0.0.1", free_port("127.0.0.1"), rank=0, world_size=1)
    return build_train_engine(backend, model, optim, **options)
