"""Weight-sync transports: how the trainer's buckets reach the rollout engines (``runtime.weight_sync.transport``).

Every transport moves the same thing, a ``BucketPlan``'s buckets stamped with the policy version
(``transports/plan.py``), and ends in the same check on the engine's side (``weight_sync.load_and_verify``:
version, and with ``checksum`` the engine's own weights against what arrived). They differ in the path:

* ``object_store`` (the default): the trainer packs, the engine fetches the packed buckets through Ray's
  object store (or, in one process, takes them by reference). Works across machines and with restarts.
* ``shared_memory``: trainer and engine on one machine; the trainer writes each bucket straight into a
  shared region (``/dev/shm``; CUDA IPC handles when the weights are on a GPU) and the engine loads from
  views into it: one copy on each side, nothing serialised.
* ``collective``: a ``torch.distributed`` group of the trainer's sending rank and every engine (gloo on
  CPU, NCCL on GPU), rendezvous at a store the driver owns; bucket i is broadcast while bucket i+1 is
  gathered. Works across machines.

A transport class has a driver side, ``Transport(cfg).sync(actor, rollout, version) -> report``, and a
process side, ``Transport.Sender(channel)`` / ``Transport.Receiver(channel)``, built on first use in the
trainer's and the engine's processes (``endpoint``) and reused for every sync of the run.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlxf.registry import Registry

WEIGHT_TRANSPORT_MODULES = {
    "object_store": "rlxf.runtime.transports.object_store",
    "shared_memory": "rlxf.runtime.transports.shared_memory",
    "collective": "rlxf.runtime.transports.collective",
}
WEIGHT_TRANSPORTS: Registry = Registry("weight_sync transport", modules=WEIGHT_TRANSPORT_MODULES)


@dataclass(frozen=True)
class Channel:
    """What both ends of a transport need to find each other; small, picklable, hashable."""

    transport: str
    bucket_bytes: int
    checksum: bool = False
    host: str = ""  # collective: the driver's rendezvous store
    port: int = 0
    rank: int = 0  # collective: 0 sends, 1.. receive
    world_size: int = 2
    timeout_s: float = 600.0
    key: str = ""  # the driver-side transport's id: a new run (or trainer) gets new endpoints


_ENDPOINTS: dict[tuple[Channel, str], object] = {}


def endpoint(channel: Channel, side: str):
    """This process's ``Sender`` or ``Receiver`` for ``channel``, built once: groups, buffers and mappings
    persist between syncs. One channel per transport and side lives in a process: a new one (the next
    run in this process) releases the previous one's regions and buffers."""
    key = (channel, side)
    if key not in _ENDPOINTS:
        for old in [k for k in _ENDPOINTS if k[1] == side and k[0].transport == channel.transport]:
            _close(_ENDPOINTS.pop(old))
        _ENDPOINTS[key] = getattr(WEIGHT_TRANSPORTS.get(channel.transport), side)(channel)
    return _ENDPOINTS[key]


def _close(ep) -> None:
    close = getattr(ep, "close", None)
    if close is not None:
        close()
