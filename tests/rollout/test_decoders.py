"""Decoders (HFDecoder, LlamaDecoder) vs a full HF forward pass of the same left-padded tokens."""

from __future__ import annotations

import copy

import pytest
import torch

from rlxf.rollout.decoders import Decoder, HFDecoder, LlamaDecoder, make_decoder

transformers = pytest.importorskip("transformers")

VOCAB = 97
PROMPT_LENS = [5, 3, 7, 1]
N_STEPS = 6
ATOL = 1e-4


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny models: intra-op threading only adds sync overhead (and thrashes on a busy box)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _randomize(model: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.08 * torch.randn(p.shape, generator=g))


def _tiny(kind: str) -> torch.nn.Module:
    common = dict(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=64,
    )
    if kind == "llama_tied":
        cfg = transformers.LlamaConfig(**common, num_key_value_heads=4, tie_word_embeddings=True)
        cls = transformers.LlamaForCausalLM
    elif kind == "llama_untied_gqa":
        cfg = transformers.LlamaConfig(**common, num_key_value_heads=2, tie_word_embeddings=False)
        cls = transformers.LlamaForCausalLM
    elif kind == "llama3_rope":
        rope = {
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8,
        }
        cfg = transformers.LlamaConfig(**common, num_key_value_heads=1, rope_parameters=rope)
        cls = transformers.LlamaForCausalLM
    elif kind == "qwen2_bias_gqa":
        cfg = transformers.Qwen2Config(**common, num_key_value_heads=2, tie_word_embeddings=False)
        cls = transformers.Qwen2ForCausalLM
    elif kind == "mistral":
        cfg = transformers.MistralConfig(**common, num_key_value_heads=2, sliding_window=4096)
        cls = transformers.MistralForCausalLM
    else:
        raise ValueError(kind)
    torch.manual_seed(0)
    model = cls(cfg).eval()
    _randomize(model, seed=1)
    return model


def _batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    b, p = len(PROMPT_LENS), max(PROMPT_LENS)
    ids = torch.zeros(b, p, dtype=torch.long)
    mask = torch.zeros(b, p, dtype=torch.long)
    for i, n in enumerate(PROMPT_LENS):
        ids[i, p - n :] = torch.randint(1, VOCAB, (n,), generator=g)
        mask[i, p - n :] = 1
    forced = torch.randint(1, VOCAB, (b, N_STEPS), generator=g)
    return ids, mask, forced


@torch.no_grad()
def _reference(model, ids, mask, forced) -> torch.Tensor:
    """Logits [B, N_STEPS + 1, V] predicting each generated slot, from one full forward pass."""
    full = torch.cat([ids, forced], dim=1)
    full_mask = torch.cat([mask, torch.ones_like(forced)], dim=1)
    pos = (full_mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=full, attention_mask=full_mask, position_ids=pos).logits.float()
    p = ids.shape[1]
    return logits[:, p - 1 : p + N_STEPS]


def _run(dec: Decoder, ids, mask, forced, keep_at=None, rows=None):
    """Prefill + teacher-forced steps; optional keep(rows) before step ``keep_at``. Returns list of logits."""
    out = [dec.prefill(ids, mask, max_new_tokens=N_STEPS)]
    active = torch.arange(ids.shape[0])
    for t in range(N_STEPS):
        if keep_at is not None and t == keep_at:
            dec.keep(rows)
            active = active[rows]
        out.append(dec.step(forced[active, t]))
    return out, active


def _make(kind_dec: str, model):
    """``llama_shared``: LlamaDecoder on the model's own tensors (share_weights), unfused."""
    if kind_dec == "hf":
        return HFDecoder(model)
    return LlamaDecoder.from_hf(model, share_weights=kind_dec == "llama_shared")


MODELS = ["llama_tied", "llama_untied_gqa", "qwen2_bias_gqa", "mistral", "llama3_rope"]


