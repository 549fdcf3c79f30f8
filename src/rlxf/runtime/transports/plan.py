"""Where every tensor of a weight sync lives: buckets of raw bytes, each stamped with its version.

A ``BucketPlan`` is computed from names, shapes and dtypes alone (so a sharded trainer plans without
gathering anything, and the receiver allocates once per plan). Each bucket holds tensors of one dtype,
at most ``bucket_bytes`` unless one tensor is larger, in a ``uint8`` buffer laid out as

    [ the tensors' bytes, back to back | padding to 8 bytes | stamp: int64 version, int64 bucket index ]

The sender writes the stamp after the data, so a receiver that finds a bucket stamped with another
version or index holds a stale, dropped or reordered bucket, whatever carried it (``check_stamps``);
with checksums on, a digest per bucket (``bucket_digest``) also catches a torn one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from rlxf.errors import RlxfError

STAMP_BYTES = 16  # int64 version, int64 bucket index


class StaleWeightsError(RlxfError, RuntimeError):
    """A rollout engine does not hold the version / the exact weights the trainer sent."""


@dataclass(frozen=True)
class BucketSpec:
    dtype: torch.dtype
    numel: int
    names: tuple[str, ...]

    @property
    def data_bytes(self) -> int:
        return self.numel * self.dtype.itemsize

    @property
    def stamp_offset(self) -> int:
        return -(-self.data_bytes // 8) * 8

    @property
    def buffer_bytes(self) -> int:
        return self.stamp_offset + STAMP_BYTES


@dataclass(frozen=True)
class BucketPlan:
    buckets: tuple[BucketSpec, ...]
    # name -> (bucket index, offset in elements, shape), as ``WeightBuckets.layout``
    layout: dict[str, tuple[int, int, tuple[int, ...]]]

    @property
    def data_bytes(self) -> int:
        return sum(b.data_bytes for b in self.buckets)

    @property
    def buffer_bytes(self) -> int:
        return sum(b.buffer_bytes for b in self.buckets)

    def offsets(self) -> list[int]:
        """Byte offset of each bucket's buffer when all of them share one region (shared memory)."""
        out, at = [], 0
        for bucket in self.buckets:
            out.append(at)
            at += bucket.buffer_bytes
        return out


def plan_buckets(tensors: Mapping[str, torch.Tensor], bucket_bytes: int) -> BucketPlan:
    """Group by dtype (first-seen order), then fill buckets in order up to ``bucket_bytes``. Reads only
    ``shape`` and ``dtype``: a DTensor shard plans as its whole tensor, and a mapping that computes its
    tensors when read (LoRA's merged weights) plans from its ``templates`` (same names, shapes, dtypes)."""
    by_dtype: dict[torch.dtype, list[tuple[str, tuple[int, ...]]]] = {}
    for name, tensor in getattr(tensors, "templates", tensors).items():
        by_dtype.setdefault(tensor.dtype, []).append((name, tuple(tensor.shape)))
    buckets: list[BucketSpec] = []
    layout: dict[str, tuple[int, int, tuple[int, ...]]] = {}
    for dtype, items in by_dtype.items():
        names: list[str] = []
        numel = 0
        for name, shape in items:
            size = _numel(shape)
            if names and (numel + size) * dtype.itemsize > bucket_bytes:
                buckets.append(BucketSpec(dtype, numel, tuple(names)))
                names, numel = [], 0
            layout[name] = (len(buckets), numel, shape)
            names.append(name)
            numel += size
        if names:
            buckets.append(BucketSpec(dtype, numel, tuple(names)))
    return BucketPlan(tuple(buckets), layout)


def _numel(shape: tuple[int, ...]) -> int:
    numel = 1
    for dim in shape:
        numel *= dim
    return numel


def typed_view(plan: BucketPlan, index: int, buffer: torch.Tensor) -> torch.Tensor:
    """The bucket's data as its dtype (a view into ``buffer``, no copy)."""
    spec = plan.buckets[index]
    return buffer[: spec.data_bytes].view(spec.dtype)


def fill_bucket(plan: BucketPlan, index: int, tensors: dict[str, torch.Tensor], buffer: torch.Tensor,
                version: int) -> None:
    """Copy the bucket's tensors into ``buffer`` (a ``uint8`` buffer of ``buffer_bytes``), then stamp it."""
    stamp(plan, index, buffer, -1)  # a write cut short leaves the bucket marked as no version
    data = typed_view(plan, index, buffer)
    for name in plan.buckets[index].names:
        _, offset, shape = plan.layout[name]
        tensor = tensors[name]
        data[offset: offset + tensor.numel()].view(shape).copy_(tensor.detach())
    stamp(plan, index, buffer, version)


def stamp(plan: BucketPlan, index: int, buffer: torch.Tensor, version: int) -> None:
    at = plan.buckets[index].stamp_offset
    buffer[at: at + STAMP_BYTES].view(torch.int64).copy_(torch.tensor([version, index], dtype=torch.int64))


def read_stamp(plan: BucketPlan, index: int, buffer: torch.Tensor) -> tuple[int, int]:
    at = plan.buckets[index].stamp_offset
    version, bucket = buffer[at: at + STAMP_BYTES].view(torch.int64).tolist()
    return version, bucket


def tensor_digest(tensor: torch.Tensor, dtype: torch.dtype | None = None) -> str:
    """A short hash of the tensor's exact bytes (after casting to ``dtype``, the holder's dtype)."""
    t = tensor.detach().to(dtype or tensor.dtype).contiguous().reshape(-1).cpu()
    return hashlib.blake2b(t.view(torch.uint8).numpy(), digest_size=8).hexdigest()  # hashed in place, no bytes copy


def bucket_digest(plan: BucketPlan, index: int, buffer: torch.Tensor) -> str:
    data = buffer[: plan.buckets[index].data_bytes]
    return hashlib.blake2b(data.cpu().numpy().tobytes(), digest_size=8).hexdigest()


def check_stamps(plan: BucketPlan, buffers: list[torch.Tensor], version: int, digests: list[str] | None,
                 how: str) -> None:
    """Every bucket stamped ``(version, its index)`` and, with ``digests``, holding the sender's bytes."""
    if len(buffers) != len(plan.buckets):
        raise StaleWeightsError(f"{how}: {len(buffers)} of {len(plan.buckets)} buckets arrived at version {version}")
    for index, buffer in enumerate(buffers):
        got = read_stamp(plan, index, buffer)
        if got != (version, index):
            raise StaleWeightsError(
                f"{how}: bucket {index} of {len(plan.buckets)} is stamped (version {got[0]}, bucket {got[1]}), "
                f"expected (version {version}, bucket {index}): a stale, dropped or reordered bucket"
            )
        if digests is not None and bucket_digest(plan, index, buffer) != digests[index]:
            raise StaleWeightsError(
                f"{how}: bucket {index} of {len(plan.buckets)} at version {version} differs from the bytes sent "
                f"(a partial or corrupted transfer)"
            )
