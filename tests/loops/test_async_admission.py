"""The producer's admission knobs: ``async_rl.interruptible: false`` (new weights wait for the running rows
to finish: no sequence mixes two policies) and ``admit_below_rows`` (a new batch joins only while at
most that many rows decode)."""

from rlxf.loops.async_producer import sample_versions
from tests.loops.test_async_producer import perturbed, post_after_first_chunk, producer_for


def test_without_interruption_posted_weights_wait_for_the_running_rows(tiny_model, tokenizer, monkeypatch):
    made = producer_for(tiny_model, tokenizer, interruptible=False)
    post_after_first_chunk(monkeypatch, made, perturbed(tiny_model, 1))  # after the first chunk of 3 tokens
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
        made = producer_for(tiny_model, tokenizer, admit_below_rows=admit, max_staleness=2, queue_size=2)
        made.start()
        try:
            items = [made.get() for _ in range(3)]
        finally:
            made.stop()
        assert [i.index for i in items] == [1, 2, 3]
        inflight[admit] = made.max_inflight
    assert inflight == {None: 3, 0: 1}  # all three bounded batches at once, or one after the other
