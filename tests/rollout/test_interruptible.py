"""Interruptible generation: pause / resume equals an uninterrupted run; versions and log-probs after a
weight change."""

import copy

import pytest
import torch

from rlxf.batch import TrajectoryBatch, left_pad
from rlxf.rollout.decoders import make_decoder
from rlxf.rollout.interruptible import InterruptibleGeneration
from rlxf.rollout.sampling import SamplingParams
from rlxf.rollout.torch_engine import TorchRolloutEngine
from rlxf.train.log_probs import batch_log_probs

PARAMS = SamplingParams(n=3, temperature=1.0, max_new_tokens=12)


def prompts(tokenizer) -> list[list[int]]:
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in ("12+7=", "3+405=", "88+1=")]


def session(model, tokenizer, version=0, params=PARAMS, decoder="auto"):
    return InterruptibleGeneration(
        make_decoder(model, prefer=decoder), prompts(tokenizer), params, version, tokenizer.eos_token_id,
        tokenizer.pad_token_id, "cpu",
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pause_resume_with_same_weights_samples_the_uninterrupted_tokens(tiny_model, tokenizer, seed):
    reference = TorchRolloutEngine(tiny_model, tokenizer.eos_token_id, tokenizer.pad_token_id).generate(
        prompts(tokenizer), PARAMS, torch.Generator().manual_seed(seed)
    )
    gen = session(tiny_model, tokenizer)
    rng = torch.Generator().manual_seed(seed)
    for chunk in (1, 4, 3):  # three pauses at different depths
        gen.run(chunk, rng)
        partial = gen.pause()
        assert all(len(p.tokens) == len(p.log_probs) == len(p.versions) for p in partial)
        gen.resume(version=0)
    gen.run(None, rng)
    out = gen.result()
    assert gen.interruptions == 3
    assert torch.equal(out.response_ids, reference.response_ids)
    assert torch.equal(out.response_mask, reference.response_mask)
    assert torch.equal(out.stopped, reference.stopped)
    torch.testing.assert_close(out.log_probs, reference.log_probs, atol=1e-5, rtol=0)


def test_tokens_after_a_weight_change_carry_the_new_version_and_its_log_probs(tiny_model, tokenizer):
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=10)
    gen = session(tiny_model, tokenizer, version=4, params=params)
    rng = torch.Generator().manual_seed(0)
    gen.run(3, rng)
    partial = gen.pause()
    assert partial and all(p.versions == [4] * len(p.tokens) for p in partial)
    before = {p.row: len(p.tokens) for p in partial}

    new_model = copy.deepcopy(tiny_model)
    with torch.no_grad():
        for p in new_model.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(1)) * 0.05)
    gen.decoder.load_state_dict(new_model.state_dict())
    gen.resume(version=5)
    gen.run(None, rng)
    out = gen.result()

    mask = out.response_mask.bool()
    assert out.version == 4
    for row in range(len(out.response_ids)):
        cut = before.get(row, int(mask[row].sum()))  # rows finished before the pause are all version 4
        assert out.token_versions[row, :cut].tolist() == [4] * cut
        assert out.token_versions[row, cut:][mask[row, cut:]].tolist() == [5] * int(mask[row, cut:].sum())
    assert (out.token_versions == 5).sum() > 0

    # post-pause log-probs = a full forward pass of the new weights over prompt + response
    prompt_ids, prompt_mask = left_pad([prompts(tokenizer)[i] for i in out.prompt_index.tolist()], tokenizer.pad_token_id, "cpu")
    batch = TrajectoryBatch(prompt_ids, prompt_mask, out.response_ids, out.response_mask, out.response_mask,
                            out.prompt_index)
    full_new = batch_log_probs(new_model, batch, 8, params.temperature)
    full_old = batch_log_probs(tiny_model, batch, 8, params.temperature)
    new_tokens, old_tokens = out.token_versions == 5, (out.token_versions == 4) & mask
    torch.testing.assert_close(out.log_probs[new_tokens], full_new[new_tokens].float(), atol=1e-4, rtol=0)
    torch.testing.assert_close(out.log_probs[old_tokens], full_old[old_tokens].float(), atol=1e-4, rtol=0)
    assert (out.log_probs[new_tokens] - full_old[new_tokens]).abs().max() > 1e-3  # the weights did change


