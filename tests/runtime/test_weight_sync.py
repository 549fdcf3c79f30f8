"""Bucketed, versioned weight sync: round trip, bucket count, version report, stale-engine detection."""

from __future__ import annotations

import copy
import weakref
from collections.abc import Mapping

import pytest
import torch

from rlxf.roles.actor import ActorRole
from rlxf.roles.rollout import RolloutRole
from rlxf.rollout.engine import build_engine
from rlxf.runtime.config import WeightSyncConfig
from rlxf.runtime.weight_sync import (
    StaleWeightsError,
    check_report,
    pack_weights,
    sync_weights,
    unpack_weights,
)


def test_pack_round_trips_into_few_buckets():
    state = {f"w{i}": torch.randn(32, 16) for i in range(10)}  # 2 KiB each in float32
    state["half"] = torch.randn(8).half()
    packed = pack_weights(state, version=7, bucket_bytes=4 * 2048)
    # 10 float32 tensors of 2 KiB in buckets of 8 KiB -> 3 buckets, plus one float16 bucket.
    assert len(packed.buckets) == 4 and packed.version == 7
    out = unpack_weights(packed)
    assert set(out) == set(state)
    for name, tensor in state.items():
        assert out[name].dtype == tensor.dtype and torch.equal(out[name], tensor)


def test_a_tensor_larger_than_a_bucket_gets_its_own():
    packed = pack_weights({"big": torch.zeros(1000), "small": torch.zeros(2)}, 0, bucket_bytes=64)
    assert [b.numel() for b in packed.buckets] == [1000, 2]



class _CountingWeights(Mapping):
    """A state dict computed as it is read (as LoRA's merged weights): it counts reads and how many of
    the tensors it handed out are still alive at each read; buckets are planned from ``templates``."""

    def __init__(self, templates: dict[str, torch.Tensor]) -> None:
        self.templates = templates
        self.reads: dict[str, int] = {}
        self.handed_out: list[weakref.ref] = []
        self.most_alive = 0

    def __getitem__(self, name: str) -> torch.Tensor:
        self.reads[name] = self.reads.get(name, 0) + 1
        self.most_alive = max(self.most_alive, sum(ref() is not None for ref in self.handed_out))
        value = self.templates[name] + 1.0
        self.handed_out.append(weakref.ref(value))
        return value

    def __iter__(self):
        return iter(self.templates)

    def __len__(self) -> int:
        return len(self.templates)


def test_a_lazy_state_dict_is_planned_from_templates_and_computed_one_tensor_at_a_time():
    lazy = _CountingWeights({"a": torch.zeros(3), "b": torch.ones(2, 2), "c": torch.full((5,), 2.0)})
    packed = pack_weights(lazy, version=1, bucket_bytes=4 * 8)  # a + b = 7 floats in one bucket, c alone
    assert lazy.reads == {"a": 1, "b": 1, "c": 1}  # planning read none; filling read each once
    assert lazy.most_alive == 0  # each computed tensor was gone before the next was computed
    assert [b.tolist() for b in packed.buckets] == [[1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0], [3.0] * 5]

def _roles(tiny_model, tokenizer, **engine_options):
    engine = build_engine("torch", copy.deepcopy(tiny_model), tokenizer.eos_token_id, tokenizer.pad_token_id,
                          engine_options)
    rollout = RolloutRole(engine, tokenizer, chat_template=False, max_prompt_tokens=64)
    from rlxf.algos import AlgorithmConfig
    from rlxf.config import OptimConfig

    actor = ActorRole(copy.deepcopy(tiny_model).requires_grad_(True), OptimConfig(), AlgorithmConfig(), 8, 8, 1.0)
    return actor, rollout


def test_sync_reports_version_and_checksum_matches(tiny_model, tokenizer):
    actor, rollout = _roles(tiny_model, tokenizer)
    with torch.no_grad():
        for p in actor.model.parameters():
            p.add_(0.01)
    metrics = sync_weights(actor, rollout, 3, WeightSyncConfig(bucket_mb=0.05, checksum=True))
    assert rollout.version == 3 and metrics["weight_sync/version"] == 3
    assert metrics["weight_sync/checksum_ok"] == 1.0 and metrics["weight_sync/buckets"] > 1
    sent = sum(t.numel() * t.element_size() for t in actor.state_dict().values())
    assert metrics["weight_sync/megabytes"] == pytest.approx(sent / 2**20) and sent > 0  # every weight, once


@pytest.mark.parametrize("dtype", [None, "bfloat16"])
def test_a_stale_engine_is_detected(tiny_model, tokenizer, dtype):
    # a bf16 engine holds the trainer's fp32 weights rounded: the check compares in the engine's dtype
    actor, rollout = _roles(tiny_model, tokenizer, **({"dtype": dtype} if dtype else {}))
    sync_weights(actor, rollout, 1, WeightSyncConfig(checksum=True))
    assert rollout.engine.decoder.dtype == (torch.bfloat16 if dtype else torch.float32)
    with torch.no_grad():
        for p in actor.model.parameters():
            p.add_(0.01)
    # An engine that claims the new version but never copied the weights in (a silent no-op update).
    rollout.engine.update_weights = lambda state_dict, version: setattr(rollout.engine, "version", version)
    with pytest.raises(StaleWeightsError, match="differ from the trainer"):
        sync_weights(actor, rollout, 2, WeightSyncConfig(checksum=True))
    # Without the checksum the version alone passes: that is what the check is for.
    sync_weights(actor, rollout, 3, WeightSyncConfig(checksum=False))


@pytest.mark.parametrize("decoder", ["llama", "hf"])
def test_a_sync_refreshes_the_fp32_lm_head(tiny_model, tokenizer, decoder):
    # rollout.engine_options.fp32_lm_head: the bf16 engine's fp32 head holds the trainer's fp32 tensor after a sync
    actor, rollout = _roles(tiny_model, tokenizer, dtype="bfloat16", fp32_lm_head=True, decoder=decoder)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in actor.model.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=g))
    dec = rollout.engine.decoder
    head = dec.lm_head if decoder == "llama" else dec.fp32_head.weight
    trained = actor.model.get_output_embeddings().weight.detach()
    assert head.dtype == torch.float32 and not torch.equal(head, trained)
    sync_weights(actor, rollout, 1, WeightSyncConfig(bucket_mb=0.05, checksum=True))
    assert torch.equal(head, trained)  # exact: the fp32 values, not their bf16 rounding
    assert not torch.equal(head, trained.bfloat16().float())


def test_an_engine_on_the_wrong_version_is_detected():
    packed = pack_weights({"w": torch.zeros(2)}, version=5, bucket_bytes=1024)
    with pytest.raises(StaleWeightsError, match="holds policy version 4"):
        check_report(packed, {"version": 4})


def test_an_unknown_engine_dtype_is_named(tiny_model, tokenizer):
    with pytest.raises(ValueError, match=r"rollout.engine_options.dtype 'bf16' is not one of float32, bfloat16"):
        build_engine("torch", tiny_model, tokenizer.eos_token_id, tokenizer.pad_token_id, {"dtype": "bf16"})