@pytest.mark.parametrize("kind", MODELS)
@pytest.mark.parametrize("dec_kind", ["hf", "llama", "llama_shared"])
def test_prefill_and_steps_match_full_forward(kind, dec_kind):
    model = _tiny(kind)
    ids, mask, forced = _batch()
    ref = _reference(model, ids, mask, forced)
    dec = _make(dec_kind, model)
    outs, _ = _run(dec, ids, mask, forced)
    for t, logits in enumerate(outs):
        assert logits.dtype == torch.float32 and logits.shape == (len(PROMPT_LENS), VOCAB)
        torch.testing.assert_close(logits, ref[:, t], atol=ATOL, rtol=1e-4, msg=f"{kind}/{dec_kind} t={t}")
    # a second batch through the same decoder (fresh cache, different shapes)
    ids2, mask2, forced2 = ids[1:3, 2:], mask[1:3, 2:], forced[1:3]
    ref2 = _reference(model, ids2, mask2, forced2)
    outs2, _ = _run(dec, ids2, mask2, forced2)
    for t, logits in enumerate(outs2):
        torch.testing.assert_close(logits, ref2[:, t], atol=ATOL, rtol=1e-4)
    # a batch without any padding (LlamaDecoder's unpacked prefill path)
    ids3, mask3, forced3 = ids[[0, 2], -5:], mask[[0, 2], -5:], forced[[0, 2]]
    assert bool(mask3.all())
    ref3 = _reference(model, ids3, mask3, forced3)
    outs3, _ = _run(dec, ids3, mask3, forced3)
    for t, logits in enumerate(outs3):
        torch.testing.assert_close(logits, ref3[:, t], atol=ATOL, rtol=1e-4)


@pytest.mark.parametrize("kind", ["llama_untied_gqa", "qwen2_bias_gqa"])
@pytest.mark.parametrize("dec_kind", ["hf", "llama", "llama_shared"])
def test_keep_drops_and_reorders_rows(kind, dec_kind):
    model = _tiny(kind)
    ids, mask, forced = _batch(seed=3)
    ref = _reference(model, ids, mask, forced)
    dec = _make(dec_kind, model)
    rows = torch.tensor([3, 0, 2])
    outs, active = _run(dec, ids, mask, forced, keep_at=3, rows=rows)
    assert active.tolist() == [3, 0, 2]
    for t, logits in enumerate(outs):
        expect = ref[:, t] if t <= 3 else ref[active, t]
        torch.testing.assert_close(logits, expect, atol=ATOL, rtol=1e-4, msg=f"t={t}")
    # a second keep, as a bool mask over the active rows, down to a single row
    dec.keep(torch.tensor([False, True, False]))
    with pytest.raises(RuntimeError):  # cache is full after N_STEPS steps
        dec.step(forced[[0], 0])


@pytest.mark.parametrize("kind", ["llama_untied_gqa", "qwen2_bias_gqa"])
def test_finished_rows_stay_cached_until_half_the_rows_are_gone(kind):
    """LlamaDecoder.keep: an in-order subset of more than half the cached rows only marks rows finished
    (the cache keeps 4 rows); the next keep that leaves half or fewer, or reorders, copies the live rows
    out. The logits are the full forward's at every step either way."""
    model = _tiny(kind)
    ids, mask, forced = _batch(seed=7)
    ref = _reference(model, ids, mask, forced)
    dec = LlamaDecoder.from_hf(model)
    torch.testing.assert_close(dec.prefill(ids, mask, max_new_tokens=N_STEPS), ref[:, 0], atol=ATOL, rtol=1e-4)
    active = torch.arange(len(PROMPT_LENS))
    plan = {1: (torch.tensor([0, 2, 3]), [0, 2, 3], 4),  # 3 of 4 live, in order: lazy
            3: (torch.tensor([0, 2]), None, 2),  # rows 0 and 3 of the 4 cached: half -> copied out
            4: (torch.tensor([1, 0]), None, 2)}  # a reorder is always copied
    for t in range(N_STEPS):
        if t in plan:
            rows, live, cached = plan[t]
            dec.keep(rows)
            active = active[rows]
            assert (None if dec.live is None else dec.live.tolist()) == live and dec.kv.shape[2] == cached
        torch.testing.assert_close(dec.step(forced[active, t]), ref[active, t + 1], atol=ATOL, rtol=1e-4, msg=f"t={t}")
    assert active.tolist() == [3, 0]


