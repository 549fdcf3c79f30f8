"""What a weight sync sends (``runtime.weight_sync.mode``): every weight, what changed, or a LoRA adapter.

* ``full`` (the default): every weight, every sync (with LoRA: merged, under the base model's names).
* ``delta``: only the tensors whose bytes changed since the version the engine holds (a per-tensor
  digest of every weight, kept by the trainer for its last few sent versions). The payload names its
  base version and the engine refuses it unless it holds exactly that version. With Adam every element
  of a trained tensor moves every step, so a delta of full fine-tuning skips only the frozen tensors
  (docs/distributed.md has the measurement). Under LoRA ``delta`` means ``adapter``.
* ``adapter`` (LoRA only): the adapter's A and B of every adapted layer, plus any other trainable
  tensor. The engine keeps a copy of the base weights of the adapted layers, received once (the first
  sync after the engine is known to hold nothing of ours, with the unmerged base), and merges each
  sync from that copy (``W = W_base + scale * B @ A``, models/lora.py's ``lora_delta``, the function
  the trainer's merged weights use), never onto weights it merged before.

The driver asks (``SyncRequest``: the mode and the version it knows the engine holds, None after any
failed sync or at start); the trainer answers with a ``Selection`` (the tensors to put in buckets and a
``SyncHeader`` that travels with them, on every transport); the engine applies it by its ``kind``
(``PAYLOAD_KINDS``) and returns what it should now hold for the names it touched, which
``weight_sync.check_report`` compares with what it holds (and with the trainer's digests in the header).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import torch

from rlxf.config_error import ConfigError
from rlxf.models.lora import MergedWeights, adapter_parts, is_lora, lora_delta, trainable_base_tensors
from rlxf.registry import Registry
from rlxf.runtime.transports.plan import StaleWeightsError, tensor_digest
from rlxf.runtime.transports.source import whole_tensor

WEIGHT_SYNC_MODES: Registry = Registry("weight_sync mode")  # trainer side: mode -> selector
PAYLOAD_KINDS: Registry = Registry("weight_sync payload kind")  # engine side: header kind -> applier
KEPT_VERSIONS = 4  # the trainer remembers the digests of this many sent versions (an engine a few behind)
LORA_A, LORA_B = ":lora_A", ":lora_B"  # suffixes of the adapter tensors' names in the buckets


@dataclass(frozen=True)
class SyncRequest:
    """The driver's ask: the mode, and the version the engine is known to hold (None: nothing known)."""

    mode: str = "full"
    base_version: int | None = None


@dataclass(frozen=True)
class SyncHeader:
    """How the engine applies the buckets; small and picklable, it travels with them."""

    kind: str = "full"  # full | delta | adapter
    # delta: the engine version it applies to; adapter: the version whose base the engine keeps;
    # None: self-contained (a full load; an adapter sync that brings its base)
    base_version: int | None = None
    names: tuple[str, ...] = ()  # every tensor sent: one missing at the engine is a torn update
    adapters: tuple[tuple[str, float], ...] = ()  # (adapted weight's name, scale)
    # name -> (dtype, digest) of the trainer's weights after this sync (delta always, adapter with checksum)
    expected: dict[str, tuple[str, str]] | None = None


@dataclass
class Selection:
    tensors: Mapping[str, torch.Tensor]
    header: SyncHeader = field(default_factory=SyncHeader)


def select_weights(tensors: Mapping[str, torch.Tensor], model: torch.nn.Module, version: int,
                   request: SyncRequest | None, checksum: bool) -> Selection:
    """Trainer side: of ``tensors`` (what a full sync sends), what ``request`` needs sent."""
    request = request or SyncRequest()
    return WEIGHT_SYNC_MODES.get(request.mode)(tensors, model, version, request, checksum)


@WEIGHT_SYNC_MODES.register("full")
def _full(tensors, model, version, request, checksum) -> Selection:
    return Selection(tensors)


# model -> {version: {name: (dtype, digest)}}: the trainer's record of what it sent
_SENT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@WEIGHT_SYNC_MODES.register("delta")
def _delta(tensors, model, version, request, checksum) -> Selection:
    if is_lora(model):
        return _adapter(tensors, model, version, request, checksum)
    # Every trainer rank gathers a sharded tensor (full_tensor) to hash it: the ranks call in one order.
    digests = {name: (_dtype_name(t), tensor_digest(whole_tensor(t))) for name, t in tensors.items()}
    sent = _SENT.setdefault(model, {})
    base = sent.get(request.base_version) if request.base_version is not None else None
    sent[version] = digests
    for old in sorted(sent)[:-KEPT_VERSIONS]:
        del sent[old]
    if base is None:  # the engine holds nothing we recorded: all of it (the next sync is a delta)
        return Selection(tensors, SyncHeader("full", expected=digests))
    changed = tuple(name for name in tensors if base.get(name) != digests[name])
    return Selection(_Subset(tensors, changed), SyncHeader("delta", request.base_version, changed, expected=digests))


