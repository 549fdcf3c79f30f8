"""Sending less than all the weights (runtime/sync_modes.py): a delta of the changed tensors, a LoRA adapter
alone. After N syncs the engine holds the trainer's (merged) weights bit for bit, on every transport; a
delta for another version, an adapter for another base, a torn or corrupted update are refused."""

from __future__ import annotations

import copy

import pytest
import torch

from rlxf.algos import AlgorithmConfig
from rlxf.checked_config import load_config
from rlxf.config import OptimConfig
from rlxf.config_error import ConfigError
from rlxf.models.lora import apply_lora, merged_state_dict
from rlxf.models.lora_config import LoraConfig
from rlxf.roles.actor import ActorRole
from rlxf.roles.rollout import RolloutRole
from rlxf.rollout.engine import build_engine
from rlxf.runtime.config import WeightSyncConfig
from rlxf.runtime.sync_modes import SyncRequest
from rlxf.runtime.transports.plan import StaleWeightsError
from rlxf.runtime.weight_sync import held_weights, sync_weights

TRANSPORTS = ["object_store", "shared_memory", "collective"]
MB = 2**20


def _rollout(tiny_model, tokenizer) -> RolloutRole:
    engine = build_engine("torch", copy.deepcopy(tiny_model), tokenizer.eos_token_id, tokenizer.pad_token_id, {})
    return RolloutRole(engine, tokenizer, chat_template=False, max_prompt_tokens=64)


def _actor(model: torch.nn.Module) -> ActorRole:
    return ActorRole(model, OptimConfig(), AlgorithmConfig(), 8, 8, 1.0)


def _lora_actor(tiny_model) -> ActorRole:
    return _actor(apply_lora(copy.deepcopy(tiny_model), LoraConfig(r=4, alpha=8.0)))


def _assert_engine_holds(rollout: RolloutRole, weights: dict[str, torch.Tensor]) -> None:
    held = held_weights(rollout.engine)
    assert len(held) > 0 and set(held) <= set(weights)
    for name, tensor in held.items():
        assert torch.equal(tensor, weights[name]), name  # bit for bit


def _train_some(actor: ActorRole, step: int) -> list[str]:
    """Change the MLP weights of layer 0 (and one element of q_proj of layer 1); the rest stays frozen."""
    state = actor.model.state_dict()
    changed = [n for n in state if n.startswith("model.layers.0.mlp.")] + ["model.layers.1.self_attn.q_proj.weight"]
    with torch.no_grad():
        for name in changed[:-1]:
            state[name].add_(0.01 * step)
        state[changed[-1]][0, 0] += 0.5  # one element: the whole tensor goes (per-tensor granularity)
    return changed


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_delta_syncs_send_only_the_changed_tensors_and_the_engine_matches_bit_for_bit(tiny_model, tokenizer, transport):
    actor, rollout = _actor(copy.deepcopy(tiny_model).requires_grad_(True)), _rollout(tiny_model, tokenizer)
    cfg = WeightSyncConfig(transport=transport, bucket_mb=0.05, checksum=True, mode="delta")
    state = actor.model.state_dict()
    first = sync_weights(actor, rollout, 1, cfg)  # nothing known of the engine: everything
    assert first["weight_sync/megabytes"] == pytest.approx(sum(t.numel() * 4 for t in state.values()) / MB)
    for version in (2, 3, 4):
        changed = _train_some(actor, version)
        metrics = sync_weights(actor, rollout, version, cfg)
        assert rollout.version == version and metrics["weight_sync/checksum_ok"] == 1.0
        # tiny model: mlp of layer 0 is 3 x 64 x 128 fp32, q_proj 64 x 64
        assert metrics["weight_sync/megabytes"] == pytest.approx((3 * 64 * 128 + 64 * 64) * 4 / MB)
        assert sum(state[n].numel() for n in changed) == 3 * 64 * 128 + 64 * 64
        _assert_engine_holds(rollout, actor.model.state_dict())


