"""The rollout producer of loop: rl_async: new weights mid-batch interrupt generation; the staleness wait."""

import copy

import torch

from rlxf.data.prompts import PromptStream
from rlxf.loops.async_producer import RolloutProducer, sample_versions
from rlxf.roles.rollout import RolloutRole
from rlxf.rollout.engine import build_engine
from rlxf.rollout.interruptible import InterruptibleGeneration
from rlxf.rollout.sampling import SamplingParams
from rlxf.runtime.weight_sync import pack_weights

ROWS = [{"prompt": p} for p in ("12+7=", "3+405=", "88+1=", "9+9=")]


def producer_for(model, tokenizer, chunk_steps=3, max_staleness=1, queue_size=1, interruptible=True,
                 admit_below_rows=None) -> RolloutProducer:
    rollout = RolloutRole(build_engine("torch", model, tokenizer.eos_token_id, tokenizer.pad_token_id), tokenizer,
                          False, 64)
    return RolloutProducer(
        rollout, lambda batch: {}, PromptStream(ROWS, seed=0), 2, SamplingParams(n=2, max_new_tokens=12),
        torch.Generator().manual_seed(0), max_staleness, queue_size, chunk_steps, interruptible, first_index=1,
        admit_below_rows=admit_below_rows,
    )


def post_after_first_chunk(monkeypatch, producer: RolloutProducer, weights) -> None:
    """``weights`` reach ``producer`` right after its first decode chunk (once)."""
    original_run = InterruptibleGeneration.run
    posted = []

    def run_then_post(self, steps=None, generator=None):
        finished = original_run(self, steps, generator)
        if not posted:
            producer.post_weights(weights)
            posted.append(True)
        return finished

    monkeypatch.setattr(InterruptibleGeneration, "run", run_then_post)


def perturbed(model, version: int):
    new = copy.deepcopy(model)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(version)) * 0.05)
    return pack_weights(new.state_dict(), version, 2**20)


def test_weights_posted_mid_batch_interrupt_and_version_the_tokens(tiny_model, tokenizer, monkeypatch):
    producer = producer_for(tiny_model, tokenizer, chunk_steps=3)
    post_after_first_chunk(monkeypatch, producer, perturbed(tiny_model, 1))
    producer.start()
    try:
        item = producer.get()
    finally:
        producer.stop()
    batch = item.batch
    assert item.interruptions == 1 and producer.rollout.version == 1
    for row in range(len(batch)):
        length = int(batch.response_mask[row].sum())
        versions = batch.policy_version[row, :length].tolist()
        cut = min(3, length)
        assert versions == [0] * cut + [1] * (length - cut)
    assert (batch.policy_version == 1).any()
    assert sample_versions(batch).tolist() == [0] * len(batch)
    assert item.data_position == 2


def test_producer_waits_for_weights_that_keep_the_bound(tiny_model, tokenizer):
    producer = producer_for(tiny_model, tokenizer, max_staleness=0)
    producer.start()
    try:
        first = producer.get()
        assert first.index == 1 and sample_versions(first.batch).tolist() == [0] * 4
        # item 2 needs version 1 (staleness 0): nothing comes until the weights do
        producer.post_weights(perturbed(tiny_model, 1))
        second = producer.get()
        assert second.index == 2 and sample_versions(second.batch).min() == 1
        assert producer.max_queued <= 1
    finally:
        producer.stop()
    assert not producer.is_alive()
