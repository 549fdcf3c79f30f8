"""A character-level tokenizer built locally (no downloads), saved and loaded with transformers.

Every printable ASCII character plus newline is one token, so arithmetic and short text round-trip
exactly. It is a real ``PreTrainedTokenizerFast`` with a chat template: ``AutoTokenizer`` loads it
from the saved folder like any hub tokenizer.
"""

from __future__ import annotations

import string

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIAL_TOKENS = [PAD, BOS, EOS, UNK]
CHARACTERS = [c for c in string.printable if c not in "\t\r\x0b\x0c"]

# Plain-text chat format: a role line, the content, a blank line. The template ends the
# assistant's turn with EOS so SFT on chats teaches the model to stop.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ message['role'] }}: {{ message['content'] }}\n"
    "{% if message['role'] == 'assistant' %}{{ eos_token }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + CHARACTERS)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer
