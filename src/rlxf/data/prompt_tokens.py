"""Turning rows into prompt text (plain, or through the chat template) and prompt token ids."""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase


def render_prompt(row: dict, tokenizer: PreTrainedTokenizerBase, chat_template: bool) -> str:
    if uses_template(row, chat_template):
        messages = row["messages"] if "messages" in row else [{"role": "user", "content": row["prompt"]}]
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return row["prompt"]


def row_prompt_text(row: dict) -> str | None:
    """The row's own prompt before any template: its ``prompt`` text, else the last user message of its
    ``messages`` (None: neither). Batches carry it as metadata ``prompt_text`` for rewards that ask about the
    question itself (the ``judge``'s ``prompt_from: row``)."""
    if isinstance(row.get("prompt"), str):
        return row["prompt"]
    users = [m.get("content") for m in row.get("messages") or [] if isinstance(m, dict) and m.get("role") == "user"]
    return users[-1] if users and isinstance(users[-1], str) else None


def uses_template(row: dict, chat_template: bool) -> bool:
    return "messages" in row or chat_template


def encode_prompt_lengths(
    rows: list[dict], tokenizer: PreTrainedTokenizerBase, chat_template: bool
) -> tuple[list[str], list[list[int]]]:
    """(texts, token ids). A rendered chat template writes its own special tokens (BOS included);
    a plain ``prompt`` gets the tokenizer's, as ``tokenizer(text)`` gives them (BOS for Llama/Mistral)."""
    texts = [render_prompt(row, tokenizer, chat_template) for row in rows]
    templated = [uses_template(row, chat_template) for row in rows]
    encoded: list[list[int]] = [[] for _ in rows]
    for rendered in (True, False):  # one tokenizer call per kind
        where = [i for i, t in enumerate(templated) if t == rendered]
        if where:
            ids = tokenizer([texts[i] for i in where], add_special_tokens=not rendered)["input_ids"]
            for i, row_ids in zip(where, ids):
                encoded[i] = row_ids
    return texts, encoded


def encode_prompts(
    rows: list[dict], tokenizer: PreTrainedTokenizerBase, chat_template: bool, max_tokens: int
) -> list[list[int]]:
    texts, encoded = encode_prompt_lengths(rows, tokenizer, chat_template)
    for text, ids in zip(texts, encoded):
        if len(ids) > max_tokens:
            raise ValueError(
                f"prompt of {len(ids)} tokens exceeds data.max_prompt_tokens={max_tokens}: {text[:80]!r}"
            )
    return encoded


def reward_prompt_texts(
    rows: list[dict], tokenizer: PreTrainedTokenizerBase, chat_template: bool, max_tokens: int
) -> list[str]:
    """The prompt text a reward is given for each row: encoded as a rollout encodes it, decoded as
    ``RolloutRole.decode_prompts`` decodes it (special tokens dropped, a chat template's included)."""
    return tokenizer.batch_decode(encode_prompts(rows, tokenizer, chat_template, max_tokens), skip_special_tokens=True)
