"""The ``collective`` transport: a broadcast over a ``torch.distributed`` group of the trainer's sending rank
(rank 0) and every rollout engine (ranks 1..n); gloo on CPU, NCCL on GPU.

The group is not the trainer's data-parallel group (a process has one default group, and the engines
are not in it): each member builds its own ``ProcessGroupGloo`` / ``ProcessGroupNCCL`` on a TCP store
that the driver owns (``CollectiveTransport``: the runtime's rendezvous), on their first sync. A sync is

    manifest (version, plan)  ->  bucket 0 .. bucket n-1 (each stamped)  ->  trailer (digests or none)

The sender double-buffers: bucket i's broadcast runs (``async_op``) while bucket i+1 is gathered (a
sharded trainer's all-gather) and copied into the other staging buffer, so at most two buckets are in
flight and the model is never materialised on one rank. The engine receives into buffers allocated once
per plan, checks stamps and digests, and loads from views into them.
"""

from __future__ import annotations

import datetime
import pickle
import threading
import uuid
from dataclasses import dataclass, replace

import torch
import torch.distributed as dist

from rlxf.runtime.sync_modes import SyncRequest, select_weights
from rlxf.runtime.transports import WEIGHT_TRANSPORTS, Channel
from rlxf.runtime.transports.plan import (
    BucketPlan,
    StaleWeightsError,
    bucket_digest,
    check_stamps,
    fill_bucket,
    plan_buckets,
)
from rlxf.runtime.transports.source import is_sending_rank, trainer_tensors, whole_bucket
from rlxf.runtime.weight_sync import as_weight_buckets, load_and_verify


class WeightGroup:
    """One member of the weight-broadcast group (rank 0 sends)."""

    def __init__(self, channel: Channel, device: torch.device) -> None:
        self.device = device
        timeout = datetime.timedelta(seconds=channel.timeout_s)
        store = dist.PrefixStore("rlxf-weights/", dist.TCPStore(channel.host, channel.port, is_master=False,
                                                                 timeout=timeout))
        if device.type == "cuda":
            self.group = dist.ProcessGroupNCCL(store, channel.rank, channel.world_size)
        else:
            self.group = dist.ProcessGroupGloo(store, channel.rank, channel.world_size, timeout)

    def broadcast(self, tensor: torch.Tensor):
        """Start broadcasting ``tensor`` from rank 0; returns the work to ``wait()`` on."""
        options = dist.BroadcastOptions()
        options.rootRank = 0
        return self.group.broadcast([tensor], options)

    def broadcast_object(self, value=None):
        """Rank 0's ``value`` on every member (pickled: for the small manifest and trailer)."""
        data = pickle.dumps(value) if value is not None else b""
        size = torch.tensor([len(data)], dtype=torch.int64, device=self.device)
        self.broadcast(size).wait()
        payload = torch.empty(int(size.item()), dtype=torch.uint8, device=self.device)
        if value is not None:
            payload.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
        self.broadcast(payload).wait()
        return pickle.loads(payload.cpu().numpy().tobytes())


def _device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")


class Sender:
    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.group: WeightGroup | None = None
        self.staging: list[torch.Tensor] = []

    def send(self, engine, version: int, request: SyncRequest | None = None) -> None:
        selection = select_weights(trainer_tensors(engine), engine.model, version, request, self.channel.checksum)
        tensors = selection.tensors
        plan = plan_buckets(tensors, self.channel.bucket_bytes)
        if not is_sending_rank():  # the other trainer ranks only take part in the gathers
            for spec in plan.buckets:
                whole_bucket(tensors, spec.names)
            return None
        if self.group is None:
            self.group = WeightGroup(self.channel, _device())
        self.group.broadcast_object((version, plan, selection.header))
        largest = max((spec.buffer_bytes for spec in plan.buckets), default=0)
        if not self.staging or self.staging[0].numel() < largest:
            self.staging = [torch.empty(largest, dtype=torch.uint8, device=self.group.device) for _ in range(2)]
        in_flight: list = [None, None]
        digests = []
        for index, spec in enumerate(plan.buckets):
            bucket = whole_bucket(tensors, spec.names)  # overlaps the previous bucket's broadcast
            slot = index % 2
            if in_flight[slot] is not None:
                in_flight[slot].wait()  # this staging buffer's last broadcast is done: reuse it
            buffer = self.staging[slot][: spec.buffer_bytes]
            fill_bucket(plan, index, bucket, buffer, version)
            if self.channel.checksum:
                digests.append(bucket_digest(plan, index, buffer))
            in_flight[slot] = self.group.broadcast(buffer)
        for work in in_flight:
            if work is not None:
                work.wait()
        self.group.broadcast_object(("trailer", digests if self.channel.checksum else None))
        return None


