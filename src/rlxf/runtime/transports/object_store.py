"""The ``object_store`` transport (the default): the trainer packs its weights into buckets, the engine
loads them. On Ray the packed buckets stay in the trainer actor's object store and the engine's actor
fetches them directly (``exported_weights``); in one process they are handed over by reference; with
``runtime.kind: process`` they travel through torch's shared-memory pickling."""

from __future__ import annotations

from rlxf.runtime.transports import WEIGHT_TRANSPORTS
from rlxf.runtime.weight_sync import exported_weights


@WEIGHT_TRANSPORTS.register("object_store")
class ObjectStoreTransport:
    def __init__(self, cfg) -> None:
        self.cfg = cfg

    def sync(self, actor, rollout, version: int, request=None) -> dict:
        packed = exported_weights(actor, version, int(self.cfg.bucket_mb * 2**20), request, self.cfg.checksum)
        return rollout.load_weights(packed, self.cfg.checksum)
