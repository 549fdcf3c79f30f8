"""Tiny real-architecture checkpoints (Qwen2, Mistral, GPT-2) with a trained byte-level BPE tokenizer.

Built locally and saved with ``save_pretrained`` so the tests load them exactly as a user loads a hub
model: ``AutoModelForCausalLM`` / ``AutoTokenizer`` from a folder. Nothing is downloaded.
"""

from __future__ import annotations

from pathlib import Path

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import GenerationConfig, PreTrainedTokenizerFast

# ChatML, as Qwen2.5-Instruct ships it: a turn ends with <|im_end|>, not with the tokenizer's EOS.
CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = [
    "What is 12 + 7? The answer is 19.", "Hello there, how are you today?", "def add(a, b): return a + b",
    "The quick brown fox jumps over the lazy dog.", "Solve 3 * 4 = 12 and 9 - 2 = 7.", "Answer: 42",
] * 20
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<s>", "</s>"]


def build_bpe_tokenizer(with_bos: bool) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on a small corpus. ``with_bos``: Llama/Mistral style (``<s>`` prepended by
    ``tokenizer(text)``, EOS ``</s>``); else Qwen2 style (no BOS, EOS ``<|endoftext|>``, ChatML turns)."""
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    core.train_from_iterator(CORPUS, trainer)
    if with_bos:
        bos = core.token_to_id("<s>")
        core.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)])
        tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", eos_token="</s>")
    else:
        tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>")
    tokenizer.chat_template = CHATML
    return tokenizer


def _randomize(model: torch.nn.Module, seed: int) -> None:
    """Weights large enough that greedy tokens differ between positions (default init is near-uniform)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.08 * torch.randn(p.shape, generator=g))


def _config(arch: str, tokenizer: PreTrainedTokenizerFast, **extra):
    vocab = len(tokenizer)
    extra = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id, **extra}
    llama_like = dict(
        vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256,
    )
    if arch == "qwen2":
        return transformers.Qwen2Config(**llama_like, tie_word_embeddings=True, **extra)
    if arch == "mistral":
        return transformers.MistralConfig(**llama_like, sliding_window=8, **extra)
    if arch == "gpt2":
        return transformers.GPT2Config(
            vocab_size=vocab, n_embd=64, n_layer=2, n_head=4, n_positions=256, **extra
        )
    raise ValueError(arch)


def build_checkpoint(out_dir: Path, arch: str, dtype: torch.dtype = torch.float32, seed: int = 0, **extra) -> Path:
    """Save a tiny ``arch`` model + tokenizer (+ a generation_config with Qwen2.5's EOS list) to ``out_dir``."""
    tokenizer = build_bpe_tokenizer(with_bos=arch == "mistral")
    config = _config(arch, tokenizer, **extra)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config)
    _randomize(model, seed + 1)
    model = model.to(dtype)
    eos_list = [tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")]
    model.generation_config = GenerationConfig(eos_token_id=eos_list, bos_token_id=tokenizer.bos_token_id)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir
