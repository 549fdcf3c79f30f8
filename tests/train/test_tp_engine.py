"""Tensor parallelism (the ``tp`` engine) on gloo vs the single-process engine, on a small random Llama
(hidden 64, 4 heads, 2 KV heads, 2 layers, fp32) and the same rows: two optimizer steps each.

Tolerances (float32; TP sums partial products in another order): losses and gradient norms 1e-5 absolute
(measured <= 3e-7 on a loss of ~4.8, <= 4.3e-6 on a norm of ~2); every parameter's gradient, gathered, 1e-6 absolute
(measured <= 2.2e-8, the largest gradient 0.06-0.07). Weights after each AdamW step (lr 1e-2): 1e-3 absolute
(measured <= 1.1e-4): the first update is ~lr * g/|g| per weight, so a weight whose gradient is near
AdamW's eps (1e-8) moves by a fraction of lr that a 1e-9 gradient difference changes. What the weight sync
gathers (its bucket plan, ``full_tensor`` a bucket at a time) is the single-process model bit for bit."""

from __future__ import annotations

import pytest

from rlxf.config_error import ConfigError
from tests.train.dp_helpers import OPTIM
from tests.train.tp_worker import continued_single, resumed_single, small_llama, spawn_case

PROJECTIONS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
               "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
TP_SHARDED = sorted(f"model.layers.{i}.{p}.weight" for i in range(2) for p in PROJECTIONS)


def check_matches_single_process(results: list[dict], tied: bool) -> None:
    for result in results:
        assert result["sync_bit_exact"] and result["full_bit_exact"]
        assert result["tied"] is tied
        assert set(TP_SHARDED) <= set(result["sharded"])
        for (loss, norm), (ref_loss, ref_norm) in zip(result["steps"], result["ref_steps"]):
            assert loss == pytest.approx(ref_loss, abs=1e-5)
            assert norm == pytest.approx(ref_norm, abs=1e-5)
        assert result["ref_steps"][0][1] > OPTIM.grad_clip  # clipping is exercised
        assert result["grad_max"] > 0.01  # gradients of a size worth comparing
        assert max(result["grad_diffs"].values()) < 1e-6
        assert max(result["first_weight_diffs"].values()) < 1e-3
        assert max(result["weight_diffs"].values()) < 1e-3


def check_checkpoint_resumes_in_one_process(results: list[dict], tied: bool) -> None:
    """The tp engine's checkpoint after 2 steps (save_full_model + save_state, the single-process format)
    resumes in the single-process engine and in a fresh tp engine: their step 3 is the uninterrupted
    single-process run's (1e-5; measured <= 2.4e-6 on the grad norm, 8e-7 on the loss)."""
    uninterrupted = continued_single(tied, 3)[2]
    assert all(r["ref_step3"] == uninterrupted for r in results)  # (the reference continued alike)
    for result in results:  # and the other way: a tp engine resumes its own checkpoint
        assert result["resumed_step"] == pytest.approx(uninterrupted, abs=1e-5)
    assert resumed_single(results[0]["checkpoint"], 2) == pytest.approx(uninterrupted, abs=1e-5)
    assert uninterrupted[0] != pytest.approx(results[0]["ref_steps"][1][0], abs=1e-2)  # the loss moved


@pytest.mark.parametrize("tied", [False, True])
def test_tp2_matches_single_process(tmp_path, tied):
    results = spawn_case(tmp_path, {"tied": tied, "tp": 2}, world=2)
    check_matches_single_process(results, tied)
    check_checkpoint_resumes_in_one_process(results, tied)
    assert [r["dp_rank"] for r in results] == [0, 0]  # one replica: both ranks trained on all rows
    assert all(r["sharded"] == TP_SHARDED for r in results)  # embeddings, norms, LM head replicated
    # plain replicated tensors beside DTensor shards: both multi-tensor AdamW kernels refuse the mix
    assert [r["kernel"] for r in results] == ["per-tensor loop"] * 2


@pytest.mark.slow  # 4 gloo ranks: ~50 s on 2 cores
def test_dp2_tp2_mesh_matches_single_process(tmp_path):
    results = spawn_case(tmp_path, {"tied": True, "tp": 2}, world=4)
    check_matches_single_process(results, tied=True)
    check_checkpoint_resumes_in_one_process(results, tied=True)
    assert [r["dp_rank"] for r in results] == [0, 0, 1, 1]  # a TP group is consecutive ranks
    assert "model.embed_tokens.weight" in results[0]["sharded"]  # FSDP2 over dp shards the replicated rest
    assert [r["kernel"] for r in results] == ["fused"] * 4  # every parameter a DTensor: the fused kernel


def test_plan_refuses_what_it_cannot_split():
    import transformers

    from rlxf.train.tensor_parallel import layer_plan
    from rlxf.train.tp_engine import mesh_shape

    llama = small_llama(tied=False)  # 4 heads, 2 KV heads, intermediate 128
    assert layer_plan(llama, 2)["self_attn.o_proj"] == "rowwise"
    with pytest.raises(ConfigError, match=r"tensor_parallel=4 must divide the model's num_key_value_heads \(2\)"):
        layer_plan(llama, 4)
    with pytest.raises(ConfigError, match=r"tensor_parallel=3 must divide the model's num_attention_heads \(4\)"):
        layer_plan(llama, 3)
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=64))
    with pytest.raises(ConfigError, match=r"no tensor-parallel plan for GPT2LMHeadModel \(model_type 'gpt2'\)"):
        layer_plan(gpt2, 2)
    assert mesh_shape(4, 2) == (2, 2) and mesh_shape(2, None) == (1, 2) and mesh_shape(8, 8) == (1, 8)
    with pytest.raises(ConfigError, match=r"tensor_parallel=3 must divide the trainer's ranks \(4\)"):
        mesh_shape(4, 3)