@dataclass
class SyncTicket:
    """The engine's argument for one sync. The driver marks it delivered once the sync is done, and a
    runtime that replays the call into a restarted engine sends the marked ticket: the engine then
    refuses (nobody is broadcasting) instead of waiting ``timeout_s`` for a trainer that is not sending."""

    sync: int
    delivered: bool = False


class Receiver:
    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.group: WeightGroup | None = None
        self.plan: BucketPlan | None = None
        self.buffers: list[torch.Tensor] = []

    def receive(self, engine, sent: SyncTicket, checksum: bool) -> dict:
        if sent.delivered:
            raise StaleWeightsError(
                f"weight_sync.transport=collective: sync {sent.sync} is being replayed into a restarted rollout "
                f"engine, but the collective transport cannot send those weights again (the trainer is not "
                f"sending); use transport object_store or shared_memory where engines restart"
            )
        if self.group is None:
            self.group = WeightGroup(self.channel, _device())
        version, plan, header = self.group.broadcast_object()
        if plan != self.plan:
            self.plan = plan
            self.buffers = [torch.empty(s.buffer_bytes, dtype=torch.uint8, device=self.group.device) for s in plan.buckets]
        for work in [self.group.broadcast(buffer) for buffer in self.buffers]:
            work.wait()
        _, digests = self.group.broadcast_object()
        check_stamps(plan, self.buffers, version, digests, "collective")
        return load_and_verify(engine, as_weight_buckets(plan, self.buffers, version, header), checksum)


def driver_host() -> str:
    """Where the members reach the driver's store: its Ray node address, or loopback without Ray."""
    try:
        import ray

        if ray.is_initialized():
            return ray.util.get_node_ip_address()
    except ImportError:
        pass
    return "127.0.0.1"


@WEIGHT_TRANSPORTS.register("collective")
class CollectiveTransport:
    Sender = Sender
    Receiver = Receiver

    def __init__(self, cfg) -> None:
        self.cfg = cfg
        host = driver_host()
        # The rendezvous the runtime owns: members connect to it on their first sync; it lives with this object.
        self.store = dist.TCPStore(host, 0, is_master=True, wait_for_workers=False,
                                   timeout=datetime.timedelta(seconds=cfg.timeout_s))
        self.sender = Channel("collective", int(cfg.bucket_mb * 2**20), cfg.checksum, host, self.store.port, 0, 2,
                              cfg.timeout_s, key=uuid.uuid4().hex)
        self.receiver = replace(self.sender, rank=1)
        self.syncs = 0

    def sync(self, actor, rollout, version: int, request: SyncRequest | None = None) -> dict:
        """The engine's receive runs in a thread of the driver while the trainer sends (both block)."""
        outcome: dict = {}
        ticket = SyncTicket(self.syncs + 1)

        def receive() -> None:
            try:
                outcome["report"] = rollout.receive_weights(self.receiver, ticket, self.cfg.checksum)
            except BaseException as err:  # re-raised below, in the driver's thread
                outcome["error"] = err

        thread = threading.Thread(target=receive, name="rlxf-weight-receive", daemon=True)
        thread.start()
        actor.send_weights(version, self.sender, request)
        thread.join()
        if "error" in outcome:
            raise outcome["error"]
        self.syncs += 1
        ticket.delivered = True  # the object a replay log keeps: a replay now says what it is
        return outcome["report"]
