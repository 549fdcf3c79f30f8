"""The producer's admission knobs: ``async_rl.interruptible: false`` (new weights wait for the running rows
to finish: no sequence mixes two policies) and ``admit_below_rows`` (a new batch joins only while at
most that many rows decode)."""

import torch

from rlxf.data.prompts import PromptStream
from rlxf.loops.async_producer import RolloutProducer, sample_versions
from rlxf.roles.rollout import RolloutRole
from rlxf.rollout.engine import build_engine
from rlxf.rollout.interruptible import InterruptibleGeneration
from rlxf.rollout.sampling import SamplingParams
from tests.loops.test_async_producer import ROWS, perturbed


def producer(model, tokenizer, interruptible=True, admit_below_rows=None, max_staleness=1, queue_size=1):
    rollout = RolloutRole(build_engine("torch", model, tokenizer.eos_token_id, tokenizer.pad_token_id), tokenizer,
                          False, 64)
    return RolloutProducer(
        rollout, lambda batch: {}, PromptStream(ROWS, seed=0), 2, SamplingParams(n=2, max_new_tokens=12),
        torch.Generator().manual_seed(0), max_staleness=max_staleness, queue_size=queue_size, chunk_steps=3,
        interruptible=interruptible, first_index=1, admit_below_rows=admit_below_rows,
    )


def test_without_interruption_posted_weights_wait_for_the_running_rows(tiny_model, tokenizer, monkeypatch):
    made = producer(tiny_model, tokenizer, interruptible=False)
    original_run = InterruptibleGeneration.run
    posted = []

    def run_then_post(self, steps=None, generator=None):
        finished = original_run(self, steps, generator)
        if not posted:  # new weights arrive after the first chunk of 3 tokens
            made.post_weights(perturbed(tiny_model, 1))
            posted.append(True)
        return finished

    monkeypatch.setattr(InterruptibleGeneration, "run", run_then_post)
    made.start()
    try:
        items = [made.get() for _ in range(3)]
    finally:
        made.stop()
    # batches 1 and 2 were decoding when the weights came after 3 tokens: they finish on the old weights
    assert max(items[0].batch.response_lengths) > 3
    for item in items[:2]:
        assert item.interruptions == 0 and (item.batch.policy_version == 0).all()
    assert sample_versions(items[2].batch).tolist() == [1] * len(items[2].batch)  # loaded before batch 3


def test_admit_below_rows_zero_decodes_one_batch_at_a_time(tiny_model, tokenizer):
    inflight = {}
    for admit in (None, 0):
        made = producer(tiny_model, tokenizer, admit_below_rows=admit, max_staleness=2, queue_size=2)
        made.start()
        try:
            items = [made.get() for _ in range(3)]
        finally:
            made.stop()
        assert [i.index for i in items] == [1, 2, 3]
        inflight[admit] = made.max_inflight
    assert inflight == {None: 3, 0: 1}  # all three bounded batches at once, or one after the other
