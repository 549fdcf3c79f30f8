"""Turning rows into prompt text (plain, or through the chat template) and prompt token ids."""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase


def render_prompt(row: dict, tokenizer: PreTrainedTokenizerBase, chat_template: bool) -> str:
    if "messages" in row:
        return tokenizer.apply_chat_template(row["messages"], tokenize=False, add_generation_prompt=True)
    if chat_template:
        messages = [{"role": "user", "content": row["prompt"]}]
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return row["prompt"]


def encode_prompts(
    rows: list[dict], tokenizer: PreTrainedTokenizerBase, chat_template: bool, max_tokens: int
) -> list[list[int]]:
    texts = [render_prompt(row, tokenizer, chat_template) for row in rows]
    encoded = tokenizer(texts, add_special_tokens=False)["input_ids"]
    for text, ids in zip(texts, encoded):
        if len(ids) > max_tokens:
            raise ValueError(
                f"prompt of {len(ids)} tokens exceeds data.max_prompt_tokens={max_tokens}: {text[:80]!r}"
            )
    return encoded