def test_a_delta_for_another_engine_version_is_refused(tiny_model, tokenizer):
    actor, rollout = _actor(copy.deepcopy(tiny_model).requires_grad_(True)), _rollout(tiny_model, tokenizer)
    cfg = WeightSyncConfig(mode="delta")
    sync_weights(actor, rollout, 1, cfg)
    _train_some(actor, 2)
    sync_weights(actor, rollout, 2, cfg)
    _train_some(actor, 3)
    against_1 = actor.export_weights(3, MB, SyncRequest("delta", 1))  # built for an engine at version 1
    assert against_1.header.kind == "delta" and against_1.header.base_version == 1
    with pytest.raises(StaleWeightsError, match="from version 1 to 3 reached a rollout engine at version 2"):
        rollout.load_weights(against_1)
    assert rollout.version == 2  # nothing loaded


def test_a_torn_or_corrupted_delta_is_refused(tiny_model, tokenizer):
    actor, rollout = _actor(copy.deepcopy(tiny_model).requires_grad_(True)), _rollout(tiny_model, tokenizer)
    sync_weights(actor, rollout, 1, WeightSyncConfig(mode="delta"))
    _train_some(actor, 2)
    torn = actor.export_weights(2, MB, SyncRequest("delta", 1))
    del torn.layout["model.layers.0.mlp.up_proj.weight"]
    with pytest.raises(StaleWeightsError, match="without 1 of its 4 tensors.*torn update"):
        rollout.load_weights(torn)
    corrupted = actor.export_weights(2, MB, SyncRequest("delta", 1))
    corrupted.buckets[0][0] += 1.0
    with pytest.raises(StaleWeightsError, match="differ from the trainer's at version 2"):
        rollout.load_weights(corrupted, checksum=True)


def _adapter_numel(actor: ActorRole) -> int:
    return sum(p.numel() for n, p in actor.model.named_parameters() if ".lora_" in n)


def _train_adapter(actor: ActorRole, step: int) -> None:
    gen = torch.Generator().manual_seed(step)
    with torch.no_grad():
        for name, p in actor.model.named_parameters():
            if ".lora_" in name:
                p.add_(0.05 * torch.randn(p.shape, generator=gen))


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode", ["adapter", "delta"])  # delta under LoRA is the adapter
def test_adapter_syncs_send_the_adapter_alone_and_the_engine_merges_bit_for_bit(tiny_model, tokenizer, transport, mode):
    actor, rollout = _lora_actor(tiny_model), _rollout(tiny_model, tokenizer)
    cfg = WeightSyncConfig(transport=transport, bucket_mb=0.05, checksum=True, mode=mode)
    # tiny model, r 4 on every linear of 2 layers: per layer 4 x (q 64+64, k 64+64, v 64+64, o 64+64, gate
    # 64+128, up 64+128, down 128+64) = 4 x 1088
    assert _adapter_numel(actor) == 2 * 4 * 1088
    base_numel = sum(t.numel() for t in merged_state_dict(actor.model).templates.values())
    first = sync_weights(actor, rollout, 1, cfg)  # the base, unmerged, with the adapter
    assert first["weight_sync/megabytes"] == pytest.approx((base_numel + 2 * 4 * 1088) * 4 / MB)
    for version in (2, 3, 4):
        _train_adapter(actor, version)
        metrics = sync_weights(actor, rollout, version, cfg)
        assert rollout.version == version and metrics["weight_sync/checksum_ok"] == 1.0
        assert metrics["weight_sync/megabytes"] == pytest.approx(2 * 4 * 1088 * 4 / MB)  # the adapter's bytes
        _assert_engine_holds(rollout, dict(merged_state_dict(actor.model)))


def test_the_merge_is_peft_s_own(tiny_model):
    actor = _lora_actor(tiny_model)
    _train_adapter(actor, 1)
    merged = merged_state_dict(actor.model)
    peft_merged = copy.deepcopy(actor.model).merge_and_unload().state_dict()
    for name in merged:
        assert torch.equal(merged[name], peft_merged[name]), name


