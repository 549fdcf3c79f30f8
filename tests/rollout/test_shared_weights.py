"""``rollout.engine_options.share_weights``: the built-in engine decodes with the policy's own tensors.

No second copy of the weights (the decoder holds no weight storage of its own), an optimizer step on the
policy is what the next decode sees with nothing loaded, a load of other tensors is refused (it would
overwrite the trainer's), the RL loop sends nothing at its weight sync, and the setups where the engine
would need weights of its own are refused with one line."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from tests.conftest import small_overrides
from tests.loops.test_exact_on_policy_loop import _rows as metrics_of_two_grpo_steps
from tests.rollout.test_decoders import ATOL, _batch, _reference, _run, _tiny

from rlxf.checked_config import load_config
from rlxf.config import ConfigError
from rlxf.loops.rl import train_rl
from rlxf.rollout.decoders import LlamaDecoder, make_decoder


def weight_storages(decoder: LlamaDecoder) -> set[int]:
    tensors = [decoder.embed, decoder.norm, decoder.lm_head]
    for layer in decoder.layers:
        for value in layer.values():
            tensors += list(value) if isinstance(value, tuple) else [value]
    return {t.untyped_storage().data_ptr() for t in tensors if t is not None}


@pytest.mark.parametrize("kind", ["llama_tied", "llama_untied_gqa", "qwen2_bias_gqa"])
def test_the_shared_decoder_holds_no_weights_of_its_own(kind):
    model = _tiny(kind)
    policy_storages = {p.untyped_storage().data_ptr() for p in model.parameters()}
    shared = LlamaDecoder.from_hf(model, share_weights=True)
    copied = LlamaDecoder.from_hf(model)
    assert weight_storages(shared) <= policy_storages
    assert not weight_storages(copied) & policy_storages


@pytest.mark.parametrize("kind", ["llama_untied_gqa", "qwen2_bias_gqa"])
def test_an_optimizer_step_is_what_the_next_decode_sees(kind):
    model = _tiny(kind)
    ids, mask, forced = _batch(seed=5)
    shared = LlamaDecoder.from_hf(model, share_weights=True)
    copied = LlamaDecoder.from_hf(model)
    before = _reference(model, ids, mask, forced)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    model(input_ids=ids, attention_mask=mask).logits.square().mean().backward()
    optimizer.step()  # in place, as the trainer's
    after = _reference(model, ids, mask, forced)
    assert (after - before).abs().max() > 1e-2
    for t, logits in enumerate(_run(shared, ids, mask, forced)[0]):
        torch.testing.assert_close(logits, after[:, t], atol=ATOL, rtol=1e-4, msg=f"t={t}")
    for t, logits in enumerate(_run(copied, ids, mask, forced)[0]):  # the copy still decodes the old weights
        torch.testing.assert_close(logits, before[:, t], atol=ATOL, rtol=1e-4, msg=f"t={t}")


def test_loading_the_models_own_tensors_is_a_no_op_and_others_are_refused():
    model = _tiny("llama_untied_gqa")
    shared = LlamaDecoder.from_hf(model, share_weights=True)
    shared.load_state_dict(model.state_dict())  # what the loop's start and resume send: nothing to copy
    other = copy.deepcopy(model).state_dict()
    kept = model.model.layers[0].self_attn.q_proj.weight.detach().clone()
    with pytest.raises(ValueError, match="shares the model's weights .share_weights., so loading other tensors "
                                         "would overwrite the model's"):
        name = "model.layers.0.self_attn.q_proj.weight"
        shared.load_state_dict({name: other[name] + 1})
    assert torch.equal(model.model.layers[0].self_attn.q_proj.weight, kept)


def test_another_dtype_or_an_fp32_head_cannot_share():
    model = _tiny("llama_tied")
    with pytest.raises(ValueError, match="share_weights decodes with the model's own torch.float32 weights"):
        make_decoder(model, dtype=torch.bfloat16, share_weights=True)
    with pytest.raises(ValueError, match="batch_invariant keeps its own weights"):
        make_decoder(model, batch_invariant=True, share_weights=True)
    bf16 = copy.deepcopy(model).to(torch.bfloat16)
    with pytest.raises(ValueError, match="drop engine_options dtype and fp32_lm_head"):
        make_decoder(bf16, fp32_head=True, share_weights=True)
    assert make_decoder(model, fp32_head=True, share_weights=True).shares_weights  # an fp32 head is the fp32 model's


def test_the_loop_sends_nothing_and_step_two_samples_the_trained_weights(tmp_path, sft_model_dir):
    shared = metrics_of_two_grpo_steps(tmp_path / "shared", sft_model_dir, "rollout.engine_options.share_weights=true")
    plain = metrics_of_two_grpo_steps(tmp_path / "plain", sft_model_dir)
    assert [row["weight_sync/megabytes"] for row in shared] == [0.0, 0.0]
    assert [row["weight_sync/version"] for row in shared] == [1.0, 2.0]
    assert all(row["weight_sync/megabytes"] > 0 for row in plain)
    # step 1 trained the policy; step 2's rollout log-probs are the trained policy's as the trainer computes
    # them (a stale engine would be off by the step), to float rounding, as with a synced copy
    assert shared[0]["policy/grad_norm"] > 0
    for row in (*shared, *plain):
        assert row["policy/rollout_log_prob_diff_max"] < 1e-3


@pytest.mark.parametrize("override, culprit", [
    ("loop=rl_async", "loop: rl_async"),
    ("model.lora={r: 4}", "model.lora"),
    ("runtime.kind=process", "runtime.kind: process"),
])
def test_setups_where_the_engine_needs_its_own_weights_are_refused(tmp_path, tiny_model_dir, override, culprit):
    """Refused when the recipe loads, before any model is: every culprit is config."""
    with pytest.raises(ConfigError, match=f"share_weights needs the policy and the engine in one process and one "
                                          f"loop; not with {culprit}"):
        load_config(None, [*small_overrides(tmp_path, tiny_model_dir), "rollout.engine_options.share_weights=true",
                           override])


def test_a_shared_run_resumes_from_its_checkpoint(tmp_path, sft_model_dir):
    """Resuming loads the checkpoint into the policy and hands the engine the policy's own tensors: no copy
    is refused, and the resumed steps sync nothing."""
    overrides = [*small_overrides(tmp_path, sft_model_dir, steps=1), "sft.steps=0", "algorithm.name=grpo",
                 "rollout.engine_options.share_weights=true"]
    train_rl(load_config(None, overrides), write=lambda _: None)
    train_rl(load_config(None, [*overrides, "train.steps=2"]), resume=True, write=lambda _: None)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows if "weight_sync/megabytes" in row] == [1, 2]
    assert all(row["weight_sync/megabytes"] == 0.0 for row in rows if "weight_sync/megabytes" in row)
