"""model.lora (peft): the reference is the adapter switched off, rollout engines get merged weights,
checkpoints hold the adapter alone plus a merged export that plain transformers loads."""

from __future__ import annotations

import json

import pytest
import torch
import transformers
from safetensors.torch import load_file

from rlxf.checked_config import load_config
from rlxf.config import LoraConfig
from rlxf.loops.rl import train_rl
from rlxf.models.loading import load_causal_lm
from rlxf.models.lora import ADAPTER_DIR, adapter_off, apply_lora, merged_state_dict, save_lora_checkpoint
from rlxf.roles.reference import ReferenceRole
from rlxf.rollout.engine import build_engine
from rlxf.rollout.sampling import SamplingParams
from tests.conftest import small_overrides

pytest.importorskip("peft")
IDS = torch.tensor([[4, 9, 30, 17, 5, 60]])


def _adapted(path: str, **lora) -> torch.nn.Module:
    model = apply_lora(load_causal_lm(path), LoraConfig(r=4, **lora))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # B starts at 0 (the adapter is a no-op): give it weights to see
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
    return model


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(input_ids=IDS).logits


@pytest.mark.parametrize("arch", ["qwen2", "mistral", "gpt2"])
def test_adapter_off_is_the_base_and_the_merged_export_loads_in_transformers(checkpoints, arch, tmp_path):
    base = _logits(load_causal_lm(checkpoints[arch]))
    model = _adapted(checkpoints[arch])
    adapted = _logits(model)
    assert (adapted - base).abs().max() > 0.1
    with adapter_off(model):
        assert torch.equal(_logits(model), base)
    save_lora_checkpoint(model, tmp_path)
    plain = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "policy")
    assert (_logits(plain) - adapted).abs().max() <= 1e-5
    adapter = load_file(tmp_path / ADAPTER_DIR / "adapter_model.safetensors")
    assert adapter and all("lora_" in key for key in adapter)  # adapter-only: no base weight
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert trainable == sum(t.numel() for t in adapter.values())


def test_merged_weights_drive_the_built_in_decoder(checkpoints):
    """The fast decoder never sees an adapter: merged weights give the adapted model's log-probs."""
    model = _adapted(checkpoints["qwen2"])
    engine = build_engine("torch", load_causal_lm(checkpoints["qwen2"]), -1, 0)
    engine.update_weights(merged_state_dict(model), version=1)
    gen = engine.generate([IDS[0].tolist()], SamplingParams(temperature=0.0, max_new_tokens=4))
    full = torch.cat([IDS, gen.response_ids], 1)
    with torch.no_grad():
        logits = model.eval()(input_ids=full).logits[0, IDS.shape[1] - 1:-1].log_softmax(-1)
    expected = logits.gather(-1, gen.response_ids[0, :, None]).squeeze(-1)
    assert gen.response_ids[0].tolist() == logits.argmax(-1).tolist()
    assert (gen.log_probs[0] - expected).abs().max() <= 1e-5



def test_merged_weights_are_computed_when_read_from_the_live_weights(checkpoints):
    model = _adapted(checkpoints["qwen2"], alpha=8)  # r 4, alpha 8: scale 2
    merged = merged_state_dict(model)
    layer = model.get_base_model().model.layers[0].self_attn.q_proj
    name = "model.layers.0.self_attn.q_proj.weight"
    assert merged.templates[name].data_ptr() == layer.base_layer.weight.data_ptr()  # no merged copy held
    with torch.no_grad():
        expected = layer.base_layer.weight + 2.0 * layer.lora_B["default"].weight @ layer.lora_A["default"].weight
    assert (merged[name] - expected).abs().max() <= 1e-6 and not torch.equal(merged[name], layer.base_layer.weight)
    with torch.no_grad():
        layer.lora_B["default"].weight.zero_()  # an update after the mapping was made: read today's weights
    assert torch.equal(merged[name], layer.base_layer.weight)
    assert "model.layers.0.self_attn.q_proj.bias" in merged and not any(".lora_" in key for key in merged)