def test_resume_needs_a_pause_and_run_needs_a_resume(tiny_model, tokenizer):
    gen = session(tiny_model, tokenizer)
    with pytest.raises(RuntimeError):
        gen.resume(1)
    gen.pause()
    with pytest.raises(RuntimeError):
        gen.run(1)
    with pytest.raises(RuntimeError):
        gen.result()


@pytest.mark.parametrize(("decoder", "refills"), [("llama", 0), ("hf", 1)])
def test_a_batch_admitted_mid_generation_samples_with_correct_log_probs(tiny_model, tokenizer, decoder, refills):
    """Continuous batching: batch 1 joins while batch 0 decodes (LlamaDecoder.extend adds its rows; a
    decoder without extend re-prefills the running rows); both come back whole, in prompt-major order,
    and every recorded log-prob equals a full forward pass over prompt + response."""
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=10)
    gen = session(tiny_model, tokenizer, params=params, decoder=decoder)
    rng = torch.Generator().manual_seed(0)
    gen.run(3, rng)
    running = gen.active_rows
    assert 0 < running <= 6
    second = gen.admit(prompts(tokenizer)[:2])
    assert second == 1 and gen.refills == refills and gen.active_rows == running + 4
    with pytest.raises(RuntimeError):
        gen.take(1)
    gen.run(None, rng)
    assert gen.batch_finished(0) and gen.batch_finished(1)
    outs = {1: gen.take(1), 0: gen.take(0)}  # any order
    assert gen.unfinished_rows == 0 and not gen.batch_prompts and len(gen.done) == 0
    for batch_id, out in outs.items():
        rows = prompts(tokenizer)[: 3 if batch_id == 0 else 2]
        assert out.prompt_index.tolist() == [i for i in range(len(rows)) for _ in range(2)]
        prompt_ids, prompt_mask = left_pad([rows[i] for i in out.prompt_index.tolist()], tokenizer.pad_token_id, "cpu")
        batch = TrajectoryBatch(prompt_ids, prompt_mask, out.response_ids, out.response_mask, out.response_mask,
                                out.prompt_index)
        full = batch_log_probs(tiny_model, batch, 8, params.temperature)
        mask = out.response_mask.bool()
        torch.testing.assert_close(out.log_probs[mask], full[mask].float(), atol=1e-4, rtol=0)


def test_length_groups_split_a_long_tail_from_the_short_rows():
    from rlxf.rollout.interruptible import length_groups

    assert length_groups([5, 9, 7, 12]) == [[0, 1, 2, 3]]  # alike: one group, rows in order
    assert length_groups([6, 150, 8, 40, 200, 7]) == [[0, 2, 5], [3], [1, 4]]
    assert length_groups([]) == []


def test_a_resume_puts_a_long_tail_and_fresh_rows_in_caches_of_their_own(tiny_model, tokenizer):
    """Batch 0 decodes 45 tokens, batch 1 joins, a pause and resume re-prefills both: the long rows and
    the fresh ones get one cache each; every log-prob still equals a full forward pass."""
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=60)
    gen = InterruptibleGeneration(make_decoder(tiny_model), prompts(tokenizer)[:2], params, 0, -1,  # no EOS
                                  tokenizer.pad_token_id, "cpu")
    rng = torch.Generator().manual_seed(0)
    gen.run(45, rng)
    gen.pause()
    gen.admit(prompts(tokenizer)[2:])
    gen.resume(0)
    assert [(c.rows, c.cur) for c in gen.decoder.cohorts] == [(2, 5), (4, 45 + 6)]  # "88+1=" / "3+405=" + 45
    gen.run(None, rng)
    for batch_id, rows in ((0, prompts(tokenizer)[:2]), (1, prompts(tokenizer)[2:])):
        out = gen.take(batch_id)
        assert out.response_mask.sum(1).tolist() == [60] * len(out.response_ids)
        prompt_ids, prompt_mask = left_pad([rows[i] for i in out.prompt_index.tolist()], tokenizer.pad_token_id, "cpu")
        batch = TrajectoryBatch(prompt_ids, prompt_mask, out.response_ids, out.response_mask, out.response_mask,
                                out.prompt_index)
        full = batch_log_probs(tiny_model, batch, 8, params.temperature)
        torch.testing.assert_close(out.log_probs, full.float(), atol=1e-4, rtol=0)
