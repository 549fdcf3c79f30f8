import pytest
import torch

from rlxf.batch import TrajectoryBatch
from rlxf.data.sft_examples import sft_batch
from rlxf.loops.sft import sft_loss


def test_sft_batch_masks_prompt_and_ends_with_eos(tokenizer):
    rows = [{"prompt": "12+3=", "sft_target": "15"}, {"prompt": "1+1=", "sft_target": "2"}]
    batch = sft_batch(rows, tokenizer, chat_template=False, max_prompt_tokens=32)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    assert batch.prompt_mask.tolist() == [[1, 1, 1, 1, 1], [0, 1, 1, 1, 1]]
    assert batch.prompt_ids[1, 0] == pad
    # responses: "15</s>" and "2</s><pad>" — the loss covers the answer and EOS, never padding
    assert batch.loss_mask.tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch.response_ids[0, 2] == eos and batch.response_ids[1, 1] == eos and batch.response_ids[1, 2] == pad
    assert tokenizer.decode(batch.response_ids[0, :2]) == "15"


def test_sft_loss_is_token_mean_nll(tiny_model, tokenizer):
    rows = [{"prompt": "12+3=", "sft_target": "15"}, {"prompt": "1+1=", "sft_target": "2"}]
    batch = sft_batch(rows, tokenizer, chat_template=False, max_prompt_tokens=32)
    loss, _ = sft_loss(tiny_model, batch)
    logits = tiny_model(batch.input_ids, attention_mask=batch.attention_mask,
                        position_ids=(batch.attention_mask.cumsum(-1) - 1).clamp(min=0)).logits
    logp = logits[:, 4:-1].log_softmax(-1).gather(-1, batch.response_ids[..., None]).squeeze(-1)
    expected = -(logp * batch.loss_mask).sum() / batch.loss_mask.sum()
    assert torch.allclose(loss, expected, atol=1e-5)


def test_sft_chat_rows_use_the_template(tokenizer):
    rows = [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}]
    batch = sft_batch(rows, tokenizer, chat_template=False, max_prompt_tokens=64)
    assert tokenizer.decode(batch.prompt_ids[0]) == "user: hi\nassistant: "
    assert tokenizer.decode(batch.response_ids[0, :2]) == "yo"


def _batch(prompt_lens, response_lens):
    rows = len(prompt_lens)
    p, r = max(prompt_lens), max(response_lens)
    prompt_mask = torch.tensor([[0] * (p - n) + [1] * n for n in prompt_lens])
    response_mask = torch.tensor([[1] * n + [0] * (r - n) for n in response_lens])
    return TrajectoryBatch(
        prompt_ids=prompt_mask * 7, prompt_mask=prompt_mask, response_ids=response_mask * 9,
        response_mask=response_mask, loss_mask=response_mask.clone(), group_ids=torch.arange(rows),
        rewards=torch.arange(rows).float(), metadata=[{"i": i} for i in range(rows)],
    )


def test_concat_repads_left_prompts_and_right_responses():
    a, b = _batch([2], [3]), _batch([4, 1], [1, 2])
    merged = TrajectoryBatch.concat([a, b], pad_id=0)
    assert merged.prompt_mask.tolist() == [[0, 0, 1, 1], [1, 1, 1, 1], [0, 0, 0, 1]]
    assert merged.response_mask.tolist() == [[1, 1, 1], [1, 0, 0], [1, 1, 0]]
    assert merged.rewards.tolist() == [0.0, 0.0, 1.0] and [m["i"] for m in merged.metadata] == [0, 0, 1]


def test_select_picks_rows_and_metadata():
    batch = _batch([1, 2, 3], [1, 2, 3]).select([2, 0])
    assert batch.response_lengths.tolist() == [3, 1] and [m["i"] for m in batch.metadata] == [2, 0]


def _sft_gradient(model, batch, micro_batch_size):
    from rlxf.loops.sft import sft_step_inputs

    model.zero_grad()
    micro_batches, loss_of = sft_step_inputs(model, batch, micro_batch_size)
    total = 0.0
    for micro in micro_batches:
        loss, _ = loss_of(micro)
        loss.backward()
        total += float(loss.detach())
    return total, torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]), micro_batches


def test_sft_micro_batches_give_the_whole_batch_token_mean_and_its_gradient(tiny_model, tokenizer):
    rows = [{"prompt": "12+3=", "sft_target": "15"}, {"prompt": "1+1=", "sft_target": "2"},
            {"prompt": "999+1=", "sft_target": "1000 is the sum"}, {"prompt": "7+7=", "sft_target": "14."}]
    batch = sft_batch(rows, tokenizer, chat_template=False, max_prompt_tokens=32)
    whole_loss, whole_grad, _ = _sft_gradient(tiny_model, batch, None)
    expected, _ = sft_loss(tiny_model, batch)
    assert whole_loss == pytest.approx(float(expected), abs=1e-6)
    for size in (1, 3):
        loss, grad, micro_batches = _sft_gradient(tiny_model, batch, size)
        assert [len(m) for m in micro_batches] == ([1, 1, 1, 1] if size == 1 else [3, 1])
        # shorter targets first, each micro-batch cut to its own longest target (+ EOS)
        widths = [m.response_ids.shape[1] for m in micro_batches]
        assert widths == sorted(widths) and widths[0] < batch.response_ids.shape[1]
        assert loss == pytest.approx(whole_loss, abs=1e-5)
        torch.testing.assert_close(grad, whole_grad, atol=1e-6, rtol=1e-5)
