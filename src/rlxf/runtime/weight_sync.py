"""Trainer -> rollout engine weight sync: bucketed, versioned, optionally checksummed.

``pack_weights`` flattens a state dict into a few contiguous 1-D buckets (one dtype each, at most
``bucket_bytes`` unless a single tensor is larger), so a sync moves a handful of large tensors instead
of one message per parameter. The engine side unpacks views into the buckets, loads them, and reports
the version it now holds and (optionally) a digest per tensor of the weights it actually holds, which
are compared with the trainer's (``check_report``, on the engine's side of the call, where the sent
buckets are): an engine that silently kept old weights is caught. On Ray the buckets go from the
trainer's actor to the engine's through the object store, not through the driver; other transports
(``runtime.weight_sync.transport``: shared memory, a collective broadcast) are in ``runtime/transports/``
and end in the same ``load_and_verify``. What goes in the buckets (every weight, the tensors changed since
the engine's version, or a LoRA adapter: ``runtime.weight_sync.mode``) is ``runtime/sync_modes.py``'s, told
to the engine by the ``SyncHeader`` that travels with them.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from rlxf.runtime.sync_modes import SyncHeader, SyncRequest, adapter_base_version, apply_payload
from rlxf.runtime.transports import WEIGHT_TRANSPORTS
from rlxf.runtime.transports.plan import (
    BucketPlan,
    StaleWeightsError,
    plan_buckets,
    tensor_digest,
    typed_view,
)


@dataclass
class WeightBuckets:
    version: int
    buckets: list[torch.Tensor]
    # name -> (bucket index, offset in elements, shape)
    layout: dict[str, tuple[int, int, tuple[int, ...]]] = field(default_factory=dict)
    header: SyncHeader = field(default_factory=SyncHeader)

    @property
    def num_bytes(self) -> int:
        return sum(b.numel() * b.element_size() for b in self.buckets)


def pack_weights(state_dict: Mapping[str, torch.Tensor], version: int, bucket_bytes: int,
                 header: SyncHeader | None = None) -> WeightBuckets:
    """Each bucket is allocated once and filled tensor by tensor, so a lazily computed ``state_dict``
    (LoRA's merged weights, planned from its ``templates``) holds one computed tensor at a time."""
    plan = plan_buckets(state_dict, bucket_bytes)
    templates = getattr(state_dict, "templates", state_dict)
    buckets = []
    for spec in plan.buckets:
        bucket = torch.empty(spec.numel, dtype=spec.dtype, device=templates[spec.names[0]].device)
        for name in spec.names:
            _, offset, shape = plan.layout[name]
            bucket[offset: offset + torch.Size(shape).numel()].copy_(state_dict[name].detach().reshape(-1))
        buckets.append(bucket)
    return WeightBuckets(version=version, buckets=buckets, layout=dict(plan.layout), header=header or SyncHeader())


def as_weight_buckets(plan: BucketPlan, buffers: list[torch.Tensor], version: int,
                      header: SyncHeader | None = None) -> WeightBuckets:
    """Received byte buffers (``transports/plan.py``) as ``WeightBuckets`` of views, for ``load_and_verify``."""
    return WeightBuckets(version, [typed_view(plan, i, b) for i, b in enumerate(buffers)], dict(plan.layout),
                         header or SyncHeader())


def unpack_weights(packed: WeightBuckets) -> dict[str, torch.Tensor]:
    """name -> a view into its bucket (no copy); a bucket missing or too short for its tensors (a
    dropped or partial transfer) raises ``StaleWeightsError`` naming it."""
    out = {}
    for name, (index, offset, shape) in packed.layout.items():
        numel = torch.Size(shape).numel()
        if index >= len(packed.buckets) or packed.buckets[index].numel() < offset + numel:
            held = packed.buckets[index].numel() if index < len(packed.buckets) else "no"
            raise StaleWeightsError(
                f"bucket {index} of the version {packed.version} weights holds {held} elements, {name} needs "
                f"{offset + numel} ({len(packed.buckets)} buckets arrived): a dropped or partial transfer"
            )
        out[name] = packed.buckets[index][offset: offset + numel].view(shape)
    return out


def held_weights(engine) -> dict[str, torch.Tensor]:
    """The tensors a rollout engine decodes with, by HF parameter name."""
    if hasattr(engine, "held_weights"):
        return engine.held_weights()
    decoder = getattr(engine, "decoder", None)
    # LlamaDecoder keeps views into its fused layout under the HF names (its load_state_dict targets).
    targets = getattr(decoder, "_targets", None)
    if targets is not None:
        return dict(targets)
    model = getattr(decoder, "model", None) or engine.model
    return model.state_dict()


def engine_report(engine, with_digests: bool) -> dict:
    """What an engine says about itself after a sync: its version, and digests of what it holds."""
    report: dict = {"version": engine.version}
    if with_digests:
        report["digests"] = {
            name: (str(t.dtype).removeprefix("torch."), tensor_digest(t)) for name, t in held_weights(engine).items()
        }
    return report


def check_report(packed: WeightBuckets, report: dict, role: str = "rollout",
                 reference: Mapping[str, torch.Tensor] | None = None) -> None:
    """``reference``: what the engine should hold under the names it loaded (default: what was sent). A
    delta or adapter header brings the trainer's digests of every weight (``expected``): the reference is
    checked against them (a wrong base, a wrong merge, a torn tensor), and a held tensor the update did
    not touch against its expected digest (where the engine holds the trainer's dtype; else it cannot be)."""
    if report["version"] != packed.version:
        raise StaleWeightsError(f"{role} engine holds policy version {report['version']}, trainer sent {packed.version}")
    digests = report.get("digests")
    if digests is None:
        return
    sent = unpack_weights(packed) if reference is None else reference
    expected = packed.header.expected or {}
    stale = [name for name, t in sent.items() if name in expected and tensor_digest(t) != expected[name][1]]
    stale += [
        name for name, (dtype, digest) in digests.items()
        if not _holds(name, dtype, digest, sent, expected)
    ]
    if stale:
        raise StaleWeightsError(
            f"{role} engine weights differ from the trainer's at version {packed.version}: "
            f"{len(stale)} of {len(digests)} tensors, e.g. {stale[:3]}"
        )


def _holds(name: str, dtype: str, digest: str, sent: Mapping[str, torch.Tensor],
           expected: dict[str, tuple[str, str]]) -> bool:
    if name in sent:
        return tensor_digest(sent[name], getattr(torch, dtype)) == digest
    if name in expected:
        return expected[name][0] != dtype or expected[name][1] == digest
    return False


def exported_weights(actor, version: int, bucket_bytes: int, *request_and_checksum):
    """The trainer's packed weights, ready to hand to an engine. A Ray actor's stay in the object
    store (``RoleProxy.defer``), so the engine's actor fetches them straight from the trainer's.
    Optional: the ``SyncRequest`` and the checksum flag (``runtime/sync_modes.py``)."""
    defer = getattr(type(actor), "defer", None)
    if defer is not None:
        return defer(actor, "export_weights", version, bucket_bytes, *request_and_checksum)
    return actor.export_weights(version, bucket_bytes, *request_and_checksum)


def load_and_verify(engine, packed: WeightBuckets, with_digests: bool) -> dict:
    """Engine side of a sync: load (as the header's kind says), then check the engine's own report
    (version, and with ``with_digests`` what it actually holds) against what was sent; returns the
    report + sizes, and what the engine now holds for the next sync's request."""
    reference = apply_payload(engine, packed.header, unpack_weights(packed), packed.version)
    report = engine_report(engine, with_digests)
    check_report(packed, report, reference=reference)
    return {"version": report["version"], "buckets": len(packed.buckets), "num_bytes": packed.num_bytes,
            "checksum_ok": with_digests, "kind": packed.header.kind, "adapter_base": adapter_base_version(engine)}


# trainer handle -> its driver-side transport (a collective's rendezvous store lives as long as the trainer)
_TRANSPORTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# trainer handle -> (the rollout handle, what its engine holds after the last sync that succeeded)
_HELD: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def transport_for(actor, cfg):
    """The driver side of ``cfg.transport`` for this trainer, built on its first sync."""
    transport = _TRANSPORTS.get(actor)
    if transport is None or transport.cfg != cfg:
        transport = _TRANSPORTS[actor] = WEIGHT_TRANSPORTS.get(cfg.transport)(cfg)
    return transport


def sync_request(actor, rollout, mode: str) -> SyncRequest:
    """What to ask the trainer for: ``mode`` against what this engine is known to hold (nothing known after a
    failed sync, for another engine, or at start: a self-contained sync)."""
    held = _HELD.get(actor)
    if mode == "full" or held is None or held[0] is not rollout:
        return SyncRequest(mode)
    report = held[1]
    base = report["adapter_base"] if report.get("kind") == "adapter" else report["version"]
    return SyncRequest(mode, base)


def sync_weights(actor, rollout, version: int, cfg) -> dict[str, float]:
    """Trainer -> engine over ``cfg.transport``; ``cfg`` is a ``WeightSyncConfig``. Returns ``weight_sync/*``
    metrics and ``time/weight_sync_seconds`` (under ``time/``, like every wall-clock metric). An engine that
    shares the trainer's tensors (``rollout.engine_options.share_weights``) holds the step already: only its
    version moves, and nothing is packed or sent."""
    start = time.perf_counter()
    if getattr(rollout, "shares_policy_weights", False) is True:
        rollout.mark_version(version)
        return {"time/weight_sync_seconds": time.perf_counter() - start, "weight_sync/buckets": 0.0,
                "weight_sync/megabytes": 0.0, "weight_sync/version": float(version)}
    request = sync_request(actor, rollout, cfg.mode)
    _HELD.pop(actor, None)  # a sync that fails leaves the engine's state unknown
    report = transport_for(actor, cfg).sync(actor, rollout, version, request)
    _HELD[actor] = (rollout, report)
    metrics = {
        "time/weight_sync_seconds": time.perf_counter() - start,
        "weight_sync/buckets": float(report["buckets"]),
        "weight_sync/megabytes": report["num_bytes"] / 2**20,
        "weight_sync/version": float(report["version"]),
    }
    if cfg.checksum:
        metrics["weight_sync/checksum_ok"] = 1.0
    return metrics