def test_reference_role_switches_the_adapter_off(checkpoints):
    from rlxf.batch import TrajectoryBatch

    model = _adapted(checkpoints["qwen2"])
    batch = TrajectoryBatch(
        prompt_ids=IDS[:, :3], prompt_mask=torch.ones(1, 3, dtype=torch.long), response_ids=IDS[:, 3:],
        response_mask=torch.ones(1, 3, dtype=torch.long), loss_mask=torch.ones(1, 3, dtype=torch.long),
        group_ids=torch.zeros(1, dtype=torch.long), metadata=[{}],
    )
    base = load_causal_lm(checkpoints["qwen2"])
    expected = ReferenceRole(base, 4, 1.0).compute_log_probs(batch)
    model.train()
    got = ReferenceRole(model, 4, 1.0).compute_log_probs(batch)
    assert (got - expected).abs().max() <= 1e-6
    assert model.training and any(p.requires_grad for p in model.parameters())  # the actor's state is kept


def test_lora_grpo_run_checkpoints_and_resumes(tmp_path, tiny_model_dir):
    run_dir = tmp_path / "lora"
    lora = ["model.lora.r=4", "model.lora.alpha=8", "algorithm.kl_coef=0.01"]
    config = load_config(None, [*small_overrides(run_dir, tiny_model_dir, steps=2), *lora])
    train_rl(config, write=lambda _: None)
    step = run_dir / "checkpoints" / "step_000002"
    assert json.loads((step / ADAPTER_DIR / "adapter_config.json").read_text())["r"] == 4
    merged = transformers.AutoModelForCausalLM.from_pretrained(step / "policy")
    reference = transformers.AutoModelForCausalLM.from_pretrained(run_dir / "reference")
    changed = [n for n, p in merged.state_dict().items() if not torch.equal(p, reference.state_dict()[n])]
    assert changed and all("proj" in n for n in changed)  # only the adapted linear layers moved
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows[1]["policy/kl"] >= 0.0
    resumed = load_config(None, [*small_overrides(run_dir, tiny_model_dir, steps=3), *lora])
    train_rl(resumed, resume=True, write=lambda _: None)
    assert (run_dir / "checkpoints" / "step_000003" / ADAPTER_DIR / "adapter_model.safetensors").exists()


@pytest.mark.parametrize("transport", ["object_store", "shared_memory", "collective"])
def test_every_weight_sync_transport_sends_merged_weights(tiny_model_dir, transport):
    from rlxf.algos import AlgorithmConfig
    from rlxf.config import OptimConfig
    from rlxf.models.loading import load_tokenizer
    from rlxf.roles.actor import ActorRole
    from rlxf.roles.rollout import RolloutRole
    from rlxf.runtime.config import WeightSyncConfig
    from rlxf.runtime.weight_sync import held_weights, sync_weights

    tokenizer = load_tokenizer(tiny_model_dir)
    engine = build_engine("torch", load_causal_lm(tiny_model_dir), tokenizer.eos_token_id, tokenizer.pad_token_id)
    rollout = RolloutRole(engine, tokenizer, chat_template=False, max_prompt_tokens=64)
    actor = ActorRole(_adapted(tiny_model_dir), OptimConfig(), AlgorithmConfig(), 8, 8, 1.0)
    cfg = WeightSyncConfig(transport=transport, bucket_mb=0.05, checksum=True)
    metrics = sync_weights(actor, rollout, 1, cfg)
    assert rollout.version == 1 and metrics["weight_sync/checksum_ok"] == 1.0
    merged, held = merged_state_dict(actor.model), held_weights(rollout.engine)
    assert held and set(held) <= set(merged)
    changed = [name for name in held if "proj" in name]
    assert changed and all(torch.equal(held[name], merged[name]) for name in held)
    base = load_causal_lm(tiny_model_dir).state_dict()
    assert any(not torch.equal(held[name], base[name]) for name in changed)  # the adapter's delta arrived
