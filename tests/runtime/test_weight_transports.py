"""Weight-sync transports (runtime/transports/): every transport delivers the trainer's exact weights with
the right version; stale, dropped and torn buckets and a stale engine are caught, whatever carried them."""

from __future__ import annotations

import copy
import uuid

import pytest
import torch

from rlxf.algos import AlgorithmConfig
from rlxf.config import OptimConfig
from rlxf.roles.actor import ActorRole
from rlxf.roles.rollout import RolloutRole
from rlxf.rollout.engine import build_engine
from rlxf.runtime.config import WeightSyncConfig
from rlxf.runtime.transports import Channel, endpoint
from rlxf.runtime.transports import collective as collective_module
from rlxf.runtime.transports.plan import StaleWeightsError, plan_buckets, read_stamp, stamp
from rlxf.runtime.weight_sync import held_weights, sync_weights
from tests.runtime.conftest import COMPARED, assert_same_run, crash_rollout_in_step_2, run_recipe

PROCESS = ("runtime.kind=process", "runtime.process_roles=[rollout]")

TRANSPORTS = ["object_store", "shared_memory", "collective"]


def _roles(tiny_model, tokenizer):
    engine = build_engine("torch", copy.deepcopy(tiny_model), tokenizer.eos_token_id, tokenizer.pad_token_id, {})
    rollout = RolloutRole(engine, tokenizer, chat_template=False, max_prompt_tokens=64)
    actor = ActorRole(copy.deepcopy(tiny_model).requires_grad_(True), OptimConfig(), AlgorithmConfig(), 8, 8, 1.0)
    return actor, rollout


def _nudge(actor: ActorRole, by: float) -> None:
    with torch.no_grad():
        for p in actor.model.parameters():
            p.add_(by)


def _assert_engine_holds(rollout: RolloutRole, actor: ActorRole) -> None:
    sent = actor.model.state_dict()
    held = held_weights(rollout.engine)
    assert set(held) <= set(sent) and len(held) > 0
    for name, tensor in held.items():
        assert torch.equal(tensor, sent[name]), name  # bit for bit


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_every_transport_delivers_the_exact_weights_and_version(tiny_model, tokenizer, transport):
    actor, rollout = _roles(tiny_model, tokenizer)
    cfg = WeightSyncConfig(transport=transport, bucket_mb=0.05, checksum=True)
    for version, nudge in ((1, 0.01), (2, -0.003)):  # the second sync reuses groups, regions, buffers
        _nudge(actor, nudge)
        metrics = sync_weights(actor, rollout, version, cfg)
        assert rollout.version == version and metrics["weight_sync/version"] == version
        assert metrics["weight_sync/checksum_ok"] == 1.0
        _assert_engine_holds(rollout, actor)
    numel = sum(t.numel() for t in actor.model.state_dict().values())
    # tiny model: fp32 tensors in 0.05 MiB buckets; the metric counts the weights' bytes (not the stamps)
    assert metrics["weight_sync/megabytes"] == pytest.approx(numel * 4 / 2**20)
    assert metrics["weight_sync/buckets"] == len(plan_buckets(actor.model.state_dict(), int(0.05 * 2**20)).buckets)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_every_transport_catches_an_engine_that_kept_its_old_weights(tiny_model, tokenizer, transport):
    actor, rollout = _roles(tiny_model, tokenizer)
    cfg = WeightSyncConfig(transport=transport, checksum=True)
    sync_weights(actor, rollout, 1, cfg)
    _nudge(actor, 0.01)
    rollout.engine.update_weights = lambda state_dict, version: setattr(rollout.engine, "version", version)
    with pytest.raises(StaleWeightsError, match="differ from the trainer"):
        sync_weights(actor, rollout, 2, cfg)


def test_the_unknown_transport_is_named():
    with pytest.raises(ValueError, match="unknown weight_sync transport 'nccl'; known: collective, object_store"):
        WeightSyncConfig(transport="nccl")


# -- shared memory: a region read after another version overwrote it, a bucket not rewritten, a torn one ----

