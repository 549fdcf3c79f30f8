"""The ``shared_memory`` transport: trainer and engine on one machine share one region holding every bucket.

The trainer's sending rank maps a file in ``/dev/shm`` (a RAM-backed region other processes map too),
writes each gathered bucket straight into it and stamps it (``transports/plan.py``); what goes through
the runtime is a small ``SharedRegion`` handle (path, plan, version, digests). The engine maps the same
region once and loads from views into it — nothing is serialised or fetched, one copy on each side.
The region is allocated once per plan and rewritten in place every sync; the driver calls the engine
only after the trainer finished writing, and stamps catch an engine reading a region another version
overwrote. Weights on a GPU go as CUDA IPC handles instead (``torch.multiprocessing`` reductions: the
engine maps the trainer's device memory, on the same GPU or one peer-accessible to it).
"""

from __future__ import annotations

import os
import socket
import tempfile
import uuid
import weakref
from dataclasses import dataclass, field

import torch

from rlxf.runtime.sync_modes import SyncHeader, SyncRequest, select_weights
from rlxf.runtime.transports import WEIGHT_TRANSPORTS, Channel
from rlxf.runtime.transports.plan import BucketPlan, bucket_digest, check_stamps, fill_bucket, plan_buckets
from rlxf.runtime.transports.source import is_sending_rank, trainer_tensors, whole_bucket
from rlxf.runtime.weight_sync import as_weight_buckets, load_and_verify

SHM_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


@dataclass(frozen=True)
class SharedRegion:
    """What the engine needs to find and check the trainer's buckets."""

    path: str  # a file under SHM_DIR, or "" for CUDA IPC
    host: str
    plan: BucketPlan
    version: int
    digests: list[str] | None = None
    cuda_handle: tuple | None = None  # (rebuild function, its arguments) of the CUDA region
    header: SyncHeader = field(default_factory=SyncHeader)  # what the buckets are (runtime/sync_modes.py)


def _split(plan: BucketPlan, region: torch.Tensor) -> list[torch.Tensor]:
    return [region[at: at + spec.buffer_bytes] for at, spec in zip(plan.offsets(), plan.buckets)]


def _map_file(path: str, size: int) -> torch.Tensor:
    return torch.from_file(path, shared=True, size=size, dtype=torch.uint8)


class Sender:
    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.plan: BucketPlan | None = None
        self.region: torch.Tensor | None = None
        self.path = ""
        self._finalizer = None

    def _allocate(self, plan: BucketPlan, device: torch.device) -> None:
        self.close()
        self.plan = plan
        if device.type == "cuda":
            self.region = torch.empty(plan.buffer_bytes, dtype=torch.uint8, device=device)
            return
        self.path = os.path.join(SHM_DIR, f"rlxf-weights-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        with open(self.path, "wb") as f:
            f.truncate(plan.buffer_bytes)
        self._finalizer = weakref.finalize(self, _unlink, self.path)  # also at interpreter exit
        self.region = _map_file(self.path, plan.buffer_bytes)

    def send(self, engine, version: int, request: SyncRequest | None = None) -> SharedRegion | None:
        selection = select_weights(trainer_tensors(engine), engine.model, version, request, self.channel.checksum)
        tensors = selection.tensors
        plan = plan_buckets(tensors, self.channel.bucket_bytes)
        sending = is_sending_rank()
        if sending and (plan != self.plan or (self.path and not os.path.exists(self.path))):
            self._allocate(plan, _device_of(tensors))
        buffers = _split(plan, self.region) if sending else []
        digests = []
        for index, spec in enumerate(plan.buckets):
            bucket = whole_bucket(tensors, spec.names)  # every trainer rank takes part in a sharded gather
            if sending:
                fill_bucket(plan, index, bucket, buffers[index], version)
                if self.channel.checksum:
                    digests.append(bucket_digest(plan, index, buffers[index]))
        if not sending:
            return None
        cuda_handle = None
        if self.region.is_cuda:
            torch.cuda.current_stream().synchronize()
            from torch.multiprocessing.reductions import reduce_tensor

            cuda_handle = reduce_tensor(self.region)
        return SharedRegion(self.path, socket.gethostname(), plan, version, digests if self.channel.checksum else None,
                            cuda_handle, selection.header)

    def close(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None
        self.plan, self.region, self.path = None, None, ""  # the mapping goes with the last reference


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _device_of(tensors: dict[str, torch.Tensor]) -> torch.device:
    first = next(iter(tensors.values()))
    return getattr(first, "to_local", lambda: first)().device


class Receiver:
    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self._mapped: tuple[str, BucketPlan, list[torch.Tensor]] | None = None

    def _buffers(self, region: SharedRegion) -> list[torch.Tensor]:
        key = region.path or repr(region.cuda_handle[1])  # the IPC handle itself: a new region, a new mapping
        if self._mapped is None or self._mapped[:2] != (key, region.plan):
            if region.cuda_handle is not None:
                rebuild, args = region.cuda_handle
                whole = rebuild(*args)
            elif not os.path.exists(region.path):
                raise FileNotFoundError(
                    f"weight_sync.transport=shared_memory: the trainer's region {region.path} (on host "
                    f"{region.host}) is not on this machine ({socket.gethostname()}); the shared_memory transport "
                    f"needs the trainer and the rollout engine on one machine (use collective or object_store)"
                )
            else:
                whole = _map_file(region.path, region.plan.buffer_bytes)
            self._mapped = (key, region.plan, _split(region.plan, whole))
        return self._mapped[2]

    def receive(self, engine, region: SharedRegion | None, checksum: bool) -> dict:
        if region is None:
            raise ValueError("weight_sync.transport=shared_memory: the trainer sent no region handle")
        buffers = self._buffers(region)
        check_stamps(region.plan, buffers, region.version, region.digests, "shared_memory")
        return load_and_verify(engine, as_weight_buckets(region.plan, buffers, region.version, region.header), checksum)


@WEIGHT_TRANSPORTS.register("shared_memory")
class SharedMemoryTransport:
    Sender = Sender
    Receiver = Receiver

    def __init__(self, cfg) -> None:
        self.cfg = cfg
        self.channel = Channel("shared_memory", int(cfg.bucket_mb * 2**20), cfg.checksum, key=uuid.uuid4().hex)
        self._regions: dict[str, weakref.finalize] = {}

    def sync(self, actor, rollout, version: int, request: SyncRequest | None = None) -> dict:
        region = actor.send_weights(version, self.channel, request)
        if region is not None and region.path and region.path not in self._regions:
            # The driver removes the file too: a trainer actor that is killed never runs its own clean-up.
            self._regions[region.path] = weakref.finalize(self, _unlink, region.path)
        return rollout.receive_weights(self.channel, region, self.cfg.checksum)