@WEIGHT_SYNC_MODES.register("adapter")
def _adapter(tensors, model, version, request, checksum) -> Selection:
    if not is_lora(model):
        raise ConfigError("runtime.weight_sync.mode=adapter needs a LoRA policy (model.lora); use delta or full")
    out: dict[str, torch.Tensor] = {}
    adapters = []
    for name, (weight_a, weight_b, scale) in adapter_parts(model).items():
        out[name + LORA_A], out[name + LORA_B] = weight_a.detach(), weight_b.detach()
        adapters.append((name, scale))
    out.update({name: t.detach() for name, t in trainable_base_tensors(model).items()})
    if request.base_version is None:  # the engine keeps no base of ours: send it, unmerged
        out = {**MergedWeights(model).templates, **out}
    expected = None
    if checksum:
        merged = MergedWeights(model)
        expected = {name: (_dtype_name(t), tensor_digest(merged[name])) for name, t in merged.templates.items()}
    return Selection(out, SyncHeader("adapter", request.base_version, tuple(out), tuple(adapters), expected))


class _Subset(Mapping[str, torch.Tensor]):
    """Some of a mapping's tensors, read through (a lazily merged mapping stays lazy)."""

    def __init__(self, tensors: Mapping[str, torch.Tensor], names: tuple[str, ...]) -> None:
        self._tensors, self._names = tensors, names
        templates = getattr(tensors, "templates", tensors)
        self.templates = {name: templates[name] for name in names}

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self.templates:
            raise KeyError(name)
        return self._tensors[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def _dtype_name(tensor: torch.Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


# -- engine side ------------------------------------------------------------------------------------


@dataclass
class _AdapterBase:
    version: int  # the sync that brought it
    weights: dict[str, torch.Tensor]  # copies of the adapted layers' base weights, as sent


# engine -> the adapter base it keeps
_BASES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def apply_payload(engine, header: SyncHeader, sent: dict[str, torch.Tensor], version: int) -> dict[str, torch.Tensor]:
    """Engine side: load ``sent`` as ``header`` says; returns what the engine should now hold under the
    names it loaded (the reference its digests are checked against)."""
    missing = [name for name in header.names if name not in sent]
    if missing:
        raise StaleWeightsError(
            f"{'an' if header.kind[0] in 'aeiou' else 'a'} {header.kind} weight update to version {version} arrived without {len(missing)} of its "
            f"{len(header.names)} tensors, e.g. {missing[:3]}: a torn update, refused"
        )
    return PAYLOAD_KINDS.get(header.kind)(engine, header, sent, version)


def adapter_base_version(engine) -> int | None:
    """The sync whose base weights the engine merges adapters onto (None: it keeps none)."""
    base = _BASES.get(engine)
    return None if base is None else base.version


@PAYLOAD_KINDS.register("full")
def _load_full(engine, header: SyncHeader, sent: dict[str, torch.Tensor], version: int) -> dict[str, torch.Tensor]:
    _BASES.pop(engine, None)  # its weights are no longer base + adapter
    engine.update_weights(sent, version)
    return sent


@PAYLOAD_KINDS.register("delta")
def _load_delta(engine, header: SyncHeader, sent: dict[str, torch.Tensor], version: int) -> dict[str, torch.Tensor]:
    if engine.version != header.base_version:
        raise StaleWeightsError(
            f"a delta weight update from version {header.base_version} to {version} reached a rollout engine "
            f"at version {engine.version}: refused (its unchanged tensors would be another version's)"
        )
    _BASES.pop(engine, None)
    engine.update_weights(sent, version)
    return sent


@PAYLOAD_KINDS.register("adapter")
def _load_adapter(engine, header: SyncHeader, sent: dict[str, torch.Tensor], version: int) -> dict[str, torch.Tensor]:
    if header.base_version is None:  # the base comes with it: keep a copy (the buffers are reused)
        base = _AdapterBase(version, {name: sent[name].detach().clone() for name, _ in header.adapters})
    else:
        base = _BASES.get(engine)
        if base is None or base.version != header.base_version:
            held = "no base weights" if base is None else f"the base of version {base.version}"
            raise StaleWeightsError(
                f"an adapter weight update to version {version} is for the base of version "
                f"{header.base_version}, the rollout engine keeps {held}: refused"
            )
    merged = {}
    for name, scale in header.adapters:
        weight = base.weights[name]
        merged[name] = weight + lora_delta(sent[name + LORA_A], sent[name + LORA_B], scale).to(weight.dtype)
    loaded = {name: t for name, t in sent.items() if not name.endswith((LORA_A, LORA_B)) and name not in merged}
    loaded.update(merged)
    engine.update_weights(loaded, version)
    _BASES[engine] = base
    return loaded
