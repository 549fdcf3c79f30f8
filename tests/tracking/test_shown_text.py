"""Logged text keeps the chat template's special tokens and drops only the padding, even when the pad
token is a real special token of the template (SmolLM2 pads with <|im_end|>)."""

import torch

from rlxf.batch import TrajectoryBatch
from rlxf.models.shown_text import shown_texts
from rlxf.tracking.rollout_rows import rollout_rows
from tests.real_checkpoints.builders import build_bpe_tokenizer


def chatml_tokenizer():
    tokenizer = build_bpe_tokenizer(with_bos=False)
    tokenizer.pad_token = "<|im_end|>"
    tokenizer.padding_side = "left"
    return tokenizer


def test_a_chat_prompt_is_logged_as_the_model_saw_it():
    tokenizer = chatml_tokenizer()
    chats = [[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 12 + 7?"}],
             [{"role": "user", "content": "Hello"}]]
    texts = [tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in chats]
    encoded = tokenizer(texts, padding=True, return_tensors="pt", add_special_tokens=False)
    assert int(encoded.attention_mask[1].sum()) < encoded.input_ids.shape[1]  # row 1 is left-padded
    pad = tokenizer.pad_token_id
    written = [tokenizer.encode("19") + [pad], tokenizer.encode("Hi there") + [pad]]  # each ends with its EOS
    width = max(map(len, written)) + 1
    response_ids = torch.tensor([r + [pad] * (width - len(r)) for r in written])
    response_mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in written])
    batch = TrajectoryBatch(prompt_ids=encoded.input_ids, prompt_mask=encoded.attention_mask,
                            response_ids=response_ids, response_mask=response_mask, loss_mask=response_mask.clone(),
                            group_ids=torch.tensor([0, 1]), metadata=[{}, {}])
    rows = rollout_rows(batch, tokenizer, step=1, limit=2)
    assert [r["prompt"] for r in rows] == [
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 12 + 7?<|im_end|>\n<|im_start|>assistant\n",
        "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",  # its left padding (<|im_end|> x n) dropped
    ]
    assert [r["response"] for r in rows] == ["19<|im_end|>", "Hi there<|im_end|>"]  # the EOS it wrote, once
    # what a reward reads is unchanged: words only
    assert tokenizer.batch_decode(batch.prompt_ids, skip_special_tokens=True)[1] == "user\nHello\nassistant\n"


def test_shown_texts_reads_only_the_masked_tokens():
    tokenizer = chatml_tokenizer()
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    ids = torch.tensor([[end, end] + tokenizer.encode("Answer: 42") + [end]])
    mask = torch.tensor([[0, 0] + [1] * (ids.shape[1] - 2)])
    assert shown_texts(tokenizer, ids, mask) == ["Answer: 42<|im_end|>"]
