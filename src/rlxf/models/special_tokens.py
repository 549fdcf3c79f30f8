"""Which tokens end a turn and which stop generation, as the checkpoint itself says.

A chat model often ends an assistant turn with a token other than the tokenizer's EOS (Qwen2.5:
``<|im_end|>`` while ``tokenizer.eos_token`` is ``<|endoftext|>``) and lists several stop tokens in
``generation_config.eos_token_id``. Training targets must end with the turn's end token, and
generation must stop at any of the listed tokens, or the model learns and samples the wrong ending.
"""

from __future__ import annotations

MARK = "\u2063rlxf-target\u2063"  # an invisible separator nobody writes: locates the answer in the rendering


def end_of_turn_id(tokenizer) -> int:
    """The first special token the chat template writes after an assistant message; the tokenizer's
    EOS when there is no template or the template ends a turn with no special token."""
    if not getattr(tokenizer, "chat_template", None):
        return tokenizer.eos_token_id
    messages = [{"role": "user", "content": "x"}, {"role": "assistant", "content": MARK}]
    rendered = tokenizer.apply_chat_template(messages, tokenize=False)
    if MARK not in rendered:
        return tokenizer.eos_token_id
    after = tokenizer(rendered.split(MARK, 1)[1], add_special_tokens=False)["input_ids"]
    special = set(tokenizer.all_special_ids) | {
        i for i, token in tokenizer.added_tokens_decoder.items() if token.special
    }
    return next((i for i in after if i in special), tokenizer.eos_token_id)


def stop_token_ids(tokenizer, model=None) -> list[int]:
    """Every token that ends generation: ``generation_config.eos_token_id`` (an int or a list), the
    tokenizer's EOS and the chat template's end of turn; in that order, without repeats."""
    listed = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    listed = [listed] if isinstance(listed, int) else list(listed or [])
    ids = [*listed, tokenizer.eos_token_id, end_of_turn_id(tokenizer)]
    return list(dict.fromkeys(i for i in ids if i is not None))