def _shared_pair(actor, bucket_bytes=2048, checksum=True):
    channel = Channel("shared_memory", bucket_bytes, checksum, key=uuid.uuid4().hex)
    return endpoint(channel, "Sender"), endpoint(channel, "Receiver")


def test_shared_memory_catches_a_region_overwritten_by_a_later_version(tiny_model, tokenizer):
    actor, rollout = _roles(tiny_model, tokenizer)
    sender, receiver = _shared_pair(actor)
    first = sender.send(actor.engine, 1)
    sender.send(actor.engine, 2)  # the engine reads version 1's handle after version 2 was written
    with pytest.raises(StaleWeightsError, match=r"bucket 0 of \d+ is stamped \(version 2, bucket 0\), expected "
                                                r"\(version 1, bucket 0\)"):
        receiver.receive(rollout.engine, first, checksum=True)
    assert rollout.version == 0  # nothing was loaded


def test_shared_memory_catches_a_dropped_and_a_torn_bucket(tiny_model, tokenizer):
    actor, rollout = _roles(tiny_model, tokenizer)
    sender, receiver = _shared_pair(actor)
    sender.send(actor.engine, 1)
    buffers = receiver._buffers(sender.send(actor.engine, 1))
    old_bucket_2 = buffers[2].clone()
    region = sender.send(actor.engine, 2)
    buffers[2].copy_(old_bucket_2)  # bucket 2 was never rewritten for version 2 (dropped)
    with pytest.raises(StaleWeightsError, match=r"bucket 2 of \d+ is stamped \(version 1, bucket 2\)"):
        receiver.receive(rollout.engine, region, checksum=True)
    region = sender.send(actor.engine, 3)
    assert read_stamp(region.plan, 1, buffers[1]) == (3, 1)
    buffers[1][:8] += 1  # torn: part of bucket 1's bytes are not the ones sent, its stamp is
    with pytest.raises(StaleWeightsError, match=r"bucket 1 of \d+ at version 3 differs from the bytes sent"):
        receiver.receive(rollout.engine, region, checksum=True)
    region = sender.send(actor.engine, 4)
    stamp(region.plan, 0, buffers[0], -1)  # a write cut short: bucket 0 still carries fill_bucket's "no version"
    with pytest.raises(StaleWeightsError, match=r"bucket 0 of \d+ is stamped \(version -1, bucket 0\)"):
        receiver.receive(rollout.engine, region, checksum=True)
    receiver.receive(rollout.engine, sender.send(actor.engine, 5), checksum=True)  # a clean sync still works
    assert rollout.version == 5


def test_a_removed_region_is_made_again_and_a_new_channel_releases_the_old_one(tiny_model, tokenizer):
    import os

    actor, rollout = _roles(tiny_model, tokenizer)
    sender, receiver = _shared_pair(actor)
    first = sender.send(actor.engine, 1)
    os.unlink(first.path)  # what the driver's clean-up does when its run ends; this process lives on
    second = sender.send(actor.engine, 2)
    assert second.path != first.path and os.path.exists(second.path)
    receiver.receive(rollout.engine, second, checksum=True)
    assert rollout.version == 2
    _shared_pair(actor)  # the next run's channel in this process: the previous region goes
    assert not os.path.exists(second.path) and sender.region is None


# -- collective: the sender drops a bucket's new bytes, or tears one after hashing it --------------------------

def test_collective_catches_a_dropped_bucket(tiny_model, tokenizer, monkeypatch):
    actor, rollout = _roles(tiny_model, tokenizer)
    cfg = WeightSyncConfig(transport="collective", bucket_mb=2048 / 2**20, checksum=True)
    real_fill = collective_module.fill_bucket

    def drop_bucket_1(plan, index, bucket, buffer, version):
        real_fill(plan, index, bucket, buffer, version - 1 if index == 1 else version)  # old bucket 1 resent

    monkeypatch.setattr(collective_module, "fill_bucket", drop_bucket_1)
    with pytest.raises(StaleWeightsError, match=r"collective: bucket 1 of \d+ is stamped \(version 6, bucket 1\)"):
        sync_weights(actor, rollout, 7, cfg)
    monkeypatch.setattr(collective_module, "fill_bucket", real_fill)
    sync_weights(actor, rollout, 8, cfg)  # the group survives a failed sync
    assert rollout.version == 8
    _assert_engine_holds(rollout, actor)