@pytest.mark.parametrize("kind", ["llama_untied_gqa", "qwen2_bias_gqa", "llama3_rope"])
def test_extend_adds_rows_to_a_running_batch_as_a_cohort_of_their_own(kind):
    """Continuous batching: after 3 steps (and a lazy keep), two new prompts join as 3 rows (the first
    prompt twice, sharing its prefill) in a second cache; rows finish in both; every row's logits stay
    those of its own full forward."""
    model = _tiny(kind)
    ids, mask, forced = _batch(seed=11)
    ref = _reference(model, ids, mask, forced)
    new_ids, new_mask, new_forced = (t[[1, 3]] for t in _batch(seed=12))
    new_ids, new_mask = new_ids[:, -3:], new_mask[:, -3:]  # prompts of 3 and 1 tokens, left-padded to 3
    new_ref = _reference(model, new_ids, new_mask, new_forced)
    dec = LlamaDecoder.from_hf(model)
    dec.prefill(ids, mask, max_new_tokens=N_STEPS)
    old = torch.arange(4)
    for t in range(3):
        if t == 1:
            dec.keep(torch.tensor([0, 2, 3]))  # lazy: row 1 stays cached, finished
            old = old[[0, 2, 3]]
        dec.step(forced[old, t])
    new = torch.tensor([0, 0, 1])
    logits = dec.extend(new_ids, new_mask, max_new_tokens=N_STEPS, expand=new)
    torch.testing.assert_close(logits, new_ref[new, 0], atol=ATOL, rtol=1e-4)
    assert [(c.rows, c.cached, c.cur) for c in dec.cohorts] == [(3, 4, ids.shape[1] + 3), (3, 3, 3)]
    for t in range(3):
        if t == 1:
            with pytest.raises(NotImplementedError):  # rows of several cohorts are dropped, never reordered
                dec.keep(torch.tensor([1, 0]))
            dec.keep(torch.tensor([1, 3, 5]))  # old row 2; the new rows of prompt 0 (first) and prompt 1
            old, new = old[[1]], new[[0, 2]]
            assert [c.rows for c in dec.cohorts] == [1, 2]
        out = dec.step(torch.cat([forced[old, 3 + t], new_forced[new, t]]))
        torch.testing.assert_close(out[: len(old)], ref[old, 4 + t], atol=ATOL, rtol=1e-4, msg=f"old rows, t={t}")
        torch.testing.assert_close(out[len(old) :], new_ref[new, 1 + t], atol=ATOL, rtol=1e-4, msg=f"new, t={t}")
    dec.keep(torch.tensor([1, 2]))  # the first cohort has no rows left and is dropped
    assert len(dec.cohorts) == 1 and dec.cohorts[0].rows == 2


@pytest.mark.parametrize("kind", ["llama_tied", "qwen2_bias_gqa"])
@pytest.mark.parametrize("dec_kind", ["hf", "llama"])
def test_load_state_dict_updates_weights(kind, dec_kind):
    model = _tiny(kind)
    ids, mask, forced = _batch(seed=5)
    ref_old = _reference(model, ids, mask, forced)
    # HFDecoder shares (and mutates) the model it wraps; keep an untouched perturbed copy for the reference
    dec_model = copy.deepcopy(model) if dec_kind == "hf" else model
    dec = _make(dec_kind, dec_model)
    perturbed = copy.deepcopy(model)
    with torch.no_grad():
        g = torch.Generator().manual_seed(7)
        for p in perturbed.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    ref_new = _reference(perturbed, ids, mask, forced)
    assert (ref_new - ref_old).abs().max() > 1e-2

    dec.load_state_dict(perturbed.state_dict())
    outs, _ = _run(dec, ids, mask, forced)
    for t, logits in enumerate(outs):
        torch.testing.assert_close(logits, ref_new[:, t], atol=ATOL, rtol=1e-4)
    with pytest.raises(KeyError):
        dec.load_state_dict({"model.not_a_param.weight": torch.zeros(1)})