def test_an_adapter_for_a_base_the_engine_does_not_keep_is_refused(tiny_model, tokenizer):
    actor, rollout = _lora_actor(tiny_model), _rollout(tiny_model, tokenizer)
    _train_adapter(actor, 1)
    with pytest.raises(StaleWeightsError, match="for the base of version 1, the rollout engine keeps no base"):
        rollout.load_weights(actor.export_weights(2, MB, SyncRequest("adapter", 1)))
    rollout.load_weights(actor.export_weights(2, MB, SyncRequest("adapter")))  # base + adapter
    with pytest.raises(StaleWeightsError, match="for the base of version 1, the rollout engine keeps the base of "
                       "version 2"):
        rollout.load_weights(actor.export_weights(3, MB, SyncRequest("adapter", 1)))
    torn = actor.export_weights(3, MB, SyncRequest("adapter", 2))
    del torn.layout["model.layers.0.mlp.up_proj.weight:lora_B"]
    with pytest.raises(StaleWeightsError, match="an adapter weight update to version 3 arrived without 1 of its 28 "
                       "tensors.*torn update"):
        rollout.load_weights(torn)
    assert rollout.version == 2


def test_mode_adapter_needs_lora_and_an_unknown_mode_is_named(tiny_model, tokenizer):
    actor = _actor(copy.deepcopy(tiny_model).requires_grad_(True))
    with pytest.raises(ConfigError, match="mode=adapter needs a LoRA policy"):
        actor.export_weights(1, MB, SyncRequest("adapter"))
    with pytest.raises(ConfigError, match="config key 'runtime.weight_sync.mode': unknown weight_sync mode 'xor'; "
                       "known: adapter, delta, full"):
        load_config(None, ["runtime.weight_sync.mode=xor"])


def test_a_lora_grpo_run_with_adapter_syncs_is_the_full_sync_run(tmp_path, tiny_model_dir):
    """The loop's own syncs: step 1 sends the base and the adapter, step 2 the adapter alone; every metric
    but the sync's size is the full-sync run's (the engine decodes with the same merged weights)."""
    import json

    from rlxf.loops.rl import train_rl
    from tests.conftest import assert_trains, small_overrides

    rows = {}
    for mode in ("full", "adapter"):
        run_dir = tmp_path / mode
        overrides = [*small_overrides(run_dir, tiny_model_dir, steps=2), "model.lora.r=4", "model.lora.alpha=8",
                     "runtime.weight_sync.checksum=true", f"runtime.weight_sync.mode={mode}"]
        train_rl(load_config(None, overrides), write=lambda _: None)
        rows[mode] = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["weight_sync/checksum_ok"] for r in rows["adapter"][1:]] == [1.0, 1.0]
    assert rows["adapter"][2]["weight_sync/megabytes"] == pytest.approx(2 * 4 * 1088 * 4 / MB)  # the adapter
    assert rows["adapter"][1]["weight_sync/megabytes"] > rows["full"][1]["weight_sync/megabytes"]  # base + adapter
    assert_trains(rows["full"])  # a run with gradients: equal zeros would prove nothing
    volatile = ("time/", "weight_sync/megabytes", "weight_sync/buckets")
    for full, adapter in zip(rows["full"], rows["adapter"], strict=True):
        assert {k: v for k, v in adapter.items() if not k.startswith(volatile)} == pytest.approx(
            {k: v for k, v in full.items() if not k.startswith(volatile)}, nan_ok=True)


def test_adapter_syncs_reach_a_rollout_in_a_child_process(tmp_path, tiny_model_dir):
    """``runtime.kind: process``: the header and the kept base live in the engine's process."""
    import json

    from rlxf.loops.rl import train_rl
    from tests.conftest import small_overrides

    overrides = [*small_overrides(tmp_path, tiny_model_dir, steps=3), "model.lora.r=4", "model.lora.alpha=8",
                 "runtime.kind=process", "runtime.process_roles=[rollout]", "runtime.weight_sync.transport=shared_memory",
                 "runtime.weight_sync.checksum=true", "runtime.weight_sync.mode=adapter"]
    train_rl(load_config(None, overrides), write=lambda _: None)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["weight_sync/checksum_ok"] for r in rows[1:]] == [1.0, 1.0, 1.0]
    assert [r["weight_sync/megabytes"] for r in rows[2:]] == pytest.approx([2 * 4 * 1088 * 4 / MB] * 2)