def test_collective_catches_a_torn_bucket(tiny_model, tokenizer, monkeypatch):
    actor, rollout = _roles(tiny_model, tokenizer)
    cfg = WeightSyncConfig(transport="collective", bucket_mb=2048 / 2**20, checksum=True)
    real_digest = collective_module.bucket_digest

    def tear_bucket_3(plan, index, buffer):
        digest = real_digest(plan, index, buffer)
        if index == 3:
            buffer[:16] = 0  # bytes changed after the sender hashed them: what arrives is not what was sent
        return digest

    monkeypatch.setattr(collective_module, "bucket_digest", tear_bucket_3)
    with pytest.raises(StaleWeightsError, match=r"collective: bucket 3 of \d+ at version 1 differs from the bytes"):
        sync_weights(actor, rollout, 1, cfg)


@pytest.mark.parametrize("transport", ["shared_memory", "collective"])
def test_a_rollout_in_a_child_process_syncs_over_the_transport(tmp_path, sft_model_dir, embedded_rows, transport):
    """runtime.kind=process: the trainer in this process, the engine in a child; the embedded run's numbers."""
    rows = run_recipe(tmp_path, sft_model_dir, transport, *PROCESS, f"runtime.weight_sync.transport={transport}",
                      *COMPARED)
    assert_same_run(rows, embedded_rows)


def test_the_object_store_path_catches_a_dropped_and_a_partial_bucket():
    from rlxf.runtime.weight_sync import WeightBuckets, pack_weights, unpack_weights

    packed = pack_weights({"a": torch.ones(4), "b": torch.ones(6), "c": torch.ones(8)}, version=3, bucket_bytes=40)
    assert [b.numel() for b in packed.buckets] == [10, 8]  # a + b (40 bytes), then c
    dropped = WeightBuckets(3, packed.buckets[:1], packed.layout)
    with pytest.raises(StaleWeightsError, match=r"bucket 1 of the version 3 weights holds no elements, c needs 8 "
                                                r"\(1 buckets arrived\)"):
        unpack_weights(dropped)
    partial = WeightBuckets(3, [packed.buckets[0][:7], packed.buckets[1]], packed.layout)
    with pytest.raises(StaleWeightsError, match="bucket 0 of the version 3 weights holds 7 elements, b needs 10"):
        unpack_weights(partial)


def test_a_restarted_rollout_process_gets_the_last_region_again(tmp_path, sft_model_dir, embedded_rows, crash_marker,
                                                                monkeypatch):
    """The replayed receive re-reads the region, which still holds step 1's weights (stamps checked)."""
    crash_rollout_in_step_2(crash_marker, monkeypatch)  # SIGKILL inside step 2's generate
    rows = run_recipe(tmp_path, sft_model_dir, "shm_restart", *PROCESS, "runtime.weight_sync.transport=shared_memory",
                      *COMPARED)
    assert not crash_marker.exists()  # the child did die
    assert_same_run(rows, embedded_rows)


def test_a_restarted_rollout_process_cannot_be_resent_weights_over_the_collective(tmp_path, sft_model_dir,
                                                                                  crash_marker, monkeypatch):
    crash_rollout_in_step_2(crash_marker, monkeypatch)
    # raised in the rollout's process, it arrives here as itself
    with pytest.raises(StaleWeightsError, match="sync 1 is being replayed into a restarted rollout engine, but the "
                                               "collective transport cannot send those weights again"):
        run_recipe(tmp_path, sft_model_dir, "collective_restart", *PROCESS,
                   "runtime.weight_sync.transport=collective")