def test_make_decoder_dispatch():
    assert isinstance(make_decoder(_tiny("llama_tied")), LlamaDecoder)
    assert isinstance(make_decoder(_tiny("qwen2_bias_gqa")), LlamaDecoder)
    assert isinstance(make_decoder(_tiny("llama_tied"), prefer="hf"), HFDecoder)
    gpt2 = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=1, n_head=2, n_positions=64)
    ).eval()
    dec = make_decoder(gpt2)
    assert isinstance(dec, HFDecoder) and isinstance(dec, Decoder)
    # generic fallback works on a non-Llama model too
    ids, mask, forced = _batch()
    ref = _reference(gpt2, ids, mask, forced)
    outs, _ = _run(dec, ids, mask, forced)
    for t, logits in enumerate(outs):
        torch.testing.assert_close(logits, ref[:, t], atol=ATOL, rtol=1e-4)


def test_unsupported_features_refused():
    model = _tiny("mistral")
    model.config.sliding_window = 8
    dec = LlamaDecoder.from_hf(model)
    ids, mask, _ = _batch()
    with pytest.raises(NotImplementedError):
        dec.prefill(ids, mask, max_new_tokens=N_STEPS)  # 7 + 6 > window 8
    cfg = copy.deepcopy(_tiny("llama_tied").config)
    cfg.rope_parameters = {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}
    with pytest.raises(NotImplementedError):
        LlamaDecoder.from_config(cfg, _tiny("llama_tied").state_dict())


def test_bf16_close_to_fp32():
    model = _tiny("qwen2_bias_gqa")
    ids, mask, forced = _batch()
    ref = _reference(model, ids, mask, forced)
    dec = LlamaDecoder.from_hf(model, dtype=torch.bfloat16)
    outs, _ = _run(dec, ids, mask, forced)
    for t, logits in enumerate(outs):
        assert logits.dtype == torch.float32
        assert (logits - ref[:, t]).abs().max() < 0.1 * ref[:, t].abs().max() + 0.05


@pytest.mark.parametrize("prefer", ["llama", "hf"])
def test_make_decoder_in_another_dtype(prefer):
    # bf16 rollouts of an fp32 policy: the HF fallback decodes a bf16 copy, the policy stays fp32; both
    # decoders agree with the bf16 model's own full forward to bf16 rounding
    model = _tiny("qwen2_bias_gqa")
    dec = make_decoder(model, prefer=prefer, dtype=torch.bfloat16)
    assert next(model.parameters()).dtype == torch.float32
    held = dec.dtype if prefer == "llama" else next(dec.model.parameters()).dtype
    assert held == torch.bfloat16
    ids, mask, forced = _batch()
    ref = _reference(copy.deepcopy(model).to(torch.bfloat16), ids, mask, forced)
    outs, _ = _run(dec, ids, mask, forced)
    for t, logits in enumerate(outs):
        assert (logits - ref[:, t]).abs().max() < 0.02 * ref[:, t].abs().max() + 0.02


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_llama_decoder_matches_hf(dtype):
    model = _tiny("qwen2_bias_gqa").to("cuda", dtype)
    ids, mask, forced = _batch()
    ref = _reference(model, ids.cuda(), mask.cuda(), forced.cuda())
    dec = make_decoder(model)
    assert isinstance(dec, LlamaDecoder) and dec.device.type == "cuda" and dec.dtype == dtype
    outs, _ = _run(dec, ids, mask, forced.cuda())
    tol = 2e-3 if dtype == torch.float32 else 0.1 * float(ref.abs().max())
    for t, logits in enumerate(outs):
        assert logits.device.type == "cuda" and logits.dtype == torch.float32
        assert (logits - ref[:, t]).abs().max() < tol
